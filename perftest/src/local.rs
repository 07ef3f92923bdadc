//! `--local`: server and client on this machine, as two child processes of this one (real
//! processes, as on two hosts: separate fabric objects, the bootstrap over loopback TCP, IP
//! providers bound to 127.0.0.1). The client's output is this command's output.

use crate::cli::Opts;
use crate::error::{Context, Result};
use crate::transport::raw;
use std::ffi::OsString;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to finish after its client has.
const SERVER_GRACE: Duration = Duration::from_secs(10);

/// Runs both sides; returns the exit code (the client's failure first, then the server's).
pub fn run(opts: &Opts) -> Result<i32> {
    // One clear "not run" from here, instead of one from each child.
    raw::check_available(&opts.provider)?;
    let exe = std::env::current_exe().context("locating this executable")?;
    // The same command line without --local; the role goes right after the subcommand, so
    // that a `--` further on cannot turn it into a positional argument.
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    args.retain(|a| a != "--local");
    let sub = args.remove(0);
    let spawn = |extra: &[&str]| -> Result<Child> {
        Command::new(&exe)
            .arg(&sub)
            .args(extra)
            .args(&args)
            .stdin(Stdio::null())
            .spawn()
            .context("starting a child process")
    };
    let mut server = spawn(&["--local-role", "server"])?;
    let mut client = match spawn(&["--local-role", "client", "127.0.0.1"]) {
        Ok(c) => c,
        Err(e) => {
            stop(&mut server);
            return Err(e);
        }
    };
    // A server that fails early (its port is taken) ends the run at once.
    let client_status = loop {
        if let Some(status) = client.try_wait()? {
            ended("client", &client, status);
            break status;
        }
        if let Some(status) = server.try_wait()? {
            ended("server", &server, status);
            if !status.success() {
                stop(&mut client);
                return Ok(code(status));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let start = Instant::now();
    let server_status = loop {
        if let Some(status) = server.try_wait()? {
            ended("server", &server, status);
            break Some(status);
        }
        if start.elapsed() > SERVER_GRACE || !client_status.success() {
            // A failed client has told the server; give it a moment to say why, then stop it.
            if !client_status.success() && start.elapsed() < Duration::from_millis(500) {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            stop(&mut server);
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(match (code(client_status), server_status) {
        (0, Some(s)) => code(s),
        (0, None) => {
            eprintln!("perftest: the server did not exit after the client finished");
            1
        }
        (c, _) => c,
    })
}

fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(1)
}

/// Ends one of our own children (by its handle, i.e. its pid) and reaps it.
fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
    mcapi_ofi::cleanup::remove_shm_regions(child.id());
}

/// A child (`role`) exited with `status`: one killed by a signal is named so, and the shm
/// regions a killed process leaves in /dev/shm (16 MiB each) are removed.
fn ended(role: &str, child: &Child, status: ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        eprintln!(
            "perftest: the {role} (pid {}) was killed by signal {signal}",
            child.id()
        );
    }
    if !status.success() {
        mcapi_ofi::cleanup::remove_shm_regions(child.id());
    }
}
