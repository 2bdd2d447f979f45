//! Where bytes live: a local path or an object-store URL (`s3://bucket/prefix/`,
//! `gs://`, `az://`/`abfss://`, `file://`). One client per bucket, built from
//! the usual environment (`AWS_*` with `AWS_ENDPOINT_URL`, `GOOGLE_*`,
//! `AZURE_*`) the way object_store's builders read it; every request counted
//! ([`requests`]). The reader lists and reads inputs through it, the
//! checkpoint's object store writes outputs through it.
//!
//! Nothing here holds a secret in a name: a location is the URL as given,
//! and credentials never leave the builders.

#![warn(missing_docs)]

mod answer;
mod counting;
mod list;
mod retry;
mod runtime;

use segpredict_core::exit::{Classify, Failure};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, RetryConfig};

pub use counting::{count_refetched_range, requests};
pub use list::{is_glob, list_objects};
pub use object_store;
pub use retry::{retry_deadline, retry_for};
pub use runtime::{block_on, runtime};

/// A location that is not usable, named. Each is one line: object_store's
/// errors repeat their HTTP body at every level of their chain, so the
/// store's error is kept (for its class) but shown as [`one_line`].
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The text is not a location segpredict can use (an unknown scheme,
    /// no bucket, a bad glob pattern); found before any request is sent.
    #[error("{location}: {reason}")]
    Url {
        /// The location as the user gave it.
        location: String,
        /// What is wrong with it, for the message.
        reason: String,
    },
    /// The bucket's client could not be built (missing or malformed
    /// credentials or settings in the environment).
    #[error("{location}: connecting to the object store: {}", one_line(error))]
    Connect {
        /// The bucket's URL, `scheme://bucket`.
        location: String,
        /// object_store's builder error, kept for its class.
        error: object_store::Error,
    },
    /// A request to the store failed after object_store's own retries;
    /// [`is_permanent`] says whether another attempt can pass.
    #[error("{op} {location}: {}", one_line(error))]
    Request {
        /// What was being done, as a verb phrase (`"listing"`,
        /// `"looking up"`).
        op: &'static str,
        /// The URL of the prefix the request was about.
        location: String,
        /// object_store's error, kept for its class.
        error: object_store::Error,
    },
}

impl Classify for StorageError {
    /// Whether trying again cannot help: a malformed URL, a missing bucket
    /// or credentials, a refused permission. Network and server errors are
    /// retryable (object_store already retried them with backoff).
    fn failure(&self) -> Failure {
        match self {
            StorageError::Url { .. } | StorageError::Connect { .. } => Failure::Permanent,
            StorageError::Request { error, .. } => Failure::permanent_if(is_permanent(error)),
        }
    }
}

/// An object_store error that another attempt will meet again: a bad
/// path or setting, refused credentials, and any other answer of the
/// server that is the request's fault (4xx: a missing bucket or container,
/// a bad bucket name) except those a later try can pass (408, 409, 412,
/// 423, 429). An object's own `NotFound` is not here: whether a missing
/// key is an error is the caller's to say.
pub fn is_permanent(error: &object_store::Error) -> bool {
    use object_store::Error::*;
    match error {
        InvalidPath { .. }
        | NotSupported { .. }
        | NotImplemented { .. }
        | PermissionDenied { .. }
        | Unauthenticated { .. }
        | UnknownConfigurationKey { .. } => true,
        NotFound { .. } => is_missing_bucket(error),
        Generic { .. } => answer::Answer::of(error)
            .and_then(|a| a.status)
            .is_some_and(|s| (400..500).contains(&s) && ![408, 409, 412, 423, 429].contains(&s)),
        _ => false,
    }
}

/// Whether `error` says the bucket or container itself does not exist.
pub fn is_missing_bucket(error: &object_store::Error) -> bool {
    answer::Answer::of(error).is_some_and(|a| a.is_missing_bucket())
}

/// object_store's error as one line: the server's status, its error code
/// and message (not the XML or JSON body, once per level of the chain),
/// and the retries spent; or the transport's failure.
pub fn one_line(error: &object_store::Error) -> String {
    answer::one_line(error)
}

/// `error` as the `std::io::Error` a store's caller carries: a kind that
/// says whether a retry can help (`NotFound`, `AlreadyExists`,
/// `PermissionDenied`, `InvalidInput` for [`is_permanent`], a missing
/// bucket included, else `Other`) and the message in [`one_line`], with no
/// chain behind it to print the body again.
pub fn io_error(error: &object_store::Error) -> std::io::Error {
    use object_store::Error::*;
    use std::io::ErrorKind;
    let kind = match error {
        e if is_missing_bucket(e) => ErrorKind::InvalidInput,
        NotFound { .. } => ErrorKind::NotFound,
        AlreadyExists { .. } => ErrorKind::AlreadyExists,
        PermissionDenied { .. } | Unauthenticated { .. } => ErrorKind::PermissionDenied,
        e if is_permanent(e) => ErrorKind::InvalidInput,
        _ => ErrorKind::Other,
    };
    std::io::Error::new(kind, one_line(error))
}

/// What tells a local file from another with the same path, size and
/// modification time: its inode and its change time (`ctime`, which the
/// kernel sets on every write, rename or metadata change and which `touch`
/// cannot set), as `inode 1234 ctime 1765062000123456789` (nanoseconds).
/// A file swapped for another, or rewritten with its mtime put back, has
/// another identity.
pub fn file_identity(metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let ctime_ns = i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec());
    format!("inode {} ctime {ctime_ns}", metadata.ino())
}

/// `(inode, ctime in nanoseconds)` from [`file_identity`]'s text.
pub fn parse_file_identity(text: &str) -> Option<(u64, i128)> {
    let rest = text.strip_prefix("inode ")?;
    let (inode, ctime) = rest.split_once(" ctime ")?;
    Some((inode.parse().ok()?, ctime.parse().ok()?))
}

/// A local path as one spelling: absolute, with `.`, `..` and symbolic
/// links resolved (`file://` stripped), so `./in`, `in/` and `/data/in`
/// name one input. A path that does not exist is made absolute only.
pub fn canonical_path(path: &std::path::Path) -> PathBuf {
    let text = path.to_string_lossy();
    let path = text
        .strip_prefix("file://")
        .map_or(path, std::path::Path::new);
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| std::path::absolute(path).unwrap_or(path.to_path_buf()))
}

/// A place: a local path, or a prefix in a bucket.
#[derive(Debug, Clone)]
pub enum Location {
    /// A path on the local (or mounted) file system, as given: relative
    /// paths stay relative (see [`canonical_path`]).
    Local(PathBuf),
    /// A prefix in an object-store bucket, with its connected client.
    Object(ObjectUrl),
}

/// URL schemes that name object storage (`file://` is a local path).
const OBJECT_SCHEMES: [&str; 8] = ["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss"];

/// Whether `text` names object storage (by its scheme), not a local path.
pub fn is_object_url(text: &str) -> bool {
    text.split_once("://")
        .is_some_and(|(scheme, _)| OBJECT_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

impl Location {
    /// A path, `file://` URL or object-store URL; connecting (credentials
    /// from the environment) happens here, so a bad URL fails at start.
    pub fn parse(text: &str) -> Result<Location, StorageError> {
        if let Some(path) = text.strip_prefix("file://") {
            return Ok(Location::Local(PathBuf::from(path)));
        }
        if !is_object_url(text) {
            if text.contains("://") {
                return Err(StorageError::Url {
                    location: text.to_string(),
                    reason: format!(
                        "not a path or a supported URL (schemes: file, {})",
                        OBJECT_SCHEMES.join(", ")
                    ),
                });
            }
            return Ok(Location::Local(PathBuf::from(text)));
        }
        ObjectUrl::parse(text).map(Location::Object)
    }
}

/// A prefix in a bucket, with the bucket's client.
#[derive(Debug, Clone)]
pub struct ObjectUrl {
    /// `scheme://bucket`, as given.
    bucket_url: String,
    /// The key prefix inside the bucket, without leading or trailing `/`
    /// (may hold glob characters for an input pattern).
    prefix: String,
    store: Arc<dyn ObjectStore>,
}

impl ObjectUrl {
    fn parse(text: &str) -> Result<ObjectUrl, StorageError> {
        Self::parse_with(text, None)
    }

    /// `text` (an object-store URL) with a client of its own, built from
    /// `options` (object_store's configuration keys and values, such as
    /// `azure_storage_account_name` or `aws_endpoint`) over the
    /// environment, not shared with [`Location::parse`]'s: for tests and
    /// tools that reach a store the process's environment does not name.
    pub fn with_options(text: &str, options: &[(&str, &str)]) -> Result<ObjectUrl, StorageError> {
        Self::parse_with(text, Some(options))
    }

    fn parse_with(text: &str, options: Option<&[(&str, &str)]>) -> Result<ObjectUrl, StorageError> {
        let bad = |reason: &str| StorageError::Url {
            location: text.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket or container in the URL"));
        }
        let bucket_url = format!("{scheme}://{bucket}");
        let store = match options {
            None => connect(&bucket_url)?,
            Some(options) => {
                build(&bucket_url, options).map_err(|error| StorageError::Connect {
                    location: bucket_url.clone(),
                    error,
                })?
            }
        };
        Ok(ObjectUrl {
            bucket_url,
            prefix: prefix.trim_matches('/').to_string(),
            store,
        })
    }

    /// A prefix of `store` named `bucket_url` (`memory://test`): for tests
    /// against object_store's in-memory store.
    pub fn with_store(bucket_url: &str, prefix: &str, store: Arc<dyn ObjectStore>) -> Self {
        ObjectUrl {
            bucket_url: bucket_url.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            store,
        }
    }

    /// The bucket's client (one per bucket for parsed locations, see
    /// [`Self::with_options`] for the exception); keys passed to it are
    /// full keys ([`Self::key`]), not names below the prefix.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key prefix inside the bucket (no leading or trailing `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object `name` below this prefix.
    pub fn key(&self, name: &str) -> ObjectPath {
        ObjectPath::from(self.key_text(name))
    }

    fn key_text(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{name}", self.prefix),
        }
    }

    /// The URL of a key of this bucket, as a person names it.
    pub fn url_of(&self, key: &ObjectPath) -> String {
        format!("{}/{key}", self.bucket_url)
    }

    /// This location's URL, with a trailing `/` when it has a prefix (for
    /// an object, use [`ObjectUrl::url_of`] with [`ObjectUrl::key`]).
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("{}/", self.bucket_url)
        } else {
            format!("{}/{}/", self.bucket_url, self.prefix)
        }
    }

    /// `name` relative to this prefix, if it lies below it.
    pub fn relative<'a>(&self, key: &'a str) -> Option<&'a str> {
        if self.prefix.is_empty() {
            return Some(key);
        }
        key.strip_prefix(self.prefix.as_str())?.strip_prefix('/')
    }
}

/// How object storage is reached: retries and timeouts. Set once at start
/// ([`configure`]), before the first connection.
#[derive(Debug, Clone, Copy)]
pub struct StorageSettings {
    /// A cap on the retries of one request, if any: by default only
    /// `retry_timeout` bounds them, so a burst of 503s or a short outage
    /// is ridden out however many tries it takes.
    pub max_retries: Option<usize>,
    /// How long one request is retried (5xx, 429, resets, timeouts), with
    /// exponential backoff and jitter: no retry starts later than this
    /// after the first try. Also the bound of [`retry_for`].
    pub retry_timeout: Duration,
    /// How long a shard's lock in object storage outlives its holder's
    /// last heartbeat (renewed every third of it): after a kill -9 on
    /// another machine, the rerun waits at most this long.
    pub lock_lease: Duration,
}

impl Default for StorageSettings {
    fn default() -> Self {
        Self {
            max_retries: None,
            retry_timeout: Duration::from_secs(180),
            lock_lease: Duration::from_secs(60),
        }
    }
}

static SETTINGS: OnceLock<StorageSettings> = OnceLock::new();

/// Sets retries for every client this process builds; the first call wins
/// (call it before any location is parsed).
pub fn configure(settings: StorageSettings) {
    let _ = SETTINGS.set(settings);
}

/// The settings in force ([`configure`]'s, else the defaults).
pub fn settings() -> StorageSettings {
    SETTINGS.get().copied().unwrap_or_default()
}

fn retry_config() -> RetryConfig {
    let settings = settings();
    RetryConfig {
        // Bounded by time, not by a count a burst of 503s uses up in seconds.
        max_retries: settings.max_retries.unwrap_or(usize::MAX),
        retry_timeout: settings.retry_timeout,
        backoff: retry::backoff(),
    }
}

/// The client of `scheme://bucket`, built once per process.
fn connect(bucket_url: &str) -> Result<Arc<dyn ObjectStore>, StorageError> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Default::default);
    let mut clients = clients.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(client) = clients.get(bucket_url) {
        return Ok(client.clone());
    }
    let client = build(bucket_url, &[]).map_err(|error| StorageError::Connect {
        location: bucket_url.to_string(),
        error,
    })?;
    clients.insert(bucket_url.to_string(), client.clone());
    Ok(client)
}

/// `Builder::from_env()` for `url`, `options` over it, our retry policy and
/// request-counting connector, built. (object_store's three builders share
/// these methods but no trait, hence a macro.)
macro_rules! configured {
    ($builder:ty, $url:expr, $options:expr) => {{
        let mut builder = <$builder>::from_env().with_url($url);
        for (key, value) in $options {
            builder = builder.with_config(key.parse()?, *value);
        }
        Arc::new(
            builder
                .with_retry(retry_config())
                .with_http_connector(counting::CountingConnector)
                .build()?,
        )
    }};
}

/// A client of `bucket_url` from the environment, then `options`
/// (object_store's configuration keys) over it.
fn build(bucket_url: &str, options: &[(&str, &str)]) -> object_store::Result<Arc<dyn ObjectStore>> {
    use object_store::{aws, azure, gcp};
    let scheme = bucket_url.split_once("://").map_or("", |(s, _)| s);
    Ok(match scheme {
        "s3" | "s3a" => configured!(aws::AmazonS3Builder, bucket_url, options),
        "gs" => configured!(gcp::GoogleCloudStorageBuilder, bucket_url, options),
        _ => configured!(azure::MicrosoftAzureBuilder, bucket_url, options),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn paths_and_file_urls_are_local_and_other_schemes_are_refused() {
        assert!(
            matches!(Location::parse("out/x").unwrap(), Location::Local(p) if p == Path::new("out/x"))
        );
        assert!(
            matches!(Location::parse("file:///data/in").unwrap(), Location::Local(p) if p == Path::new("/data/in"))
        );
        let error = Location::parse("ftp://host/x").unwrap_err().to_string();
        assert!(
            error.contains("ftp://host/x") && error.contains("s3"),
            "{error}"
        );
        assert!(Location::parse("s3:///x").unwrap_err().is_permanent());
    }

    #[test]
    fn an_s3_url_splits_into_bucket_and_prefix() {
        let Location::Object(url) = Location::parse("s3://nightly/in/2026-12-04/").unwrap() else {
            panic!("not an object URL");
        };
        assert_eq!(url.prefix(), "in/2026-12-04");
        assert_eq!(url.url(), "s3://nightly/in/2026-12-04/");
        assert_eq!(url.key("_SUCCESS").as_ref(), "in/2026-12-04/_SUCCESS");
        assert_eq!(
            url.relative("in/2026-12-04/a/b.parquet"),
            Some("a/b.parquet")
        );
        assert_eq!(url.relative("in/2026-12-040/b.parquet"), None);
        assert_eq!(url.url_of(&url.key("x")), "s3://nightly/in/2026-12-04/x");
    }

    #[test]
    fn options_build_a_client_of_its_own_and_an_unknown_key_is_refused() {
        let options = [
            ("azure_storage_account_name", "devstoreaccount1"),
            ("azure_storage_account_key", "a2V5"),
            (
                "azure_storage_endpoint",
                "http://127.0.0.1:1/devstoreaccount1",
            ),
            ("azure_allow_http", "true"),
        ];
        let url = ObjectUrl::with_options("az://night/out/", &options).unwrap();
        assert_eq!(url.url(), "az://night/out/");
        let bad = ObjectUrl::with_options("s3://night/out/", &[("aws_no_such_key", "1")]);
        assert!(bad.unwrap_err().is_permanent());
    }
}
