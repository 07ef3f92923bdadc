//! The harness of the multi-process tests (`processes`, `channel_processes`): each test
//! binary re-executes itself as its peers (`MCAPI_TEST_CHILD=role:...`) and runs one test
//! at a time, on shm and tcp (ignored where a provider is not offered).

// Each test binary compiles its own copy and uses only part of it.
#![allow(dead_code)]

use libtest_mimic::{Arguments, Failed, Trial};
use mcapi::config::Config;
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

/// The test binary's `main`: runs `child` with the spec when started as a peer, otherwise
/// the trials of each provider one at a time, those of a provider not offered here ignored.
pub fn run(child: fn(&str), trials_for: impl Fn(&'static str) -> Vec<Trial>) {
    if let Ok(spec) = std::env::var("MCAPI_TEST_CHILD") {
        child(&spec);
        return;
    }
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let mut trials = Vec::new();
    for prov in ["shm", "tcp", "sockets"] {
        let absent = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(prov)).is_err();
        for trial in trials_for(prov) {
            if absent {
                eprintln!("skipping {}: provider {prov} not offered", trial.name());
            }
            trials.push(trial.with_ignored_flag(absent));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}

pub fn config(prov: &str, job: &str) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(prov.into());
    c.job = job.into();
    c.recv_buffers = 16;
    c
}

/// A peer process: this test binary re-executed as `role`, its stdout read line by line.
pub struct Peer {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Peer {
    pub fn spawn(role: &str, prov: &str, job: &str) -> Result<Peer, Failed> {
        Peer::spawn_with(role, prov, job, &[])
    }

    /// [`Peer::spawn`] with more environment variables.
    pub fn spawn_with(
        role: &str,
        prov: &str,
        job: &str,
        env: &[(&str, &str)],
    ) -> Result<Peer, Failed> {
        let mut child = Command::new(std::env::current_exe()?)
            .envs(env.iter().copied())
            .env("MCAPI_TEST_CHILD", format!("{role}:{prov}:{job}"))
            // A peer that fails to start says why on the test's stderr.
            .env(
                "MCAPI_LOG",
                std::env::var("MCAPI_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdout(Stdio::piped())
            .spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        Ok(Peer {
            child,
            lines: BufReader::new(out).lines(),
        })
    }

    /// Waits for the child to print `word` on a line of its own.
    pub fn expect(&mut self, word: &str) -> Result<(), Failed> {
        match self.lines.next() {
            Some(Ok(line)) if line == word => Ok(()),
            other => Err(format!("peer said {other:?}, expected {word:?}").into()),
        }
    }

    /// Waits for the child's next line (a report such as `full 12`).
    pub fn line(&mut self) -> Result<String, Failed> {
        match self.lines.next() {
            Some(Ok(line)) => Ok(line),
            other => Err(format!("peer said {other:?}, expected a line").into()),
        }
    }

    /// Waits for the child to exit, for callers that report a failure their own way.
    pub fn wait(mut self) -> Result<ExitStatus, Failed> {
        Ok(self.child.wait()?)
    }

    pub fn finish(self) -> Result<(), Failed> {
        let status = self.wait()?;
        if !status.success() {
            return Err(format!("peer process failed: {status}").into());
        }
        Ok(())
    }

    /// Kills the child, which must still be running (one that exited early failed), and
    /// removes the shm provider's regions, which outlive a killed process.
    pub fn kill(mut self) -> Result<(), Failed> {
        let pid = self.child.id();
        if let Some(status) = self.child.try_wait()? {
            return Err(format!("the peer exited before it was killed: {status}").into());
        }
        self.child.kill()?;
        self.child.wait()?;
        mcapi_ofi::cleanup::remove_shm_regions(pid);
        Ok(())
    }
}

impl Drop for Peer {
    /// A test that failed before it waited for or killed its peer leaves no process behind
    /// (a busy one would slow every later test on two cores).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = self.child.id();
            let _ = self.child.kill();
            let _ = self.child.wait();
            mcapi_ofi::cleanup::remove_shm_regions(pid);
        }
    }
}

/// `mcapi_initialize` of node `<0, node>` through the C entry point, as a C program calls it
/// (configuration from the environment); the status's name.
pub fn c_initialize(node: u32) -> String {
    let mut status = 0;
    // SAFETY: NULL attributes, params and info are allowed; `status` is a local.
    unsafe {
        mcapi::capi::mcapi_initialize(
            0,
            node,
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null_mut(),
            &mut status,
        );
    }
    mcapi::Status::from_code(status).map_or_else(|| format!("code {status}"), |s| format!("{s}"))
}
