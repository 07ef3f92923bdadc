//! `MCAPI_LOG` says why `mcapi_initialize` failed: a provider that does not exist, an
//! unreadable topology file, a node id another process of the job runs. Each case runs in a
//! child process (logging is set up once per process) through the C entry point, and its
//! stderr must name the cause in one line; without `MCAPI_LOG` that line is printed too
//! (errors only), with `MCAPI_LOG=off` nothing.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

fn main() {
    if let Ok(case) = std::env::var("MCAPI_DIAG_CHILD") {
        child(&case);
        return;
    }
    let job = format!("diag-{}", std::process::id());
    let mut failed = 0;
    let mut passed = 0;
    let mut check = |name: &str, ok: Result<(), String>| match ok {
        Ok(()) => {
            println!("test {name} ... ok");
            passed += 1;
        }
        Err(e) => {
            println!("test {name} ... FAILED\n  {e}");
            failed += 1;
        }
    };
    check(
        "unknown_provider",
        expect_line(
            run("init", &job, &[("MCAPI_PROVIDER", "nosuchprovider")], true),
            &[
                "initialize failed",
                "nosuchprovider",
                "not available here",
                "available:",
            ],
        ),
    );
    check(
        "unreadable_topology",
        expect_line(
            run(
                "init",
                &job,
                &[("MCAPI_TOPOLOGY", "/nonexistent/mcapi-topology")],
                true,
            ),
            &[
                "initialize failed",
                "MCAPI_TOPOLOGY=/nonexistent/mcapi-topology",
                "No such file",
            ],
        ),
    );
    // A node id another process of the job runs.
    let holder = Command::new(std::env::current_exe().unwrap())
        .env("MCAPI_DIAG_CHILD", "hold")
        .env("MCAPI_JOB", &job)
        .env("MCAPI_PROVIDER", "tcp")
        .stdout(std::process::Stdio::piped())
        .spawn();
    let taken = match holder {
        Ok(mut h) => {
            let mut line = String::new();
            let ready = h
                .stdout
                .take()
                .map(|o| std::io::BufRead::read_line(&mut std::io::BufReader::new(o), &mut line));
            let r = match ready {
                Some(Ok(_)) if line.trim() == "holding" => expect_line(
                    run("init", &job, &[("MCAPI_PROVIDER", "tcp")], true),
                    &[
                        "initialize failed",
                        "another process",
                        &job,
                        "runs this node",
                    ],
                ),
                other => Err(format!("the holder did not start: {other:?} {line:?}")),
            };
            let _ = h.kill();
            let _ = h.wait();
            r
        }
        Err(e) => Err(format!("spawn: {e}")),
    };
    check("node_id_taken", taken);
    check(
        "said_without_mcapi_log",
        expect_line(
            run("init", &job, &[("MCAPI_PROVIDER", "nosuchprovider")], false),
            &["ERROR", "initialize failed", "nosuchprovider"],
        ),
    );
    check(
        "a_rust_program_keeps_its_logger",
        match run("rust", &job, &[], false) {
            (_, status, err) if status == "MCAPI_ERR_NODE_INITFAILED" && err.is_empty() => Ok(()),
            other => Err(format!(
                "expected no logger of ours and silence, got {other:?}"
            )),
        },
    );
    check(
        "silent_with_mcapi_log_off",
        match run(
            "init",
            &job,
            &[("MCAPI_PROVIDER", "nosuchprovider"), ("MCAPI_LOG", "off")],
            false,
        ) {
            (_, status, err) if status == "MCAPI_ERR_NODE_INITFAILED" && err.is_empty() => Ok(()),
            other => Err(format!("expected a silent failure, got {other:?}")),
        },
    );
    println!("\n{passed} passed, {failed} failed");
    std::process::exit(i32::from(failed > 0));
}

/// Runs the child `case` with `vars` (and `MCAPI_LOG=debug` when `log`); returns its stdout
/// (the status it got), and stderr.
fn run(case: &str, job: &str, vars: &[(&str, &str)], log: bool) -> (String, String, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env("MCAPI_DIAG_CHILD", case)
        .env("MCAPI_JOB", job)
        .env_remove("MCAPI_LOG")
        .env_remove("MCAPI_TOPOLOGY")
        .env_remove("MCAPI_PROVIDER");
    if log {
        cmd.env("MCAPI_LOG", "debug");
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out: Output = cmd.output().expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    (case.to_owned(), stdout, stderr)
}

/// The child failed with MCAPI_ERR_NODE_INITFAILED and one stderr line names every word of
/// `words`.
fn expect_line(
    (_, status, stderr): (String, String, String),
    words: &[&str],
) -> Result<(), String> {
    if status != "MCAPI_ERR_NODE_INITFAILED" {
        return Err(format!("status {status}, stderr {stderr:?}"));
    }
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .collect();
    match lines.len() {
        1 => Ok(()),
        n => Err(format!("{n} lines name {words:?}; stderr: {stderr}")),
    }
}

fn child(case: &str) {
    if case == "rust" {
        // A Rust program keeps the logger to itself: initialize installs none.
        let mut config = mcapi::config::Config::defaults();
        config.provider = Some("nosuchprovider".into());
        let failed = mcapi::Node::initialize(0, 78, config).is_err();
        struct App;
        impl log::Log for App {
            fn enabled(&self, _: &log::Metadata) -> bool {
                true
            }
            fn log(&self, _: &log::Record) {}
            fn flush(&self) {}
        }
        static APP: App = App;
        let ours = log::set_logger(&APP).is_ok();
        println!(
            "{}",
            if failed && ours {
                "MCAPI_ERR_NODE_INITFAILED"
            } else {
                "a logger was installed"
            }
        );
        return;
    }
    let status = common::c_initialize(77);
    if case == "hold" && status == "MCAPI_SUCCESS" {
        println!("holding");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    println!("{status}");
}
