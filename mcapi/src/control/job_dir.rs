//! The job's private directory on this host: `<runtime_dir>/<job>`, holding the nodes'
//! sockets and the generated job key.
//!
//! Both directories are created mode 0700 and, found existing, checked: a real directory
//! (not a symlink), owned by this user, writable by no one else. Whoever could write there
//! could replace a socket or the key, so anything else is refused. The runtime directory's
//! parent must not let others rename it away: owned by this user or root, and writable by
//! group or others only with the sticky bit (as /tmp).

use crate::config::JobKey;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The generated key's file name in the job directory.
const KEY_FILE: &str = "key";

/// Creates (or checks) `<runtime_dir>/<job>`; returns its path.
///
/// # Errors
/// The reason, to log: a bad job name, a directory that cannot be made, or one that is
/// not private to this user.
pub(crate) fn private_job_dir(runtime_dir: &Path, job: &str) -> Result<PathBuf, String> {
    // The job name becomes one path component: no way up or across.
    if job.is_empty() || job == "." || job == ".." || job.contains('/') || job.contains('\0') {
        return Err(format!("job name {job:?} is not a plain name"));
    }
    if let Some(parent) = runtime_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let meta = std::fs::metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let me = nix::unistd::geteuid().as_raw();
        // Others may create entries there (/tmp) but, without the sticky bit, also rename
        // ours away and put theirs in its place; its owner may do so in any case.
        let why = if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            Some(format!(
                "writable by group or others without the sticky bit (mode {:o})",
                meta.mode() & 0o7777
            ))
        } else if meta.uid() != me && meta.uid() != 0 {
            Some(format!(
                "owned by uid {}, neither this user nor root",
                meta.uid()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!(
                "{}: {why}: set MCAPI_RUNTIME_DIR elsewhere",
                parent.display()
            ));
        }
    }
    ensure_private(runtime_dir)?;
    let dir = runtime_dir.join(job);
    ensure_private(&dir)?;
    Ok(dir)
}

/// Makes `dir` mode 0700 if absent, then checks it is this user's alone.
fn ensure_private(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    check_private(dir)
}

/// Refuses a directory another user could write into.
fn check_private(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    let why = if meta.file_type().is_symlink() {
        "is a symbolic link".to_string()
    } else if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != me {
        format!("is owned by uid {}, not this user ({me})", meta.uid())
    } else if meta.mode() & 0o022 != 0 {
        format!(
            "is writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(format!(
        "the job directory {} {why}: refused (remove it, or set MCAPI_RUNTIME_DIR)",
        dir.display()
    ))
}

/// The key in the private job directory `dir`, made by the first node to look. It is
/// published whole: written to a file of its own (`O_EXCL`, 0600) and then hard-linked to
/// its name, which fails if another node was first; everyone then reads the one linked.
///
/// # Errors
/// The reason, to log (an unwritable directory, an unsafe key file).
pub(crate) fn job_key(dir: &Path) -> Result<JobKey, String> {
    let path = dir.join(KEY_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| format!("no random numbers for a job key: {e}"))?;
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut tag = [0u8; 8];
        getrandom::fill(&mut tag).map_err(|e| format!("no random numbers: {e}"))?;
        let tmp = dir.join(format!(
            ".key.{}.{:x}",
            std::process::id(),
            u64::from_le_bytes(tag)
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(hex.as_bytes()))
            .and_then(|()| match std::fs::hard_link(&tmp, &path) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
                _ => Ok(()),
            });
        // The temporary name is ours alone; the key lives on under its own name.
        _ = std::fs::remove_file(&tmp);
        written.map_err(|e| format!("cannot write the job key into {}: {e}", dir.display()))?;
    }
    JobKey::from_file(&path).map_err(|e| e.0)
}

/// Removes `<runtime_dir>/<job>` and its key when nothing else is in it (no node of the
/// job bound there, none starting): `Ok(true)` if it did.
///
/// # Errors
/// A directory or key that is there and cannot be read or removed.
pub(crate) fn remove_unused(runtime_dir: &Path, job: &str) -> io::Result<bool> {
    if job.is_empty() || job == "." || job == ".." || job.contains('/') || job.contains('\0') {
        return Ok(false);
    }
    let dir = runtime_dir.join(job);
    let entries = match std::fs::read_dir(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        entries => entries?,
    };
    for entry in entries {
        if entry?.file_name() != KEY_FILE {
            return Ok(false);
        }
    }
    match std::fs::remove_file(dir.join(KEY_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match std::fs::remove_dir(&dir) {
        Ok(()) => Ok(true),
        // Another process of the job removed it first, or a node started there meanwhile.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_unused_job_directory_is_removed_a_used_one_kept() {
        let runtime = scratch("remove");
        let dir = private_job_dir(&runtime, "once").unwrap();
        job_key(&dir).unwrap();
        std::fs::write(dir.join("d0n1.sock"), b"").unwrap();
        assert!(
            !remove_unused(&runtime, "once").unwrap(),
            "a node's socket is there"
        );
        assert!(dir.join(KEY_FILE).exists());
        std::fs::remove_file(dir.join("d0n1.sock")).unwrap();
        assert!(remove_unused(&runtime, "once").unwrap());
        assert!(!dir.exists());
        assert!(!remove_unused(&runtime, "once").unwrap(), "gone already");
        assert!(!remove_unused(&runtime, "..").unwrap());
        // Nodes that meet over TCP (a topology on this host) keep no socket there: their
        // key stays (it was removed under them).
        let dir = private_job_dir(&runtime, "over-tcp").unwrap();
        job_key(&dir).unwrap();
        let mut config = crate::config::Config::defaults();
        config.runtime_dir.clone_from(&runtime);
        config.job = "over-tcp".into();
        config.bootstrap = crate::config::Bootstrap::Topology;
        assert!(!config.remove_unused_job_dir().unwrap());
        assert!(dir.join(KEY_FILE).exists());
        config.bootstrap = crate::config::Bootstrap::Local;
        assert!(config.remove_unused_job_dir().unwrap());
        _ = std::fs::remove_dir_all(&runtime);
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mcapi-jobdir-{}-{tag}", std::process::id()));
        _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn created_private_and_key_shared() {
        let rt = scratch("ok");
        let dir = private_job_dir(&rt, "j").unwrap();
        for d in [&rt, &dir] {
            assert_eq!(std::fs::metadata(d).unwrap().mode() & 0o777, 0o700);
        }
        let k1 = job_key(&dir).unwrap();
        let k2 = job_key(&dir).unwrap();
        assert_eq!(k1, k2);
        assert_eq!(k1.as_bytes().len(), 64);
        let meta = std::fs::metadata(dir.join(KEY_FILE)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        // Racing first nodes agree on one key.
        let other = private_job_dir(&rt, "race").unwrap();
        let keys: Vec<JobKey> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| job_key(&other).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(keys.windows(2).all(|w| w[0] == w[1]));
        std::fs::remove_dir_all(&rt).unwrap();
    }

    #[test]
    fn unsafe_directories_and_names_are_refused() {
        let rt = scratch("bad");
        std::fs::DirBuilder::new().mode(0o700).create(&rt).unwrap();
        let open = rt.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_job_dir(&rt, "open").unwrap_err();
        assert!(e.contains("writable by group or others"), "{e}");
        std::os::unix::fs::symlink(&open, rt.join("link")).unwrap();
        let e = private_job_dir(&rt, "link").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        for job in ["", "..", "a/b"] {
            assert!(private_job_dir(&rt, job).is_err(), "{job:?}");
        }
        // A key file others can read is refused, not used.
        let dir = private_job_dir(&rt, "k").unwrap();
        std::fs::write(dir.join(KEY_FILE), "0123456789abcdef0123").unwrap();
        std::fs::set_permissions(dir.join(KEY_FILE), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(job_key(&dir).unwrap_err().contains("chmod 600"));
        std::fs::remove_dir_all(&rt).unwrap();
    }

    #[test]
    fn a_parent_others_could_rename_the_runtime_directory_in_is_refused() {
        let top = scratch("parent");
        std::fs::DirBuilder::new().mode(0o700).create(&top).unwrap();
        let parent = top.join("p");
        std::fs::create_dir(&parent).unwrap();
        let rt = parent.join("rt");
        for (mode, refused) in [
            (0o775, true),
            (0o757, true),
            (0o1775, false),
            (0o755, false),
        ] {
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode)).unwrap();
            let got = private_job_dir(&rt, "j");
            assert_eq!(got.is_err(), refused, "mode {mode:o}: {got:?}");
        }
        // Owned by another user (root may give it away; others cannot make the case).
        if nix::unistd::geteuid().is_root() {
            let stranger = Some(nix::unistd::Uid::from_raw(54321));
            nix::unistd::chown(&parent, stranger, None).unwrap();
            let e = private_job_dir(&rt, "j").unwrap_err();
            assert!(e.contains("owned by uid 54321"), "{e}");
        }
        std::fs::remove_dir_all(&top).unwrap();
    }
}
