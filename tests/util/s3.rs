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
//! configure_s3(&mut run, proxy.endpoint());  // the same, through the proxy
//! ```

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::http::{
    agent, configure_child, hmac_sha256, no_proxy, send, unique_name, uri_encode, xml_elements,
    xml_unescape, HttpResponse,
};
use super::process::{
    bare_port, port_after, started_by_a_parked_thread, wait_until_answering, LoopbackChild,
};
use super::{python, repo, BucketClient, TestBucket};

/// The credentials the tests sign with; moto accepts any.
pub const S3_ACCESS_KEY: &str = "test";
pub const S3_SECRET_KEY: &str = "test";
pub const S3_REGION: &str = "us-east-1";

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
        // Werkzeug's "Running on http://127.0.0.1:PORT" (with colour codes around).
        let werkzeug_port = |line: &str| port_after(line, "Running on http://127.0.0.1:");
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

    pub fn pid(&self) -> u32 {
        self.process.pid()
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
        let name = unique_name(hint);
        self.create_bucket(&name);
        name
    }

    pub fn create_bucket(&self, bucket: &str) {
        self.client.create_bucket(bucket)
    }
}

/// The server's bucket operations (put, get, list, ...) are
/// [`TestBucket`]'s.
impl TestBucket for S3Server {
    fn scheme(&self) -> &'static str {
        "s3"
    }

    fn port(&self) -> u16 {
        self.process.port
    }

    fn client(&self) -> &dyn BucketClient {
        &self.client
    }

    fn unique_container(&self, hint: &str) -> String {
        self.unique_bucket(hint)
    }

    fn configure<'a>(&self, command: &'a mut Command, endpoint: &str) -> &'a mut Command {
        configure_s3(command, endpoint)
    }

    fn store_options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint().to_string()),
            ("aws_access_key_id", S3_ACCESS_KEY.to_string()),
            ("aws_secret_access_key", S3_SECRET_KEY.to_string()),
            ("aws_region", S3_REGION.to_string()),
            ("aws_allow_http", "true".to_string()),
        ]
    }

    fn leak_markers(&self) -> &'static [&'static str] {
        &["secret"]
    }
}

/// The variables segpredict's object store reads (object_store's
/// `AmazonS3Builder::from_env`), for `endpoint`.
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
    ]
    .into_iter()
    .chain(no_proxy())
    .collect()
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
    configure_child(command, &FOREIGN_AWS_VARS, s3_env(endpoint))
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

/// S3's object operations, signed with SigV4.
impl BucketClient for S3Client {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One signed request; `Err` when the connection failed (a reset, a
    /// refused connection), whatever the status otherwise.
    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, ureq::Error> {
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
        send(&self.agent, builder, body)
    }

    fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        self.expect(200, "PUT", &format!("/{bucket}/{key}"), &[], &[], body);
    }

    fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        self.list_objects(bucket, prefix, 1000)
            .into_iter()
            .map(|o| o.key)
            .collect()
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

    pub fn create_bucket(&self, bucket: &str) {
        self.expect(200, "PUT", &format!("/{bucket}"), &[], &[], b"");
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        self.expect(204, "DELETE", &format!("/{bucket}/{key}"), &[], &[], b"");
    }

    /// Uploads the file at `path` under `key`.
    pub fn upload(&self, bucket: &str, key: &str, path: &Path) {
        let body =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        self.put(bucket, key, &body);
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
                .expect(200, "GET", &format!("/{bucket}"), &query, &[], b"")
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
