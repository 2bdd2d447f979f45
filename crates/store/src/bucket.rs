//! The checkpoint in object storage (S3, GCS, Azure): the [`Store`]
//! promises kept without rename or fsync.
//! - whole objects: a put is atomic; a streamed part is a multipart upload
//!   completed only when whole (aborted otherwise), so no partial object is
//!   ever visible under a final name; small parts go up as one put;
//! - durable and listed once the put returns (S3, GCS and Azure are
//!   strongly consistent for writes and listings);
//! - put-if-absent with the store's conditional write (S3 `If-None-Match`,
//!   GCS and Azure preconditions). A store without them (an S3-compatible
//!   server that ignores the header, or `AWS_CONDITIONAL_PUT=disabled`)
//!   falls back to look-then-put, which two writers racing for one key can
//!   both pass: there, run one writer per shard (the shard lock below
//!   still refuses a second one unless both start within the same moment);
//! - a lock is a lease: an object holding a random token of its holder's,
//!   the holder's name and an expiry, created with put-if-absent, renewed
//!   by a heartbeat with a conditional update, taken over only once
//!   expired. Nothing about hosts or process ids is trusted (two pods share
//!   a hostname and a PID). A kill -9 frees the shard after the lease's
//!   time to live. A holder that loses its lease (it stalled past it) sets
//!   its run's cancel flag; what it would still write is fenced by the
//!   commit log, not by the lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::TryStreamExt;
use segpredict_storage::object_store::path::Path as ObjectPath;
use segpredict_storage::object_store::{
    self, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
    WriteMultipart,
};
use segpredict_storage::{block_on, ObjectUrl};
use serde::{Deserialize, Serialize};

use crate::{Holder, Lock, OnLost, Store, StoreError, Upload};
use segpredict_core::time::{relative, rfc3339_ms};

/// Parts of a multipart upload: S3's minimum is 5 MiB (the last excepted).
const PART_BYTES: usize = 8 << 20;
/// Parts in flight per upload: bounds an upload's memory to this many parts.
const PARTS_IN_FLIGHT: usize = 4;

/// A run's output below a prefix of a bucket.
#[derive(Debug, Clone)]
pub struct BucketStore {
    url: ObjectUrl,
    lease: Duration,
}

impl BucketStore {
    /// `lease`: how long a lock outlives its holder's last heartbeat.
    pub fn new(url: ObjectUrl, lease: Duration) -> Self {
        Self { url, lease }
    }

    fn key(&self, key: &str) -> ObjectPath {
        self.url.key(key)
    }

    fn error(&self, op: &'static str, key: &str) -> impl FnOnce(object_store::Error) -> StoreError {
        let location = self.locate(key);
        move |source| StoreError {
            op,
            location,
            source: io_error(source),
        }
    }
}

/// Runs `operation` until it succeeds, fails for good, or the store's
/// retry time (`[storage] retry_timeout_s`) has passed, with a growing
/// pause between tries. object_store does not retry a request that is not
/// idempotent (a conditional put) once sent, and a reset connection ends
/// it: bounded by time, not by a count a burst of 503s exhausts at once.
fn retried<T>(mut operation: impl FnMut() -> object_store::Result<T>) -> object_store::Result<T> {
    let deadline = std::time::Instant::now() + segpredict_storage::settings().retry_timeout;
    let mut pause = Duration::from_millis(100);
    loop {
        match operation() {
            Err(e) if is_transient(&e) && std::time::Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, "object store request failed; trying again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            done => return done,
        }
    }
}

/// A failure of the network or the server, not an answer about the object
/// or the bucket: a missing bucket or container (Azure's list answers 404
/// `ContainerNotFound` as a generic error) or another 4xx a later try
/// cannot pass fails at once instead of for `retry_timeout`.
fn is_transient(error: &object_store::Error) -> bool {
    matches!(error, object_store::Error::Generic { .. }) && !segpredict_storage::is_permanent(error)
}

/// object_store's error as the io error [`StoreError`] carries: one line,
/// a missing bucket permanent (segpredict-storage's mapping).
fn io_error(error: object_store::Error) -> std::io::Error {
    segpredict_storage::io_error(&error)
}

impl Store for BucketStore {
    fn location(&self) -> String {
        self.url.url()
    }

    fn locate(&self, key: &str) -> String {
        self.url.url_of(&self.key(key))
    }

    fn ensure(&self) -> Result<(), StoreError> {
        // Nothing to create: a prefix exists once a key is under it.
        Ok(())
    }

    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        retried(|| block_on(self.url.store().put(&self.key(key), payload.clone())))
            .map(drop)
            .map_err(self.error("writing", key))
    }

    fn put_if_absent(&self, key: &str, bytes: &[u8]) -> Result<bool, StoreError> {
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        let create = || PutOptions::from(PutMode::Create);
        let put = || {
            block_on(
                self.url
                    .store()
                    .put_opts(&self.key(key), payload.clone(), create()),
            )
        };
        match retried(put) {
            Ok(_) => Ok(true),
            // Ours all the same when a retry found what the first try wrote
            // (its answer lost on the way back): the same bytes.
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                Ok(self.get(key)?.is_some_and(|there| there == bytes))
            }
            Err(object_store::Error::NotImplemented { .. }) => self.look_then_put(key, bytes),
            Err(e) => Err(self.error("writing", key)(e)),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let store = self.url.store();
        let path = self.key(key);
        let got = retried(|| block_on(async { store.get(&path).await?.bytes().await }));
        match got {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("reading", key)(e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        // object_store lists below whole `/`-separated parts.
        let (folder, _) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let list = || {
            let listing = self.url.store().list(Some(&self.key(folder)));
            block_on(listing.try_collect::<Vec<_>>())
        };
        let objects = retried(list).map_err(self.error("listing", folder))?;
        let mut keys: Vec<String> = objects
            .iter()
            .filter_map(|o| self.url.relative(o.location.as_ref()).map(str::to_string))
            .filter(|k| k.starts_with(prefix))
            .collect();
        keys.sort();
        Ok(keys)
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        match retried(|| block_on(self.url.store().delete(&self.key(key)))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("removing", key)(e)),
        }
    }

    fn upload(&self, key: &str) -> Result<Box<dyn Upload>, StoreError> {
        Ok(Box::new(BucketUpload::new(
            self.url.store().clone(),
            self.key(key),
            self.locate(key),
        )))
    }

    fn holder(&self, key: &str) -> Result<Option<Holder>, StoreError> {
        Ok(self
            .current_lease(key)?
            .filter(|(lease, _)| lease.is_alive())
            .map(|(lease, _)| lease.shown()))
    }

    fn lock(
        &self,
        key: &str,
        holder: &Holder,
        on_lost: OnLost,
    ) -> Result<Result<Box<dyn Lock>, Holder>, StoreError> {
        let token = random_token();
        for _ in 0..5 {
            let lease = Lease::new(&token, holder, self.lease);
            let body = PutPayload::from(lease.to_bytes());
            let create = || PutOptions::from(PutMode::Create);
            let path = self.key(key);
            match retried(|| block_on(self.url.store().put_opts(&path, body.clone(), create()))) {
                Ok(put) => return Ok(Ok(self.hold(key, lease, put.into(), on_lost))),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(self.error("taking the lock", key)(e)),
            }
            let Some((held, version)) = self.current_lease(key)? else {
                continue; // freed meanwhile
            };
            if held.token == token {
                // Our own create, whose answer was lost: a retry found it.
                return Ok(Ok(self.hold(key, lease, version, on_lost)));
            }
            if held.is_alive() {
                return Ok(Err(held.shown()));
            }
            if let Some(version) = self.take_over(key, &lease, version)? {
                tracing::warn!(lock = %self.locate(key), was = %held.holder, "took over an expired lock");
                return Ok(Ok(self.hold(key, lease, version, on_lost)));
            }
        }
        Err(self.error("taking the lock", key)(
            object_store::Error::Generic {
                store: "lease",
                source: "other writers kept taking it first".into(),
            },
        ))
    }
}

/// 128 random bits as hex: a lease's identity, which no other process has.
fn random_token() -> String {
    let mut bytes = [0u8; 16];
    // SAFETY: `bytes` is a valid buffer of its length for the call.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        // No entropy source: the time and the process still tell attempts apart.
        let fallback = format!("{}-{}", now_ms(), std::process::id());
        bytes[..fallback.len().min(16)]
            .copy_from_slice(&fallback.as_bytes()[..fallback.len().min(16)]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl BucketStore {
    /// Put-if-absent without a conditional write (see the module's note).
    fn look_then_put(&self, key: &str, bytes: &[u8]) -> Result<bool, StoreError> {
        if self.get(key)?.is_some() {
            return Ok(false);
        }
        self.put(key, bytes).map(|()| true)
    }

    /// The lease under `key` with its version, or `None`. A lease that
    /// does not parse is treated as expired (a torn or foreign object).
    fn current_lease(&self, key: &str) -> Result<Option<(Lease, UpdateVersion)>, StoreError> {
        let store = self.url.store();
        let path = self.key(key);
        let got = block_on(async move {
            let got = store.get(&path).await?;
            let version = UpdateVersion {
                e_tag: got.meta.e_tag.clone(),
                version: got.meta.version.clone(),
            };
            Ok::<_, object_store::Error>((got.bytes().await?, version))
        });
        match got {
            Ok((bytes, version)) => {
                let lease = serde_json::from_slice(&bytes).unwrap_or_else(|_| Lease::expired());
                Ok(Some((lease, version)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("reading the lock", key)(e)),
        }
    }

    /// Replaces an expired lease only if it is still the one read.
    fn take_over(
        &self,
        key: &str,
        lease: &Lease,
        version: UpdateVersion,
    ) -> Result<Option<UpdateVersion>, StoreError> {
        let body = PutPayload::from(lease.to_bytes());
        let update = PutOptions::from(PutMode::Update(version));
        match block_on(self.url.store().put_opts(&self.key(key), body, update)) {
            Ok(put) => Ok(Some(UpdateVersion::from(put))),
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => Ok(None),
            Err(object_store::Error::NotImplemented { .. }) => {
                // No conditional update: delete, then create (racy, see above).
                self.delete(key)?;
                Ok(None)
            }
            Err(e) => Err(self.error("taking the lock", key)(e)),
        }
    }

    fn hold(
        &self,
        key: &str,
        lease: Lease,
        version: UpdateVersion,
        on_lost: OnLost,
    ) -> Box<dyn Lock> {
        Box::new(LeaseLock::start(
            self.clone(),
            key.to_string(),
            lease,
            version,
            on_lost,
        ))
    }
}

/// What a lock object holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Lease {
    /// The holding attempt's own random token: its only identity.
    token: String,
    /// Who holds it, for a person.
    holder: String,
    /// Milliseconds since the Unix epoch; judged by the reader's clock, so
    /// machines' clocks must agree to well within the lease.
    expires_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Lease {
    fn new(token: &str, holder: &Holder, ttl: Duration) -> Self {
        Self {
            token: token.to_string(),
            holder: holder.0.clone(),
            expires_ms: now_ms() + ttl.as_millis() as u64,
        }
    }

    fn renewed(&self, ttl: Duration) -> Self {
        Self {
            expires_ms: now_ms() + ttl.as_millis() as u64,
            ..self.clone()
        }
    }

    fn expired() -> Self {
        Self {
            token: String::new(),
            holder: String::new(),
            expires_ms: 0,
        }
    }

    fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    fn is_alive(&self) -> bool {
        now_ms() < self.expires_ms
    }

    /// The holder and when the lease expires, for the one refused.
    fn shown(&self) -> Holder {
        let expires = UNIX_EPOCH + Duration::from_millis(self.expires_ms);
        Holder(format!(
            "{}; its lease expires {} ({})",
            self.holder,
            rfc3339_ms(self.expires_ms),
            relative(expires)
        ))
    }
}

/// A held lease: a heartbeat renews it; dropped, it is deleted (unless it
/// was lost to another holder).
#[derive(Debug)]
struct LeaseLock {
    stop: Arc<AtomicBool>,
    lost: Arc<std::sync::Mutex<Option<Holder>>>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
    store: BucketStore,
    key: String,
    token: String,
}

/// What the heartbeat thread needs.
struct Heartbeat {
    store: BucketStore,
    key: String,
    lease: Lease,
    stop: Arc<AtomicBool>,
    lost: Arc<std::sync::Mutex<Option<Holder>>>,
    on_lost: OnLost,
}

impl LeaseLock {
    fn start(
        store: BucketStore,
        key: String,
        lease: Lease,
        version: UpdateVersion,
        on_lost: OnLost,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(std::sync::Mutex::new(None));
        let token = lease.token.clone();
        let beat = Heartbeat {
            store: store.clone(),
            key: key.clone(),
            lease,
            stop: stop.clone(),
            lost: lost.clone(),
            on_lost,
        };
        let heartbeat = std::thread::Builder::new()
            .name("segpredict-lease".into())
            .spawn(move || beat.renew_until_stopped(version))
            .ok();
        Self {
            stop,
            lost,
            heartbeat,
            store,
            key,
            token,
        }
    }
}

impl Heartbeat {
    /// Renews the lease every third of its time to live. Losing it
    /// (another writer took it over after it expired, or no renewal went
    /// through for the lease's whole length) sets the run's cancel flag:
    /// the stages stop in order and the run exits 1, and anything it would
    /// still commit is fenced by the newer attempt's log record.
    fn renew_until_stopped(self, mut version: UpdateVersion) {
        let tick = Duration::from_millis(200);
        let ttl = self.store.lease;
        let mut since = std::time::Instant::now();
        let mut renewed = std::time::Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            if since.elapsed() < ttl / 3 {
                continue;
            }
            since = std::time::Instant::now();
            match self.renew(&version) {
                Ok(Ok(now)) => {
                    version = now;
                    renewed = std::time::Instant::now();
                }
                Ok(Err(taker)) => return self.lose(taker),
                Err(error) if renewed.elapsed() >= ttl => {
                    tracing::warn!(lock = %self.store.locate(&self.key), %error, "no renewal of the lock went through for its whole lease");
                    return self.lose(Holder("whoever took it after it expired".into()));
                }
                Err(error) => {
                    tracing::warn!(lock = %self.store.locate(&self.key), %error, "renewing the lock failed; trying again")
                }
            }
        }
    }

    /// One renewal: the new version, or who holds the lease now.
    fn renew(&self, version: &UpdateVersion) -> Result<Result<UpdateVersion, Holder>, StoreError> {
        let body = PutPayload::from(self.lease.renewed(self.store.lease).to_bytes());
        let update = PutOptions::from(PutMode::Update(version.clone()));
        let path = self.store.key(&self.key);
        match block_on(self.store.url.store().put_opts(&path, body, update)) {
            Ok(put) => Ok(Ok(put.into())),
            Err(object_store::Error::Precondition { .. }) => {
                // Our own renewal applied with its answer lost reads as a
                // changed version too: then the lease is still ours.
                match self.store.current_lease(&self.key)? {
                    Some((lease, now)) if lease.token == self.lease.token => Ok(Ok(now)),
                    Some((lease, _)) => Ok(Err(lease.shown())),
                    None => Ok(Err(Holder("nobody (the lock was removed)".into()))),
                }
            }
            Err(e) => Err(self.store.error("renewing the lock", &self.key)(e)),
        }
    }

    fn lose(&self, taker: Holder) {
        tracing::error!(lock = %self.store.locate(&self.key), now = %taker, "lost this shard's lock to another writer; stopping so no row is written twice");
        *self.lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(taker);
        if let Some(cancel) = &self.on_lost {
            cancel.store(true, Ordering::SeqCst);
        }
    }
}

impl Lock for LeaseLock {
    fn lost(&self) -> Option<Holder> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for LeaseLock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(heartbeat) = self.heartbeat.take() {
            let _ = heartbeat.join();
        }
        // Never remove another holder's lease.
        let ours = matches!(self.store.current_lease(&self.key), Ok(Some((lease, _))) if lease.token == self.token);
        if self.lost().is_some() || !ours {
            return;
        }
        if let Err(error) = self.store.delete(&self.key) {
            tracing::warn!(%error, "releasing the lock (it expires by itself)");
        }
    }
}

/// A streamed object: buffered up to one part; one put if it never grows
/// past it, else object_store's [`WriteMultipart`] (parts of
/// [`PART_BYTES`], at most [`PARTS_IN_FLIGHT`] uploading), completed by
/// [`Upload::finish`] and aborted when dropped unfinished.
struct BucketUpload {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    location: String,
    sending: Sending,
}

/// Where an upload's bytes are: still in memory, or streaming as parts.
enum Sending {
    Buffered(Vec<u8>),
    Parts(WriteMultipart),
}

impl BucketUpload {
    fn new(store: Arc<dyn ObjectStore>, path: ObjectPath, location: String) -> Self {
        Self {
            store,
            path,
            location,
            sending: Sending::Buffered(Vec::new()),
        }
    }

    fn error(&self, source: object_store::Error) -> StoreError {
        StoreError {
            op: "uploading",
            location: self.location.clone(),
            source: io_error(source),
        }
    }

    /// The buffer outgrew one part: from here on it streams as a multipart
    /// upload. A new upload each try: one whose answer was lost stays
    /// incomplete and invisible.
    fn start_parts(&mut self, buffered: &[u8]) -> object_store::Result<()> {
        let upload = retried(|| block_on(self.store.put_multipart(&self.path)))?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        segpredict_storage::runtime().block_on(async { parts.write(buffered) });
        self.sending = Sending::Parts(parts);
        Ok(())
    }

    fn complete(&mut self) -> object_store::Result<()> {
        match std::mem::replace(&mut self.sending, Sending::Buffered(Vec::new())) {
            Sending::Buffered(whole) => {
                block_on(self.store.put(&self.path, PutPayload::from(whole))).map(drop)
            }
            // finish aborts the upload itself when a part or the completion fails.
            Sending::Parts(parts) => block_on(parts.finish()).map(drop),
        }
    }
}

impl std::io::Write for BucketUpload {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.sending {
            Sending::Buffered(buffer) => {
                buffer.extend_from_slice(buf);
                if buffer.len() >= PART_BYTES {
                    let buffered = std::mem::take(buffer);
                    self.start_parts(&buffered).map_err(io_error)?;
                }
            }
            // Waits while too many parts are out (an upload's memory is
            // bounded); write spawns the next part on the runtime.
            Sending::Parts(parts) => block_on(async {
                parts.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                parts.write(buf);
                Ok::<_, object_store::Error>(())
            })
            .map_err(io_error)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Upload for BucketUpload {
    fn finish(mut self: Box<Self>) -> Result<(), StoreError> {
        self.complete().map_err(|e| self.error(e))
    }
}

impl Drop for BucketUpload {
    fn drop(&mut self) {
        // Unfinished: the parts sent are discarded, nothing under the key.
        // (A process killed here leaves an incomplete upload, invisible and
        // billed until the bucket's AbortIncompleteMultipartUpload rule.)
        let sending = std::mem::replace(&mut self.sending, Sending::Buffered(Vec::new()));
        if let Sending::Parts(parts) = sending {
            if let Err(error) = block_on(parts.abort()) {
                tracing::warn!(upload = %self.location, %error, "aborting an unfinished upload");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use segpredict_storage::object_store::memory::InMemory;

    /// A store over object_store's in-memory store (which keeps conditional
    /// puts and multipart uploads as S3 does), below `out/`.
    fn store() -> BucketStore {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let url = ObjectUrl::with_store("memory://test", "out", memory);
        BucketStore::new(url, Duration::from_secs(60))
    }

    #[test]
    fn put_if_absent_refuses_a_key_that_exists_and_list_keeps_to_the_prefix() {
        let store = store();
        assert!(store.put_if_absent("_progress/m.json", b"first").unwrap());
        assert!(!store.put_if_absent("_progress/m.json", b"second").unwrap());
        assert_eq!(
            store.get("_progress/m.json").unwrap().unwrap(),
            &b"first"[..]
        );
        store.put("part-a001-00-00001.parquet", b"p").unwrap();
        store.put("_progress/done-s000of001.json", b"d").unwrap();
        assert_eq!(
            store.list("_progress/d").unwrap(),
            ["_progress/done-s000of001.json"]
        );
        assert_eq!(store.list("").unwrap().len(), 3);
        store.delete("_progress/m.json").unwrap();
        store.delete("_progress/m.json").unwrap();
        assert_eq!(store.get("_progress/m.json").unwrap(), None);
        assert_eq!(store.locate("_SUCCESS"), "memory://test/out/_SUCCESS");
    }

    #[test]
    fn an_upload_is_visible_only_when_finished_and_a_dropped_one_leaves_nothing() {
        let store = store();
        let big = vec![7u8; PART_BYTES * 2 + 123];
        let mut upload = store.upload("part-a001-00-00001.parquet").unwrap();
        upload.write_all(&big).unwrap();
        assert!(store.list("").unwrap().is_empty(), "visible before finish");
        upload.finish().unwrap();
        assert_eq!(
            store
                .get("part-a001-00-00001.parquet")
                .unwrap()
                .unwrap()
                .len(),
            big.len()
        );
        let mut dropped = store.upload("part-a001-00-00002.parquet").unwrap();
        dropped.write_all(&big).unwrap();
        drop(dropped);
        assert_eq!(store.list("").unwrap(), ["part-a001-00-00001.parquet"]);
        let mut small = store.upload("_rejects.parquet").unwrap();
        small.write_all(b"whole").unwrap();
        small.finish().unwrap();
        assert_eq!(
            store.get("_rejects.parquet").unwrap().unwrap(),
            &b"whole"[..]
        );
    }

    #[test]
    fn a_lease_refuses_a_second_holder_frees_on_drop_and_an_expired_one_is_taken_over() {
        let store = store();
        let key = "_progress/lock-s000of001";
        let first = store
            .lock(key, &Holder("pid 1 on a".into()), None)
            .unwrap()
            .unwrap();
        let shown = store.holder(key).unwrap().unwrap().0;
        assert!(
            shown.starts_with("pid 1 on a; its lease expires 20"),
            "{shown}"
        );
        assert!(
            shown.ends_with("(in 59 s)") || shown.ends_with("(in 1 min)"),
            "{shown}"
        );
        // The same host and process id, another attempt: still refused.
        let refused = store
            .lock(key, &Holder("pid 1 on a".into()), None)
            .unwrap()
            .unwrap_err();
        assert!(
            refused.0.starts_with("pid 1 on a; its lease expires"),
            "{refused}"
        );
        drop(first);
        assert_eq!(store.holder(key).unwrap(), None);
        let expired = Lease {
            token: "another".into(),
            holder: "pid 3 on c".into(),
            expires_ms: now_ms() - 1,
        };
        store.put(key, &expired.to_bytes()).unwrap();
        assert_eq!(
            store.holder(key).unwrap(),
            None,
            "an expired lease holds nothing"
        );
        let taken = store.lock(key, &Holder("pid 4 on d".into()), None).unwrap();
        assert!(taken.is_ok(), "an expired lease is taken over");
    }

    #[test]
    fn a_lease_taken_over_sets_the_cancel_flag_and_is_not_removed_by_its_loser() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let url = ObjectUrl::with_store("memory://test", "out", memory);
        let store = BucketStore::new(url, Duration::from_millis(900));
        let key = "_progress/lock-s000of001";
        let cancel = Arc::new(AtomicBool::new(false));
        let first = store
            .lock(key, &Holder("first".into()), Some(cancel.clone()))
            .unwrap()
            .unwrap();
        // Another attempt takes the lease over as if the first had stalled.
        let second = Lease {
            token: "second".into(),
            holder: "second".into(),
            expires_ms: now_ms() + 60_000,
        };
        store.put(key, &second.to_bytes()).unwrap();
        let waited = std::time::Instant::now();
        while !cancel.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            cancel.load(Ordering::SeqCst),
            "the loser's run is cancelled"
        );
        assert!(first.lost().unwrap().0.starts_with("second"));
        drop(first);
        assert!(store.holder(key).unwrap().unwrap().0.starts_with("second"));
    }
}
