//! The emulators' and the fault proxy's processes, for the store
//! harnesses (`s3.rs`, `azure.rs`, `gcs.rs`): started on loopback, their
//! port read from what they print, their output's tail kept for panic
//! messages, killed when dropped (or with the test process).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::agent;

/// How long a server or proxy may take to say its port, then to answer:
/// generous, since two cores may be busy building or running other tests.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of a child's output kept for a panic message.
const TAIL_LINES: usize = 200;

/// The last lines a child wrote, for panic messages.
#[derive(Clone, Default)]
pub struct OutputTail(Arc<Mutex<VecDeque<String>>>);

impl OutputTail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Reads `stream` to its end on a thread of its own (so the child never
/// blocks on a full pipe: moto logs every request), keeping the tail, and
/// sends the first port `find_port` sees in a line.
fn drain(
    stream: impl Read + Send + 'static,
    tail: OutputTail,
    find_port: fn(&str) -> Option<u16>,
    port: SyncSender<u16>,
) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        let mut sent = false;
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            if !sent {
                if let Some(p) = find_port(&text) {
                    sent = port.send(p).is_ok();
                }
            }
            tail.push(text);
            line.clear();
        }
    });
}

/// A child process on loopback (a store's emulator, the fault proxy),
/// killed and reaped on drop.
pub(super) struct LoopbackChild {
    child: Child,
    pub(super) port: u16,
    pub(super) stderr: OutputTail,
}

impl LoopbackChild {
    /// Spawns `command` (stdout and stderr piped), and waits for the port
    /// that `find_port` reads from stdout or stderr; panics naming `what`
    /// with the child's output when none comes in time.
    pub(super) fn spawn(
        what: &str,
        mut command: Command,
        find_port: fn(&str) -> Option<u16>,
    ) -> Self {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        // The child dies with the thread that spawned it, so a killed test
        // process leaves no server behind (Drop covers the normal ends).
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what} ({command:?}): {e}"));
        let (tx, rx) = sync_channel(2);
        let stdout = OutputTail::default();
        let stderr = OutputTail::default();
        drain(
            child.stdout.take().unwrap(),
            stdout.clone(),
            find_port,
            tx.clone(),
        );
        drain(child.stderr.take().unwrap(), stderr.clone(), find_port, tx);
        let port = wait_for_port(what, &mut child, &rx, &stdout, &stderr);
        Self {
            child,
            port,
            stderr,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn wait_for_port(
    what: &str,
    child: &mut Child,
    rx: &Receiver<u16>,
    stdout: &OutputTail,
    stderr: &OutputTail,
) -> u16 {
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(port) => port,
        Err(e) => {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            panic!(
                "{what} did not say its port ({e:?}; {status}); `just test-deps` installs \
                 tools/requirements-test.txt into the venv.\nstdout:\n{}\nstderr:\n{}",
                stdout.text(),
                stderr.text()
            )
        }
    }
}

impl Drop for LoopbackChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `GET url` until any HTTP answer, within `START_TIMEOUT`.
pub(super) fn wait_until_answering(what: &str, url: &str, stderr: &OutputTail) {
    let agent = agent();
    let started = Instant::now();
    while started.elapsed() < START_TIMEOUT {
        if agent.get(url).call().is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{what} at {url} did not answer within {START_TIMEOUT:?}; stderr:\n{}",
        stderr.text()
    );
}

/// The port in `line` right after `marker` (`"... http://127.0.0.1:"`):
/// how each emulator says where it listens.
pub(super) fn port_after(line: &str, marker: &str) -> Option<u16> {
    let at = line.find(marker)? + marker.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The proxy's first stdout line: its port alone.
pub(super) fn bare_port(line: &str) -> Option<u16> {
    line.trim().parse().ok()
}

/// `start()`'s server, started on a thread that then parks for the rest of
/// the process, so a child tied to its spawning thread's life
/// (PR_SET_PDEATHSIG) lives as long as the test process.
pub(super) fn started_by_a_parked_thread<T: Send + 'static>(name: &str, start: fn() -> T) -> T {
    let (tx, rx) = sync_channel(1);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(start));
            loop {
                std::thread::park();
            }
        })
        .expect("spawning a server's owner thread");
    match rx.recv().expect("a server's owner thread") {
        Ok(server) => server,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
