//! One point of the matrix: a benchmark over a provider, run as `perftest <test> --local
//! --json` in a child process (or the MPI baseline under `mpirun`), bounded in time, its JSON
//! lines collected and its stderr kept in a log file.

use super::Job;
use crate::cli::Test;
use crate::error::{Context, Result, EXIT_NOT_RUN};
use crate::report::Progress;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every size reported.
    Done,
    /// The provider lacks what the test needs (exit code 61): the reason.
    NotRun(String),
    /// Failed, stalled or timed out: the reason (results so far are kept).
    Failed(String),
}

/// What one run produced.
pub struct RunResult {
    pub outcome: Outcome,
    /// One JSON object per size that reported.
    pub lines: Vec<Value>,
}

/// Time allowed for the run's setup and for its slowest size beyond the measured time.
const SLACK: Duration = Duration::from_secs(15);

/// What a run starts.
pub struct Child {
    pub program: PathBuf,
    /// The program's name in the log's command line.
    pub shown: String,
    pub args: Vec<String>,
    /// Lines on stdout that are not JSON fail the run; else they go to the log (mpirun may
    /// print notices there).
    pub json_only: bool,
}

impl Child {
    /// This executable as `perftest`, strict about its output.
    pub fn perftest(args: Vec<String>) -> Result<Child> {
        Ok(Child {
            program: std::env::current_exe().context("locating this executable")?,
            shown: "perftest".into(),
            args,
            json_only: true,
        })
    }
}

/// Runs `job` as `child`; stderr goes to `log`. `progress` is refreshed while the run goes
/// on, under `label`.
pub fn run(
    job: &Job,
    child: &Child,
    log: &Path,
    progress: &mut Progress,
    label: &str,
) -> Result<RunResult> {
    let mut log_file = File::create(log).context(format!("creating {}", log.display()))?;
    let shown: Vec<String> = child.args.iter().map(|a| shell_word(a)).collect();
    writeln!(log_file, "$ {} {}", child.shown, shown.join(" "))?;
    let json_only = child.json_only;
    let mut child = Command::new(&child.program)
        .args(&child.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file.try_clone()?)
        .spawn()
        .context("starting a benchmark run")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    // Each size must report within its share of time (all rounds of both layers), plus slack.
    let per_size = job.max_time.mul_f64(2.0 * f64::from(job.rounds)) + SLACK;
    let start = Instant::now();
    let mut last_line = start;
    let mut lines = Vec::new();
    let mut bad = None;
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                last_line = Instant::now();
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => lines.push(v),
                    Err(e) if json_only => bad = Some(format!("not JSON ({e}): {line}")),
                    Err(_) => {
                        let _ = writeln!(log_file, "{line}");
                    }
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // stdout closed: the run is ending.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break child.wait()?;
            }
        }
        if let Some(status) = child.try_wait()? {
            // Whatever is still in the pipe.
            while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                if let Ok(v) = serde_json::from_str(&line) {
                    lines.push(v);
                }
            }
            break status;
        }
        if last_line.elapsed() > per_size {
            stop_tree(child.id());
            let _ = child.wait();
            let why = format!(
                "stopped: no result for {}s (size {} of {})",
                per_size.as_secs(),
                lines.len() + 1,
                job.sizes.len()
            );
            let _ = writeln!(log_file, "perftest compare: {why}");
            return Ok(RunResult {
                outcome: Outcome::Failed(why),
                lines,
            });
        }
        progress.show(&format!(
            "{label}: {}/{} sizes, {}s",
            lines.len(),
            job.sizes.len(),
            start.elapsed().as_secs()
        ));
    };
    let outcome = match status.code() {
        Some(0) => match bad {
            Some(why) => Outcome::Failed(why),
            None => Outcome::Done,
        },
        Some(EXIT_NOT_RUN) => Outcome::NotRun(last_error_line(log).unwrap_or_default()),
        _ => {
            Outcome::Failed(last_error_line(log).unwrap_or_else(|| format!("exited with {status}")))
        }
    };
    Ok(RunResult { outcome, lines })
}

/// `a` as a shell would need it (`'tcp;ofi_rxm'`), to copy a run's command from its log.
fn shell_word(a: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/=".contains(c);
    if !a.is_empty() && a.chars().all(plain) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// The most telling line of a run's stderr: its last error, else its last line.
fn last_error_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .skip(1) // the command line
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.ends_with(": not run"))
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| l.contains("error") || l.contains("not available"))
        .or(lines.last())?;
    // "perftest msg-lat (client): error: why" -> "why".
    let why = pick.rsplit_once("error: ").map_or(*pick, |(_, why)| why);
    let why = why.strip_prefix("perftest ").unwrap_or(why);
    Some(match why.split_once(": ") {
        Some((test, rest)) if Test::from_name(test).is_some() => rest.to_owned(),
        _ => why.to_owned(),
    })
}

/// Kills a run and the two processes of its `--local` (found through /proc by parent pid;
/// they stay in our process group so that a Ctrl-C at the terminal reaches them), and gives
/// back the shared memory they leave behind.
fn stop_tree(root: u32) {
    let tree = descendants(root);
    for &pid in tree.iter().rev() {
        if let Ok(pid) = i32::try_from(pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    // The killed processes are gone (the run itself once reaped by the caller): their shm
    // regions are theirs alone.
    std::thread::sleep(Duration::from_millis(200));
    for pid in tree {
        mcapi_ofi::cleanup::remove_shm_regions(pid);
    }
}

/// `root` and every process below it, parents before children.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // pid (comm) state ppid ...; comm may contain spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?.parse::<u32>().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|&&(_, ppid)| ppid == parent)
                .map(|&(pid, _)| pid),
        );
        i += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(shell_word("msg-lat"), "msg-lat");
        assert_eq!(shell_word("tcp;ofi_rxm"), "'tcp;ofi_rxm'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn finds_a_child_below_this_process() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let tree = descendants(std::process::id());
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
        stop_tree(child.id());
        assert!(!child.wait().expect("reaped").success());
    }
}
