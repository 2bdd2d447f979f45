//! The HTTP the store harnesses' own clients speak (`s3.rs`, `azure.rs`,
//! `gcs.rs`): one loopback agent, one request sent and read whole, an
//! answer that must come with the status expected, the encodings and the
//! HMAC their signatures share, names unique in the process, and a
//! child's environment with nothing of the developer's left to redirect it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// A loopback agent: HTTP errors are answers, not errors; no proxy from
/// the environment; no pooled connections, so one call is one connection
/// and a reset or a stall shows in the call that met it.
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

/// One answer: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
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

/// `request` with `body` sent on `agent`, its answer read whole; `Err`
/// when the connection failed (a reset, a refused connection), whatever
/// the status otherwise.
pub(super) fn send(
    agent: &ureq::Agent,
    request: ureq::http::request::Builder,
    body: &[u8],
) -> Result<HttpResponse, ureq::Error> {
    let mut response = agent.run(request.body(body.to_vec()).unwrap())?;
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
            (n.as_str().to_string(), value)
        })
        .collect();
    let status = response.status().as_u16();
    let body = whole_body(&mut response)?;
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// The answer to `method path` on `endpoint`, which must have come and
/// be `expected`; panics naming the request and the answer otherwise.
pub(super) fn expect_status(
    answer: Result<HttpResponse, ureq::Error>,
    expected: u16,
    method: &str,
    path: &str,
    endpoint: &str,
) -> HttpResponse {
    let response = answer.unwrap_or_else(|e| panic!("{method} {path} on {endpoint}: {e}"));
    assert_eq!(
        response.status,
        expected,
        "{method} {path} on {endpoint}: {}",
        response.text()
    );
    response
}

/// Each of `keys` (names under `prefix`) read with `get` into `dir`, at its
/// name less `prefix` (so `read_output(dir)` reads an output prefix); the
/// paths written.
pub(super) fn download_each(
    keys: Vec<String>,
    prefix: &str,
    dir: &Path,
    get: impl Fn(&str) -> Vec<u8>,
) -> Vec<PathBuf> {
    let mut written = Vec::new();
    for key in keys {
        let path = dir.join(key[prefix.len()..].trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, get(&key)).unwrap();
        written.push(path);
    }
    written
}

/// A bucket or container name after `hint`, unique in this process and
/// valid in every store: lowercase letters, digits and single dashes.
pub(super) fn unique_name(hint: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = String::new();
    for c in hint.chars().take(40) {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if !(c == '-' && name.ends_with('-')) {
            name.push(c);
        }
    }
    format!("{}-{}-{n}", name.trim_matches('-'), std::process::id())
}

/// Loopback is never reached through a proxy.
pub(super) fn no_proxy() -> [(&'static str, String); 2] {
    [
        ("NO_PROXY", "127.0.0.1,localhost".to_string()),
        ("no_proxy", "127.0.0.1,localhost".to_string()),
    ]
}

/// Sets `env` on `command`, removing first the developer's own set-up
/// (`foreign`, the store's credential and endpoint variables) and proxies,
/// which could point it elsewhere.
pub(super) fn configure_child<'a>(
    command: &'a mut Command,
    foreign: &[&str],
    env: Vec<(&'static str, String)>,
) -> &'a mut Command {
    for var in foreign {
        command.env_remove(var);
    }
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        command.env_remove(var);
    }
    command.envs(env)
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
