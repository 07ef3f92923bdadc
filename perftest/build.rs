//! Records the commit the benchmark was built from (`git rev-parse --short HEAD`), so every
//! JSON result line can name it. Outside a git checkout the value is "unknown".

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let sha = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PERFTEST_GIT_SHA={sha}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rerun when HEAD moves: HEAD itself (checkout), the branch's ref (commit), packed refs.
    // Only files that exist are named: a missing one would make cargo rerun on every build.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        let head = dir.join("HEAD");
        let mut watch = vec![head.clone(), dir.join("packed-refs")];
        if let Ok(text) = std::fs::read_to_string(&head) {
            if let Some(r) = text.trim().strip_prefix("ref: ") {
                watch.push(dir.join(r));
            }
        }
        for path in watch.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
