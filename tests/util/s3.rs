//! Object storage on loopback for the tests: a real S3-compatible server
//! (moto's, from the venv: `tools/requirements-test.txt`, installed by
//! `just test-deps`), the fault-injecting proxy in front of it
//! (`tools/s3/fault_proxy.py`), and a small signed S3 client so a test
//! checks what landed in a bucket without segpredict's own code.
//!
//! ```ignore
//! let server = S3Server::shared();          // one per test process
//! let bucket = server.unique_bucket("resume"); // created, empty, this test's own
//! server.client().upload(&bucket, "in/sample.parquet", &sample());
//! let mut run = Command::new(bin());
//! server.configure(&mut run);                // AWS_ENDPOINT_URL, keys, region, ...
//! // ... run.args(["run", file, "--input", &format!("s3://{bucket}/in/"), ...])
//! let keys = server.list(&bucket, "out/");
//! server.client().download(&bucket, "out/", &dir); // then read_output(&dir)
//! let proxy = FaultProxy::in_front_of(server, FaultRates { fail: 0.1, ..FaultRates::default() });
//! proxy.configure(&mut run);                 // the same, through the proxy
//! ```

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{python, repo};

/// The credentials the tests sign with; moto accepts any.
pub const S3_ACCESS_KEY: &str = "test";
pub const S3_SECRET_KEY: &str = "test";
pub const S3_REGION: &str = "us-east-1";

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

/// Werkzeug's "Running on http://127.0.0.1:PORT" (with colour codes around).
fn werkzeug_port(line: &str) -> Option<u16> {
    let at = line.find("Running on http://127.0.0.1:")? + "Running on http://127.0.0.1:".len();
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

/// A child process on loopback, killed and reaped on drop (the GCS
/// emulator's harness, `gcs.rs`, uses it too).
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

/// moto's S3 server on a loopback port it picked itself (no race for a
/// free port), until dropped.
pub struct S3Server {
    process: LoopbackChild,
    client: S3Client,
}

impl S3Server {
    /// A server of the caller's own, killed when dropped. Prefer
    /// [`S3Server::shared`] with a bucket per test unless a test must stop
    /// the server or see only its own requests.
    pub fn start() -> Self {
        Self::start_with(
            python(),
            &["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        )
    }

    /// Starts `program args` as the server: `start` with the venv's moto,
    /// or a test of the start-up failure's message.
    pub fn start_with(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Self {
        let mut command = Command::new(program);
        command.args(args).env("PYTHONUNBUFFERED", "1");
        let process = LoopbackChild::spawn("moto's S3 server", command, werkzeug_port);
        let client = S3Client::new(process.port);
        wait_until_answering("moto's S3 server", &client.endpoint, &process.stderr);
        Self { process, client }
    }

    /// One server for the whole test process, started on first use. It
    /// lives as long as the process: its owner thread parks forever, and
    /// PR_SET_PDEATHSIG (tied to the spawning thread) kills it when the
    /// process ends, however it ends.
    pub fn shared() -> &'static S3Server {
        static SHARED: OnceLock<S3Server> = OnceLock::new();
        SHARED.get_or_init(|| started_by_a_parked_thread("s3-server-owner", S3Server::start))
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.client.endpoint
    }

    /// The server's log (moto logs one line per request), its last lines.
    pub fn log_tail(&self) -> String {
        self.process.stderr.text()
    }

    pub fn client(&self) -> &S3Client {
        &self.client
    }

    /// The environment a segpredict child needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        s3_env(self.endpoint())
    }

    /// Sets [`S3Server::env`] on `command` and removes what could point
    /// it elsewhere (a profile, a session token, a proxy).
    pub fn configure<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        configure_s3(command, self.endpoint())
    }

    /// A new empty bucket named after `hint`, unique in this process.
    pub fn unique_bucket(&self, hint: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut name: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        name = format!("{}-{}-{n}", name.trim_matches('-'), std::process::id());
        self.create_bucket(&name);
        name
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.client.create_bucket(bucket)
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        self.client.put(bucket, key, body)
    }

    pub fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        self.client.get(bucket, key)
    }

    /// Every key under `prefix`, in the server's (lexicographic) order.
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        self.client.list(bucket, prefix)
    }
}

/// The variables segpredict's object store reads (object_store's
/// `AmazonS3Builder::from_env`), for `endpoint`.
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

pub fn s3_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY.to_string()),
        ("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY.to_string()),
        ("AWS_REGION", S3_REGION.to_string()),
        ("AWS_DEFAULT_REGION", S3_REGION.to_string()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
        // No instance-metadata lookups, and loopback never through a proxy.
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("no_proxy", "127.0.0.1,localhost".to_string()),
    ]
}

/// Variables of the developer's own AWS set-up that would change which
/// credentials or endpoint a child uses.
const FOREIGN_AWS_VARS: [&str; 7] = [
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

/// Points `command` at the S3 endpoint `endpoint` ([`s3_env`]), with none
/// of the developer's own AWS set-up or proxies left to redirect it.
pub fn configure_s3<'a>(command: &'a mut Command, endpoint: &str) -> &'a mut Command {
    for var in FOREIGN_AWS_VARS {
        command.env_remove(var);
    }
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        command.env_remove(var);
    }
    command.envs(s3_env(endpoint))
}

/// Fault rates for [`FaultProxy`]: each a share of requests (together at
/// most 1); see tools/s3/fault_proxy.py for what each does.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FaultRates {
    /// Answered 503 SlowDown, not forwarded.
    pub fail: f64,
    /// Connection reset: before any response (not forwarded), or for a
    /// GET, half of the body then the reset.
    pub reset: f64,
    /// The body dribbled over `stall_seconds` (an empty one: the head late).
    pub stall: f64,
    /// Forwarded (the server applies it), then reset before any response.
    pub lose_response: f64,
    /// Held for `hold_seconds`, then forwarded whether or not the client is
    /// still there (a PUT that lands after its writer was killed).
    pub hold: f64,
    pub hold_seconds: f64,
    /// Forwarded, then one byte of a 2xx GET's body flipped (the stored
    /// object intact): damage in transit.
    pub corrupt: f64,
    pub stall_seconds: f64,
    /// A delay before every forwarded request: a network's round trip.
    pub latency_seconds: f64,
    /// Faults only for these methods, comma-separated ("PUT,POST"); "": all.
    pub methods: &'static str,
    /// Faults only for paths containing this ("_SUCCESS", "uploadId="); "": all.
    pub path_contains: &'static str,
}

impl Default for FaultRates {
    fn default() -> Self {
        Self {
            fail: 0.0,
            reset: 0.0,
            stall: 0.0,
            lose_response: 0.0,
            hold: 0.0,
            hold_seconds: 10.0,
            corrupt: 0.0,
            stall_seconds: 2.0,
            latency_seconds: 0.0,
            methods: "",
            path_contains: "",
        }
    }
}

/// What the proxy counted since start or [`FaultProxy::reset_stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct FaultStats {
    /// Requests seen (control requests excluded).
    pub requests: u64,
    /// Requests that reached the server (`lose_response` included).
    pub forwarded: u64,
    pub fail: u64,
    /// `reset_before + reset_mid_body`.
    pub reset: u64,
    pub reset_before: u64,
    pub reset_mid_body: u64,
    pub stall: u64,
    pub lose_response: u64,
    pub hold: u64,
    /// Held requests forwarded once their hold ended.
    pub held_landed: u64,
    /// GET bodies delivered with a byte flipped.
    pub corrupt: u64,
    /// Response body bytes delivered whole to clients.
    pub bytes_out: u64,
}

/// tools/s3/fault_proxy.py on a loopback port, in front of a server,
/// until dropped.
pub struct FaultProxy {
    process: LoopbackChild,
    client: S3Client,
}

impl FaultProxy {
    /// A proxy to `127.0.0.1:target_port` with `rates` and seed 0.
    pub fn start(target_port: u16, rates: FaultRates) -> Self {
        Self::start_seeded(target_port, rates, 0)
    }

    /// The same with the fault draws seeded: one seed and one order of
    /// requests give the same faults.
    pub fn start_seeded(target_port: u16, rates: FaultRates, seed: u64) -> Self {
        let mut command = Command::new(python());
        command
            .arg(repo().join("tools/s3/fault_proxy.py"))
            .arg(format!("--target=127.0.0.1:{target_port}"))
            .arg("--listen-port=0")
            .arg(format!("--fail={}", rates.fail))
            .arg(format!("--reset={}", rates.reset))
            .arg(format!("--stall={}", rates.stall))
            .arg(format!("--lose-response={}", rates.lose_response))
            .arg(format!("--hold={}", rates.hold))
            .arg(format!("--hold-seconds={}", rates.hold_seconds))
            .arg(format!("--corrupt={}", rates.corrupt))
            .arg(format!("--stall-seconds={}", rates.stall_seconds))
            .arg(format!("--latency-seconds={}", rates.latency_seconds))
            .arg(format!("--methods={}", rates.methods))
            .arg(format!("--path-contains={}", rates.path_contains))
            .arg(format!("--seed={seed}"));
        let process = LoopbackChild::spawn("the fault proxy", command, bare_port);
        let client = S3Client::new(process.port);
        let proxy = Self { process, client };
        wait_until_answering(
            "the fault proxy",
            &proxy.control_url("stats"),
            &proxy.process.stderr,
        );
        proxy
    }

    pub fn in_front_of(server: &S3Server, rates: FaultRates) -> Self {
        Self::start(server.port(), rates)
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }

    pub fn endpoint(&self) -> &str {
        &self.client.endpoint
    }

    /// A client whose every request goes through the proxy (and its faults).
    pub fn client(&self) -> &S3Client {
        &self.client
    }

    pub fn env(&self) -> Vec<(&'static str, String)> {
        s3_env(self.endpoint())
    }

    pub fn configure<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        configure_s3(command, self.endpoint())
    }

    fn control_url(&self, what: &str) -> String {
        format!("{}/__proxy/{what}", self.client.endpoint)
    }

    pub fn stats(&self) -> FaultStats {
        let mut response = agent()
            .get(self.control_url("stats"))
            .call()
            .expect("reading the fault proxy's stats");
        let body = response.body_mut().read_to_vec().unwrap();
        serde_json::from_slice(&body).expect("the fault proxy's stats as JSON")
    }

    /// New rates from now on (the draw's sequence goes on).
    pub fn set_rates(&self, rates: FaultRates) {
        let body = serde_json::to_vec(&rates).unwrap();
        let response = agent()
            .post(self.control_url("config"))
            .send(&body[..])
            .expect("setting the fault proxy's rates");
        assert_eq!(response.status(), 200, "the proxy refused {rates:?}");
    }

    /// The next `n` requests the rates' targets take in (methods, path)
    /// answered 503 SlowDown in a row, whatever the draw.
    pub fn fail_next(&self, n: u64) {
        self.set_count("fail_next", n);
    }

    /// The next `n` GETs the rates' targets take in delivered with a byte
    /// of their body flipped, whatever the draw.
    pub fn corrupt_next(&self, n: u64) {
        self.set_count("corrupt_next", n);
    }

    fn set_count(&self, name: &str, n: u64) {
        let body = serde_json::to_vec(&serde_json::json!({ name: n })).unwrap();
        let response = agent()
            .post(self.control_url("config"))
            .send(&body[..])
            .expect("setting a count of the fault proxy");
        assert_eq!(response.status(), 200, "the proxy refused {name} {n}");
    }

    pub fn reset_stats(&self) {
        agent()
            .post(self.control_url("stats/reset"))
            .send(&b""[..])
            .expect("resetting the fault proxy's stats");
    }
}

/// A loopback agent: HTTP errors are answers, not errors; no proxy from
/// the environment; no pooled connections, so one call is one connection
/// and a reset or a stall shows in the call that met it.
/// A response's whole body, however long.
pub(super) fn whole_body(
    response: &mut ureq::http::Response<ureq::Body>,
) -> Result<Vec<u8>, ureq::Error> {
    response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
}

pub(super) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .new_agent()
}

/// One answer: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct S3Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl S3Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A listed object.
#[derive(Debug, Clone, PartialEq)]
pub struct S3Object {
    pub key: String,
    pub size: u64,
    pub etag: String,
}

/// A signed (SigV4) path-style S3 client for loopback endpoints.
pub struct S3Client {
    endpoint: String,
    host: String,
    agent: ureq::Agent,
}

impl S3Client {
    pub fn new(port: u16) -> Self {
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            host: format!("127.0.0.1:{port}"),
            agent: agent(),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One signed request; `Err` when the connection failed (a reset, a
    /// refused connection), whatever the status otherwise.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<S3Response, ureq::Error> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let request = SignedRequest {
            method,
            host: &self.host,
            path,
            query,
            headers,
            payload_sha256: &hex(&Sha256::digest(body)),
            amz_date: &amz_date(now.as_secs()),
        };
        let mut builder = ureq::http::Request::builder().method(method).uri(format!(
            "{}{}{}",
            self.endpoint,
            uri_encode(path, false),
            query_string(query)
        ));
        for (name, value) in request.headers_to_send(S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION) {
            builder = builder.header(name, value);
        }
        let mut response = self.agent.run(builder.body(body.to_vec()).unwrap())?;
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let status = response.status().as_u16();
        let body = whole_body(&mut response)?;
        Ok(S3Response {
            status,
            headers,
            body,
        })
    }

    /// `request` that must reach the server and be answered `expected`.
    fn expect(
        &self,
        expected: u16,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> S3Response {
        let response = self
            .request(method, path, query, &[], body)
            .unwrap_or_else(|e| panic!("{method} {path} on {}: {e}", self.endpoint));
        assert_eq!(
            response.status,
            expected,
            "{method} {path} on {}: {}",
            self.endpoint,
            response.text()
        );
        response
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.expect(200, "PUT", &format!("/{bucket}"), &[], b"");
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        self.expect(200, "PUT", &format!("/{bucket}/{key}"), &[], body);
    }

    pub fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        self.expect(200, "GET", &format!("/{bucket}/{key}"), &[], b"")
            .body
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        self.expect(204, "DELETE", &format!("/{bucket}/{key}"), &[], b"");
    }

    /// Every object under `prefix` into `dir`, at its key less `prefix`
    /// (so `read_output(dir)` reads an output prefix); the paths written.
    pub fn download(&self, bucket: &str, prefix: &str, dir: &Path) -> Vec<PathBuf> {
        let mut written = Vec::new();
        for object in self.list_objects(bucket, prefix, 1000) {
            let relative = object.key[prefix.len()..].trim_start_matches('/');
            let path = dir.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, self.get(bucket, &object.key)).unwrap();
            written.push(path);
        }
        written
    }

    /// Uploads the file at `path` under `key`.
    pub fn upload(&self, bucket: &str, key: &str, path: &Path) {
        let body =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        self.put(bucket, key, &body);
    }

    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        self.list_objects(bucket, prefix, 1000)
            .into_iter()
            .map(|o| o.key)
            .collect()
    }

    /// ListObjectsV2 under `prefix`, `page` keys a request, every page.
    pub fn list_objects(&self, bucket: &str, prefix: &str, page: usize) -> Vec<S3Object> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        let page = page.to_string();
        loop {
            let mut query = vec![
                ("list-type", "2"),
                ("prefix", prefix),
                ("max-keys", page.as_str()),
            ];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let xml = self
                .expect(200, "GET", &format!("/{bucket}"), &query, b"")
                .text();
            objects.extend(
                xml_elements(&xml, "Contents")
                    .into_iter()
                    .map(|c| S3Object {
                        key: xml_unescape(xml_elements(c, "Key")[0]),
                        size: xml_elements(c, "Size")[0].parse().expect("a Size"),
                        etag: xml_unescape(xml_elements(c, "ETag")[0]),
                    }),
            );
            match xml_elements(&xml, "IsTruncated").first() {
                Some(&"true") => {
                    token = Some(xml_unescape(xml_elements(&xml, "NextContinuationToken")[0]))
                }
                _ => return objects,
            }
        }
    }
}

/// The text inside each `<name>…</name>` in `xml` (no nesting of `name`).
pub(super) fn xml_elements<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let end = after.find(&close).expect("a closing tag");
        found.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    found
}

pub(super) fn xml_unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#13;", "\r")
        .replace("&amp;", "&")
}

/// A request's parts as AWS Signature Version 4 signs them.
pub struct SignedRequest<'a> {
    pub method: &'a str,
    pub host: &'a str,
    /// Not yet URI-encoded.
    pub path: &'a str,
    pub query: &'a [(&'a str, &'a str)],
    /// Extra headers, all signed.
    pub headers: &'a [(&'a str, &'a str)],
    pub payload_sha256: &'a str,
    /// `YYYYMMDDTHHMMSSZ`
    pub amz_date: &'a str,
}

impl SignedRequest<'_> {
    /// Every header to send, `authorization` included.
    pub fn headers_to_send(
        &self,
        access_key: &str,
        secret: &str,
        region: &str,
    ) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = vec![
            ("host".into(), self.host.into()),
            ("x-amz-content-sha256".into(), self.payload_sha256.into()),
            ("x-amz-date".into(), self.amz_date.into()),
        ];
        headers.extend(
            self.headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string())),
        );
        headers.sort();
        let signature = self.signature(&headers, secret, region);
        let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={access_key}/{}/{region}/s3/aws4_request, SignedHeaders={}, Signature={signature}",
            &self.amz_date[..8],
            signed.join(";"),
        );
        headers.retain(|(n, _)| n != "host"); // the HTTP client sends the same Host
        headers.push(("authorization".into(), authorization));
        headers
    }

    /// The hex signature over `headers` (lowercased names, sorted).
    pub fn signature(&self, headers: &[(String, String)], secret: &str, region: &str) -> String {
        let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
        let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        let canonical_request = format!(
            "{}\n{}\n{}\n{canonical_headers}\n{}\n{}",
            self.method,
            uri_encode(self.path, false),
            canonical_query(self.query),
            signed.join(";"),
            self.payload_sha256
        );
        let date = &self.amz_date[..8];
        let scope = format!("{date}/{region}/s3/aws4_request");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
            self.amz_date,
            hex(&Sha256::digest(canonical_request.as_bytes()))
        );
        let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
        for part in [region, "s3", "aws4_request"] {
            key = hmac_sha256(&key, part.as_bytes());
        }
        hex(&hmac_sha256(&key, to_sign.as_bytes()))
    }
}

fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true)))
        .collect();
    pairs.sort();
    pairs.join("&")
}

fn query_string(query: &[(&str, &str)]) -> String {
    if query.is_empty() {
        String::new()
    } else {
        format!("?{}", canonical_query(query))
    }
}

/// SigV4's URI encoding: unreserved characters kept, `/` kept in a path.
pub fn uri_encode(text: &str, encode_slash: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        let keep = byte.is_ascii_alphanumeric()
            || b"-_.~".contains(&byte)
            || (byte == b'/' && !encode_slash);
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// HMAC (RFC 2104) over SHA-256, with its 64-byte block.
pub(super) fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYYMMDDTHHMMSSZ` for seconds since the epoch (UTC).
pub fn amz_date(epoch_seconds: u64) -> String {
    let seconds = i64::try_from(epoch_seconds).expect("a date before the year 292 billion");
    chrono::DateTime::from_timestamp(seconds, 0)
        .expect("a date chrono can represent")
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}
