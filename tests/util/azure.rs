//! Azure Blob Storage on loopback for the tests: Azurite (the Azure SDK
//! team's emulator, npm's `azurite` pinned in `tools/azure/package.json`,
//! installed by `just test-deps` with `npm ci`), and a small SharedKey
//! client of its REST API so a test creates containers and checks what
//! landed without segpredict's own code.
//!
//! ```ignore
//! let azurite = Azurite::shared();                 // one per test process
//! let container = azurite.unique_container("rt");  // created, empty, this test's own
//! azurite.put(&container, "in/sample.parquet", &std::fs::read(sample()).unwrap());
//! let mut run = Command::new(bin());
//! azurite.configure(&mut run);                     // AZURE_STORAGE_USE_EMULATOR, ...
//! // ... run.args(["run", file]) with `az://{container}/in/` as the input
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use super::http::{
    agent, configure_child, hmac_sha256, no_proxy, send, unique_name, uri_encode, xml_elements,
    xml_unescape, HttpResponse,
};
use super::process::{port_after, started_by_a_parked_thread, wait_until_answering, LoopbackChild};
use super::{repo, BucketClient, TestBucket};

/// Azurite's well-known development account and its published key
/// (learn.microsoft.com, "Use the Azurite emulator": not a secret).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The REST API version the client below speaks.
const API_VERSION: &str = "2021-08-06";

/// Azurite's blob service: the npm package's launcher.
pub fn azurite_binary() -> PathBuf {
    repo().join("tools/azure/node_modules/.bin/azurite-blob")
}

/// Variables of a developer's own Azure set-up that would change which
/// account, credentials or endpoint a child uses.
const FOREIGN_AZURE_VARS: [&str; 10] = [
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_USE_AZURE_CLI",
];

/// The variables object_store's `MicrosoftAzureBuilder::from_env` reads
/// to reach Azurite at `endpoint` (`http://127.0.0.1:PORT`): the emulator
/// switch (the well-known account and key) and where it listens.
pub fn azure_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AZURE_STORAGE_USE_EMULATOR", "true".to_string()),
        ("AZURITE_BLOB_STORAGE_URL", endpoint.to_string()),
        ("AZURE_ALLOW_HTTP", "true".to_string()),
    ]
    .into_iter()
    .chain(no_proxy())
    .collect()
}

/// Points `command` at Azurite at `endpoint` ([`azure_env`]), with none of
/// the developer's own Azure set-up or proxies left to redirect it.
pub fn configure_azure<'a>(command: &'a mut Command, endpoint: &str) -> &'a mut Command {
    configure_child(command, &FOREIGN_AZURE_VARS, azure_env(endpoint))
}

/// Azurite's blob service on a loopback port it picked itself, its data in
/// a directory of its own, until dropped.
pub struct Azurite {
    process: LoopbackChild,
    client: AzureClient,
    _data: tempfile::TempDir,
}

impl Azurite {
    /// A server of the caller's own, killed when dropped; prefer
    /// [`Azurite::shared`] with a container per test.
    pub fn start() -> Self {
        let binary = azurite_binary();
        assert!(
            binary.exists(),
            "{} is missing: `just test-deps` installs Azurite (npm ci in tools/azure)",
            binary.display()
        );
        let data = tempfile::tempdir().expect("a directory for Azurite's data");
        let mut command = Command::new(binary);
        command
            .args(["--blobHost", "127.0.0.1", "--blobPort", "0", "--location"])
            .arg(data.path())
            .args(["--skipApiVersionCheck", "--silent"]);
        // "Azurite Blob service successfully listens on http://127.0.0.1:PORT"
        let listening_port = |line: &str| port_after(line, "listens on http://127.0.0.1:");
        let process = LoopbackChild::spawn("Azurite", command, listening_port);
        let client = AzureClient::new(process.port);
        let probe = format!("{}/{AZURITE_ACCOUNT}?comp=list", client.endpoint);
        wait_until_answering("Azurite", &probe, &process.stderr);
        Self {
            process,
            client,
            _data: data,
        }
    }

    /// One server for the whole test process (see `S3Server::shared`).
    pub fn shared() -> &'static Azurite {
        static SHARED: OnceLock<Azurite> = OnceLock::new();
        SHARED.get_or_init(|| started_by_a_parked_thread("azurite-owner", Azurite::start))
    }

    pub fn client(&self) -> &AzureClient {
        &self.client
    }

    pub fn configure<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        configure_azure(command, self.endpoint())
    }

    /// A new empty container named after `hint`, unique in this process
    /// (lowercase letters, digits and single dashes, 3 to 63 long).
    pub fn unique_container(&self, hint: &str) -> String {
        let name = unique_name(hint);
        self.client.create_container(&name);
        name
    }
}

/// The emulator's container operations (put, get, list, ...) are
/// [`TestBucket`]'s.
impl TestBucket for Azurite {
    fn scheme(&self) -> &'static str {
        "az"
    }

    fn port(&self) -> u16 {
        self.process.port
    }

    fn client(&self) -> &dyn BucketClient {
        &self.client
    }

    fn unique_container(&self, hint: &str) -> String {
        self.unique_container(hint)
    }

    fn configure<'a>(&self, command: &'a mut Command, endpoint: &str) -> &'a mut Command {
        configure_azure(command, endpoint)
    }

    fn store_options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("azure_storage_account_name", AZURITE_ACCOUNT.to_string()),
            ("azure_storage_account_key", AZURITE_KEY.to_string()),
            (
                "azure_storage_endpoint",
                format!("{}/{AZURITE_ACCOUNT}", self.endpoint()),
            ),
            ("azure_allow_http", "true".to_string()),
        ]
    }

    fn leak_markers(&self) -> &'static [&'static str] {
        &["secret", "Eby8vdM02"]
    }
}

/// A SharedKey-signed client of Azurite's blob REST API (path-style:
/// `/ACCOUNT/CONTAINER/BLOB`).
pub struct AzureClient {
    endpoint: String,
    agent: ureq::Agent,
}

impl AzureClient {
    pub fn new(port: u16) -> Self {
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            agent: agent(),
        }
    }

    pub fn create_container(&self, container: &str) {
        let query = [("restype", "container")];
        self.expect(201, "PUT", &format!("/{container}"), &query, &[], b"");
    }

    pub fn delete(&self, container: &str, key: &str) {
        self.expect(202, "DELETE", &format!("/{container}/{key}"), &[], &[], b"");
    }
}

/// The Blob service's operations, signed with SharedKey.
impl BucketClient for AzureClient {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One signed request to `/ACCOUNT{path}`; `Err` when the connection
    /// failed, whatever the status otherwise.
    fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse, ureq::Error> {
        // Signed as sent: the percent-encoded path.
        let path = uri_encode(&format!("/{AZURITE_ACCOUNT}{path}"), false);
        let mut all: Vec<(String, String)> = vec![
            ("x-ms-date".into(), http_date(SystemTime::now())),
            ("x-ms-version".into(), API_VERSION.into()),
        ];
        all.extend(
            headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string())),
        );
        let signature = shared_key_signature(method, &path, query, &all, body.len());
        all.push((
            "authorization".into(),
            format!("SharedKey {AZURITE_ACCOUNT}:{signature}"),
        ));
        let query_text: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true)))
            .collect();
        let mut uri = format!("{}{path}", self.endpoint);
        if !query_text.is_empty() {
            uri = format!("{uri}?{}", query_text.join("&"));
        }
        let mut builder = ureq::http::Request::builder().method(method).uri(uri);
        for (name, value) in all {
            builder = builder.header(name, value);
        }
        send(&self.agent, builder, body)
    }

    fn put(&self, container: &str, key: &str, body: &[u8]) {
        let headers = [("x-ms-blob-type", "BlockBlob")];
        self.expect(
            201,
            "PUT",
            &format!("/{container}/{key}"),
            &[],
            &headers,
            body,
        );
    }

    /// Every blob under `prefix` (committed ones: an upload's staged blocks
    /// are not listed), in the service's (lexicographic) order, every page.
    fn list(&self, container: &str, prefix: &str) -> Vec<String> {
        let mut names = Vec::new();
        let mut marker = String::new();
        loop {
            let mut query = vec![
                ("restype", "container"),
                ("comp", "list"),
                ("prefix", prefix),
            ];
            if !marker.is_empty() {
                query.push(("marker", marker.as_str()));
            }
            let xml = self
                .expect(200, "GET", &format!("/{container}"), &query, &[], b"")
                .text();
            for blob in xml_elements(&xml, "Blob") {
                names.push(xml_unescape(xml_elements(blob, "Name")[0]));
            }
            match xml_elements(&xml, "NextMarker").first() {
                Some(next) if !next.is_empty() => marker = xml_unescape(next),
                _ => return names,
            }
        }
    }
}

/// The SharedKey signature (the Blob service's "Authorize with Shared
/// Key"): base64 of HMAC-SHA256, under the decoded account key, of the
/// verb, the standard headers' values, the `x-ms-` headers and the
/// canonical resource.
fn shared_key_signature(
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    headers: &[(String, String)],
    length: usize,
) -> String {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let length = if length == 0 {
        String::new()
    } else {
        length.to_string()
    };
    let mut ms: Vec<&(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.starts_with("x-ms-"))
        .collect();
    ms.sort();
    let canonical_headers: String = ms.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let mut params: Vec<(String, &str)> = query
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), *v))
        .collect();
    params.sort();
    let mut resource = format!("/{AZURITE_ACCOUNT}{path}"); // path: /ACCOUNT/...
    for (k, v) in params {
        resource.push_str(&format!("\n{k}:{v}"));
    }
    let standard = [
        "content-encoding",
        "content-language",
        "",
        "content-md5",
        "content-type",
        "date",
        "if-modified-since",
        "if-match",
        "if-none-match",
        "if-unmodified-since",
        "range",
    ];
    let mut to_sign = format!("{method}\n");
    for name in standard {
        to_sign.push_str(if name.is_empty() {
            &length
        } else {
            header(name)
        });
        to_sign.push('\n');
    }
    to_sign.push_str(&canonical_headers);
    to_sign.push_str(&resource);
    let key = base64_decode(AZURITE_KEY);
    base64_encode(&hmac_sha256(&key, to_sign.as_bytes()))
}

/// RFC 1123 in GMT, as `x-ms-date` wants it.
fn http_date(at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    chrono::DateTime::from_timestamp(i64::try_from(seconds).unwrap(), 0)
        .unwrap()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut bits, mut n) = (0u32, 0u32);
    for c in text.bytes().filter(|c| *c != b'=') {
        let value = BASE64
            .iter()
            .position(|b| *b == c)
            .expect("a base64 character");
        n = n << 6 | value as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
            n &= (1 << bits) - 1;
        }
    }
    out
}
