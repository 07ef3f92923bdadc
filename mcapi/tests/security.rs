//! The control plane against what the job does not trust (docs/security.md): raw-socket
//! clients without the key sending garbage, truncated and huge frames, a channel connect, a
//! forged Hello and a credit request while two nodes of the job play ping-pong; a node of
//! the job with another key; another job reaching a node through a stale topology; job
//! directories others could write into, a job across hosts without a key and an unsafe key
//! file, each refused at initialize with the reason logged (child processes).

mod common;

use libtest_mimic::{Arguments, Failed, Trial};
use mcapi::config::{Config, JobKey, Topology};
use mcapi::{EndpointId, Node, Status};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const KEY: &str = "security-test-key-0123456789";

fn main() {
    if let Ok(case) = std::env::var("MCAPI_SECURITY_CHILD") {
        child(&case);
        return;
    }
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let trials = vec![
        Trial::test("hostile_clients_during_a_ping_pong", hostile_clients),
        Trial::test("node_with_another_key_is_refused", another_key),
        Trial::test(
            "jobs_with_other_keys_never_meet_over_tcp",
            other_job_over_tcp,
        ),
        Trial::test("unsafe_setups_refused_with_the_reason", unsafe_setups),
        Trial::test(
            "a_flood_of_idle_connections_stays_bounded",
            idle_connection_flood,
        ),
        Trial::test(
            "a_client_of_another_uid_is_refused_by_so_peercred",
            another_uid,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}

fn config(job: &str) -> Config {
    let mut c = Config::defaults();
    c.job = job.into();
    c.recv_buffers = 16;
    c
}

fn key(k: &str) -> Option<JobKey> {
    Some(JobKey::new(k.as_bytes()).unwrap())
}

/// What a raw client gets back before the node closes the connection: nothing, for every
/// attempt without the key.
fn answer_to(path: &Path, bytes: &[u8], half_close: bool) -> Result<Vec<u8>, Failed> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    // The node may close while we still write: that is a refusal too.
    _ = s.write_all(bytes);
    if half_close {
        _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok(got),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(got),
        Err(e) => Err(format!("no end of connection: {e}").into()),
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// The frames a hostile client tries, in the wire format (docs/design.md).
fn hostile_frames(port: u32, peer: EndpointId) -> Vec<(&'static str, Vec<u8>)> {
    let mut connect = vec![9];
    connect.extend_from_slice(&port.to_le_bytes());
    connect.push(1); // connect
    connect.extend_from_slice(&peer.as_raw().to_le_bytes());
    connect.extend_from_slice(&[0, 0]); // packet, send end
    let mut hello = vec![1];
    for w in [1u32, 0, 2, 0] {
        hello.extend_from_slice(&w.to_le_bytes()); // version, domain, node 2, peer
    }
    hello.extend_from_slice(&0xbad_u64.to_le_bytes()); // a new "run" of node 2
    hello.extend_from_slice(&4u32.to_le_bytes());
    hello.extend_from_slice(&[1, 2, 3, 4]);
    let mut credit = vec![7];
    for w in [port, 1 << 20, 0] {
        credit.extend_from_slice(&w.to_le_bytes());
    }
    let mut truncated = frame(&connect);
    truncated.truncate(9);
    vec![
        ("garbage", b"GET / HTTP/1.0\r\n\r\n".repeat(4)),
        ("truncated frame", truncated),
        ("huge length", u32::MAX.to_le_bytes().to_vec()),
        ("channel connect", frame(&connect)),
        ("forged hello", frame(&hello)),
        ("credit request", frame(&credit)),
    ]
}

/// Raw clients without the key hit node <0,1> while nodes <0,1> and <0,2> play ping-pong:
/// every attempt is closed unanswered, the ping-pong loses nothing, and the endpoint
/// attacked still takes messages afterwards.
fn hostile_clients() -> Result<(), Failed> {
    let job = format!("sec-hostile-{}", std::process::id());
    let mut cfg = config(&job);
    cfg.provider = Some("tcp".into());
    let a = Node::initialize(0, 1, cfg.clone())?;
    let b = Node::initialize(0, 2, cfg.clone())?;
    let ea = a.endpoint_create(5)?;
    let eb = b.endpoint_create(6)?;
    a.set_endpoint_timeout(ea, WAIT)?;
    b.set_endpoint_timeout(eb, WAIT)?;
    let to_a = b.endpoint_get(0, 1, 5, WAIT)?;
    let attacked = Arc::new(AtomicBool::new(false));
    let echo = {
        let a = a.clone();
        std::thread::spawn(move || -> Result<u32, Status> {
            let mut buf = [0u8; 8];
            let back = a.endpoint_get(0, 2, 6, WAIT)?;
            let mut n = 0;
            loop {
                let len = a.msg_recv(ea, &mut buf)?;
                if len == 0 {
                    return Ok(n);
                }
                a.msg_send(ea, back, &buf[..len], 1)?;
                n += 1;
            }
        })
    };
    let player = {
        let (b, attacked) = (b.clone(), attacked.clone());
        std::thread::spawn(move || -> Result<u32, Status> {
            let mut buf = [0u8; 8];
            let mut i = 0u32;
            // At least 500 rounds, and on until the attack is over.
            while i < 500 || !attacked.load(Ordering::SeqCst) {
                b.msg_send(eb, to_a, &i.to_le_bytes(), 1)?;
                let len = b.msg_recv(eb, &mut buf)?;
                assert_eq!(&buf[..len], &i.to_le_bytes(), "round {i}");
                i += 1;
            }
            b.msg_send(eb, to_a, &[], 1)?;
            Ok(i)
        })
    };
    let path = cfg.runtime_dir.join(&job).join("d0n1.sock");
    for round in 0..3 {
        for (what, bytes) in hostile_frames(5, eb) {
            // Each alone, then padded past the handshake's first message, then after a
            // handshake attempt with a wrong proof.
            let got = answer_to(&path, &bytes, true)?;
            if !got.is_empty() {
                return Err(format!("{what}: answered {got:?}").into());
            }
            let mut padded = bytes.clone();
            padded.extend_from_slice(&[0; 64]);
            let got = answer_to(&path, &padded, false)?;
            if !got.is_empty() {
                return Err(format!("{what} (padded): answered {got:?}").into());
            }
            let mut forged = b"MCAPIKEY".to_vec();
            forged.extend_from_slice(&1u32.to_le_bytes());
            forged.extend_from_slice(&[round; 32]); // nonce
            forged.extend_from_slice(&[7; 32]); // a proof without the key
            forged.extend_from_slice(&bytes);
            let got = answer_to(&path, &forged, true)?;
            // The node's challenge and proof (76 bytes), then "refused" and the end.
            if got.len() != 77 || got[76] != 0 {
                return Err(format!("{what} after a wrong proof: answered {got:?}").into());
            }
        }
    }
    attacked.store(true, Ordering::SeqCst);
    let rounds = player.join().map_err(|_| "player panicked")??;
    let echoed = echo.join().map_err(|_| "echo panicked")??;
    if rounds != echoed {
        return Err(format!("{rounds} rounds, {echoed} echoed").into());
    }
    // The endpoint attacked is neither connected to a channel nor out of credits.
    let mut buf = [0u8; 8];
    for burst in 0..10u32 {
        // Within the endpoint's 16 buffers, so one thread can send and then receive.
        for i in 0..10 {
            b.msg_send(eb, to_a, &(burst * 10 + i).to_le_bytes(), 0)?;
        }
        for i in 0..10 {
            let len = a.msg_recv(ea, &mut buf)?;
            assert_eq!(&buf[..len], &(burst * 10 + i).to_le_bytes());
        }
    }
    b.finalize()?;
    a.finalize()?;
    Ok(())
}

/// A node of the same job with another key cannot reach the job's nodes; one with the key
/// can.
fn another_key() -> Result<(), Failed> {
    let job = format!("sec-key-{}", std::process::id());
    let mut good = config(&job);
    good.job_key = key(KEY);
    let mut bad = good.clone();
    bad.job_key = key("not-the-job-key-0123456789");
    let a = Node::initialize(0, 11, good.clone())?;
    a.endpoint_create(1)?;
    let stranger = Node::initialize(0, 12, bad)?;
    match stranger.endpoint_get(0, 11, 1, Some(Duration::from_secs(5))) {
        Err(Status::MCAPI_ERR_TRANSMISSION) => {}
        other => return Err(format!("another key got {other:?}").into()),
    }
    let member = Node::initialize(0, 13, good)?;
    member.endpoint_get(0, 11, 1, WAIT)?;
    for n in [member, stranger, a] {
        n.finalize()?;
    }
    Ok(())
}

/// Two jobs, each with its key, where one's topology (stale) names the other's node: the
/// stranger is refused. Each node listens on its topology address only.
fn other_job_over_tcp() -> Result<(), Failed> {
    let base = 47600 + (std::process::id() % 100) as u16 * 2;
    let topology = Topology::parse(&format!(
        "0 21 127.0.0.1:{base}\n0 22 127.0.0.1:{}\n",
        base + 1
    ))?;
    let mut ja = config(&format!("sec-tcp-a-{}", std::process::id()));
    ja.topology = Some(topology.clone());
    ja.job_key = key(KEY);
    let mut jb = config(&format!("sec-tcp-b-{}", std::process::id()));
    jb.topology = Some(topology);
    jb.job_key = key("the-other-jobs-key-0123456789");
    let a = Node::initialize(0, 21, ja)?;
    a.endpoint_create(1)?;
    // Bound to 127.0.0.1 only: another loopback address is refused.
    std::net::TcpStream::connect(("127.0.0.1", base))?;
    match std::net::TcpStream::connect(("127.0.0.2", base)) {
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
        other => return Err(format!("127.0.0.2:{base}: {other:?}").into()),
    }
    let b = Node::initialize(0, 22, jb)?;
    match b.endpoint_get(0, 21, 1, Some(Duration::from_secs(5))) {
        Err(Status::MCAPI_ERR_TRANSMISSION) => {}
        other => return Err(format!("the other job got {other:?}").into()),
    }
    b.finalize()?;
    a.finalize()?;
    Ok(())
}

/// Setups a node must refuse to start in, each with its reason on one stderr line.
fn unsafe_setups() -> Result<(), Failed> {
    let root = std::env::temp_dir().join(format!("mcapi-sec-{}", std::process::id()));
    _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let mut failures = Vec::new();
    let mut case = |name: &str, vars: Vec<(&str, String)>, words: &[&str]| {
        if let Err(e) = expect_refused(&vars, words) {
            failures.push(format!("{name}: {e}"));
        }
    };

    // A job directory made beforehand, open to everyone.
    let rt = root.join("open");
    std::fs::create_dir_all(rt.join("job"))?;
    mode(&rt.join("job"), 0o777)?;
    case(
        "job directory mode 0777",
        vec![("MCAPI_RUNTIME_DIR", path(&rt))],
        &["initialize failed", "writable by group or others", "777"],
    );
    // A runtime directory open to everyone.
    let rt = root.join("open-rt");
    std::fs::create_dir_all(&rt)?;
    mode(&rt, 0o777)?;
    case(
        "runtime directory mode 0777",
        vec![("MCAPI_RUNTIME_DIR", path(&rt))],
        &["initialize failed", "writable by group or others"],
    );
    // A symlink to a directory elsewhere.
    let rt = root.join("link");
    std::fs::create_dir_all(&rt)?;
    std::fs::create_dir_all(root.join("elsewhere"))?;
    mode(&root.join("elsewhere"), 0o700)?;
    std::os::unix::fs::symlink(root.join("elsewhere"), rt.join("job"))?;
    case(
        "job directory a symlink",
        vec![("MCAPI_RUNTIME_DIR", path(&rt))],
        &["initialize failed", "symbolic link"],
    );
    // Owned by another user (as root: give it to nobody).
    if nix_uid() == 0 {
        let rt = root.join("theirs");
        std::fs::create_dir_all(rt.join("job"))?;
        mode(&rt.join("job"), 0o700)?;
        std::os::unix::fs::chown(rt.join("job"), Some(65534), Some(65534))?;
        case(
            "job directory of another uid",
            vec![("MCAPI_RUNTIME_DIR", path(&rt))],
            &["initialize failed", "owned by uid 65534"],
        );
    } else {
        eprintln!("not root: the case of a directory of another uid is not run");
    }
    // Across hosts without a key.
    let topo = root.join("topology");
    std::fs::write(&topo, "0 77 198.51.100.1\n0 78 198.51.100.2\n")?;
    case(
        "hosts without a key",
        vec![
            ("MCAPI_RUNTIME_DIR", path(&root.join("rt"))),
            ("MCAPI_TOPOLOGY", path(&topo)),
        ],
        &["initialize failed", "MCAPI_JOB_KEY"],
    );
    // A key file others can read.
    let key_file = root.join("key");
    std::fs::write(&key_file, KEY)?;
    mode(&key_file, 0o644)?;
    case(
        "key file mode 0644",
        vec![
            ("MCAPI_RUNTIME_DIR", path(&root.join("rt"))),
            ("MCAPI_JOB_KEY_FILE", path(&key_file)),
        ],
        &["initialize failed", "MCAPI_JOB_KEY_FILE", "chmod 600"],
    );
    _ = std::fs::remove_dir_all(&root);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n").into())
    }
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn nix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Runs `mcapi_initialize` in a child with `vars`: it must fail with
/// MCAPI_ERR_NODE_INITFAILED and one stderr line must name every word of `words`.
fn expect_refused(vars: &[(&str, String)], words: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.env("MCAPI_SECURITY_CHILD", "init")
        .env("MCAPI_JOB", "job")
        .env("MCAPI_LOG", "debug");
    for k in [
        "MCAPI_TOPOLOGY",
        "MCAPI_JOB_KEY",
        "MCAPI_JOB_KEY_FILE",
        "MCAPI_PROVIDER",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    let status = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if status != "MCAPI_ERR_NODE_INITFAILED" {
        return Err(format!("status {status}, stderr {stderr}"));
    }
    match stderr
        .lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .count()
    {
        1 => Ok(()),
        n => Err(format!("{n} lines name {words:?}; stderr: {stderr}")),
    }
}

/// 3,000 idle connections (never a byte of the handshake) to one node: its threads and
/// memory stay bounded (pending handshakes are capped; the oldest is dropped for a new one)
/// and a real node of the job still reaches it. The node runs in a child process, whose
/// threads and memory are read from /proc.
fn idle_connection_flood() -> Result<(), Failed> {
    const IDLE: usize = 3000;
    // Pending handshakes are capped at 64 threads; everything else is the node's own.
    const THREADS_ABOVE_BEFORE: u64 = 70;
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard.min(16_384), hard)?;
    let job = format!("sec-flood-{}", std::process::id());
    let mut node = Command::new(std::env::current_exe()?)
        .env("MCAPI_SECURITY_CHILD", "flood-target")
        .env("MCAPI_JOB", &job)
        .env("MCAPI_PROVIDER", "tcp")
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = std::io::BufReader::new(node.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line)?;
    if line.trim() != "ready" {
        _ = node.kill();
        return Err(format!("the node did not start: {line:?}").into());
    }
    let status = |what: &str| -> Result<u64, Failed> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", node.id()))?;
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .ok_or("no such field")?;
        Ok(value)
    };
    let (threads_before, rss_before) = (status("Threads:")?, status("VmRSS:")?);
    let path = Config::defaults().runtime_dir.join(&job).join("d0n31.sock");
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(UnixStream::connect(&path)?);
    }
    // Let the node take them all in. Threads counted at their fewest over up to 10 s of
    // looks: handshake threads dropped for newer ones may still be exiting (a count above
    // the cap for a while on a loaded host), while one thread per connection would stay
    // thousands for good.
    std::thread::sleep(Duration::from_millis(500));
    let mut threads = u64::MAX;
    let looking = std::time::Instant::now();
    while threads > threads_before + THREADS_ABOVE_BEFORE
        && looking.elapsed() < Duration::from_secs(10)
    {
        threads = threads.min(status("Threads:")?);
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss = status("VmRSS:")?;
    let start = std::time::Instant::now();
    let mut cfg = config(&job);
    cfg.provider = Some("tcp".into());
    let real = Node::initialize(0, 32, cfg)?;
    let reached = real.endpoint_get(0, 31, 5, WAIT);
    let took = start.elapsed();
    real.finalize()?;
    drop(idle);
    _ = node.kill();
    _ = node.wait();
    eprintln!(
        "  {IDLE} idle connections: threads {threads_before} -> {threads}, RSS {rss_before} -> \
         {rss} KiB; a real node reached it in {took:?}"
    );
    reached?;
    if threads > threads_before + THREADS_ABOVE_BEFORE {
        return Err(format!("{threads} threads under the flood ({threads_before} before)").into());
    }
    if rss > rss_before + 64 * 1024 {
        return Err(format!("RSS {rss} KiB under the flood ({rss_before} KiB before)").into());
    }
    Ok(())
}

/// A process of another uid that reaches the node's socket (the job directory and socket
/// opened up for it, as a careless umask or chmod would) is refused by `SO_PEERCRED`
/// before the node says anything, although it speaks the handshake; the same client run
/// as this user gets the node's challenge (so the refusal is the uid's, not the client's).
fn another_uid() -> Result<(), Failed> {
    if nix::unistd::geteuid().as_raw() != 0 {
        println!("another uid: skipped: not root (cannot run a child as another uid)");
        return Ok(());
    }
    let job = format!("sec-uid-{}", std::process::id());
    let mut cfg = config(&job);
    cfg.job_key = key(KEY);
    let node = Node::initialize(0, 41, cfg.clone())?;
    node.endpoint_create(1)?;
    let dir = cfg.runtime_dir.join(&job);
    let socket = dir.join("d0n41.sock");
    let open_up = [
        (cfg.runtime_dir.clone(), 0o711),
        (dir.clone(), 0o711),
        (socket.clone(), 0o666),
    ];
    let modes: Vec<u32> = open_up
        .iter()
        .map(|(p, _)| std::fs::metadata(p).map(|m| m.permissions().mode()))
        .collect::<Result<_, _>>()?;
    for (p, mode) in &open_up {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode))?;
    }
    let answer = |uid: Option<u32>| -> Result<usize, Failed> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env("MCAPI_SECURITY_CHILD", "handshake-client")
            .env("MCAPI_SECURITY_SOCKET", &socket)
            .stderr(Stdio::inherit());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let out = cmd.output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .map_err(|_| format!("client as {uid:?}: {text:?} ({})", out.status).into())
    };
    let as_nobody = answer(Some(65534));
    let as_me = answer(None);
    for ((p, _), mode) in open_up.iter().zip(modes) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    }
    let (as_nobody, as_me) = (as_nobody?, as_me?);
    if as_nobody != 0 || as_me == 0 {
        return Err(format!(
            "answer bytes: {as_nobody} to uid 65534 (want 0), {as_me} to this user (want > 0)"
        )
        .into());
    }
    // The refused stranger changed nothing: a member still reaches the node.
    let member = Node::initialize(0, 42, cfg)?;
    member.endpoint_get(0, 41, 1, WAIT)?;
    member.finalize()?;
    node.finalize()?;
    Ok(())
}

fn child(case: &str) {
    if case == "handshake-client" {
        // The handshake's first message: magic, version 1, a nonce (docs/security.md).
        let mut hello = b"MCAPIKEY".to_vec();
        hello.extend_from_slice(&1u32.to_le_bytes());
        hello.extend_from_slice(&[7u8; 32]);
        let socket = std::env::var("MCAPI_SECURITY_SOCKET").unwrap();
        match answer_to(Path::new(&socket), &hello, true) {
            Ok(got) => println!("{}", got.len()),
            Err(e) => println!("error: {e:?}"),
        }
        return;
    }
    if case == "flood-target" {
        let mut cfg = Config::from_env().unwrap();
        cfg.recv_buffers = 16;
        let node = Node::initialize(0, 31, cfg).unwrap();
        node.endpoint_create(5).unwrap();
        println!("ready");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let status = common::c_initialize(77);
    println!("{status}");
}
