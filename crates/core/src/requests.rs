//! Requests a run made to object storage: what the report and the metrics
//! show, so a flaky network is visible and not only slow.

use serde::{Deserialize, Serialize};

/// Requests to object storage (input and output together) since the
/// process started. Zero for a run on local disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreRequests {
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Requests that failed (5xx, 429, a reset connection, a timeout, a
    /// body cut short): each was retried with backoff unless the retries
    /// ran out, and then the operation failed.
    pub failed: u64,
    /// Bytes of object data received (range reads, gets).
    pub bytes_read: u64,
    /// Bytes of object data sent (puts, parts of uploads).
    pub bytes_written: u64,
    /// Input ranges that did not decode and were fetched again (pinned to
    /// the object's recorded ETag) and then decoded: damage in transit,
    /// ridden out.
    #[serde(default)]
    pub refetched_ranges: u64,
}
