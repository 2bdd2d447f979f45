//! `--local-shards N|all`: on one host with several GPUs and no Kubernetes,
//! run one shard process of this same program per GPU (each sees only its
//! GPU through `CUDA_VISIBLE_DEVICES`; on CPU, N plain processes), forward
//! SIGINT/SIGTERM to them, wait for all, and exit with the most severe of
//! their codes. Each child is an ordinary `run --shard I/N`, so it resumes
//! and commits exactly as a Kubernetes pod would. The children die with
//! the parent: a parent killed with SIGKILL (which it cannot forward)
//! still gets its children a SIGTERM from the kernel, so a rerun never
//! races shards left running.

use segpredict_core::exit::{Classify, Failure};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use segpredict_core::exit::Outcome;

/// How many local shards: a number, or one per visible GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalShards {
    Count(u32),
    AllGpus,
}

impl std::str::FromStr for LocalShards {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(LocalShards::AllGpus),
            n => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(LocalShards::Count(n)),
                _ => Err(format!(
                    "expected a number of shards (>= 1) or `all`, not `{n}`"
                )),
            },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LocalShardsError {
    #[error("--local-shards all starts one shard per GPU, and no GPU is visible; give a number")]
    NoGpus,
    #[error("starting shard {index}: {source}")]
    Spawn {
        index: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for the shard processes: {0}")]
    Wait(#[source] std::io::Error),
}

impl Classify for LocalShardsError {
    fn failure(&self) -> Failure {
        Failure::permanent_if(matches!(self, LocalShardsError::NoGpus))
    }
}

/// The command line of shard `index` of `count`: this program's own
/// arguments without `--local-shards`, plus `--shard index/count`.
pub fn child_args(args: &[OsString], index: u32, count: u32) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut skip_value = false;
    for arg in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--local-shards" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--local-shards=") {
            continue;
        }
        out.push(arg.clone());
    }
    out.push("--shard".into());
    out.push(format!("{index}/{count}").into());
    out
}

/// Starts the shards, forwards signals, waits for all; the most severe
/// outcome. `gpus` is the number of visible CUDA devices.
pub fn run(
    shards: LocalShards,
    gpus: usize,
    args: &[OsString],
) -> Result<Outcome, LocalShardsError> {
    let count = match shards {
        LocalShards::Count(n) => n,
        LocalShards::AllGpus if gpus == 0 => return Err(LocalShardsError::NoGpus),
        LocalShards::AllGpus => gpus as u32,
    };
    let exe =
        std::env::current_exe().map_err(|source| LocalShardsError::Spawn { index: 0, source })?;
    let mut children: Vec<(u32, Child)> = Vec::new();
    for index in 0..count {
        let mut command = Command::new(&exe);
        command.args(child_args(args, index, count));
        if gpus > 0 {
            // Shard i gets GPU i (round robin when there are more shards).
            command.env("CUDA_VISIBLE_DEVICES", (index as usize % gpus).to_string());
        }
        die_with_parent(&mut command);
        match command.spawn() {
            Ok(child) => children.push((index, child)),
            Err(source) => {
                stop(&mut children, libc::SIGTERM);
                return Err(LocalShardsError::Spawn { index, source });
            }
        }
    }
    let outcomes = wait_all(children)?;
    Ok(Outcome::most_severe(outcomes))
}

/// Has the kernel send the child SIGTERM when this process dies, however it
/// dies. The death signal follows the thread that forked: this one, which
/// then waits for the children until they end. If the parent died between
/// the fork and `prctl`, the child's parent has already changed: it exits
/// at once instead of running unwatched.
fn die_with_parent(command: &mut Command) {
    // SAFETY: getpid(2) has no preconditions.
    let parent = unsafe { libc::getpid() };
    let watch = move || {
        // SAFETY: prctl(2) and getppid(2) are async-signal-safe, as code
        // between fork and exec must be; nothing here allocates.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    };
    // SAFETY: the closure only makes the async-signal-safe calls above.
    unsafe { command.pre_exec(watch) };
}

/// Sends `signal` to every child still running.
fn stop(children: &mut [(u32, Child)], signal: libc::c_int) {
    for (_, child) in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) on a child this process started and has not reaped.
                unsafe { libc::kill(pid, signal) };
            }
        }
    }
}

fn wait_all(mut children: Vec<(u32, Child)>) -> Result<Vec<Outcome>, LocalShardsError> {
    let mut outcomes = Vec::new();
    let mut forwarded = false;
    while !children.is_empty() {
        let signal = crate::signals::received_raw();
        if signal != 0 && !forwarded {
            stop(&mut children, signal);
            forwarded = true;
        }
        let mut still_running = Vec::new();
        for (index, mut child) in children {
            match child.try_wait().map_err(LocalShardsError::Wait)? {
                Some(status) => {
                    let outcome = Outcome::from_code(status.code());
                    report_end(index, child.id(), status, outcome);
                    outcomes.push(outcome);
                }
                None => still_running.push((index, child)),
            }
        }
        children = still_running;
        if !children.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(outcomes)
}

/// One line per shard process that ended; one naming the signal for a
/// shard that was killed, so a person knows which shard to look at.
fn report_end(index: u32, pid: u32, status: std::process::ExitStatus, outcome: Outcome) {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(signal) => tracing::error!(
            shard = index,
            pid,
            signal = %signal_name(signal),
            "shard {index} (pid {pid}) was killed by {}; its committed rows stay, and running the same command again resumes it",
            signal_name(signal)
        ),
        None => tracing::info!(
            shard = index,
            pid,
            code = outcome.code(),
            "shard process ended"
        ),
    }
}

/// `SIGKILL` for 9, as a person reads it.
fn signal_name(signal: libc::c_int) -> String {
    let name = match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => return format!("signal {signal}"),
    };
    format!("{name} (signal {signal})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn children_get_the_same_arguments_and_their_shard() {
        let args = os(&["run", "p.toml", "--local-shards", "2", "--output", "o"]);
        assert_eq!(
            child_args(&args, 1, 2),
            os(&["run", "p.toml", "--output", "o", "--shard", "1/2"])
        );
        let args = os(&["run", "--local-shards=all", "p.toml"]);
        assert_eq!(
            child_args(&args, 0, 4),
            os(&["run", "p.toml", "--shard", "0/4"])
        );
    }

    #[test]
    fn parses_a_count_or_all() {
        assert_eq!("3".parse(), Ok(LocalShards::Count(3)));
        assert_eq!("all".parse(), Ok(LocalShards::AllGpus));
        assert!("0".parse::<LocalShards>().is_err());
        assert!("many".parse::<LocalShards>().is_err());
    }
}
