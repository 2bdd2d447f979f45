//! What a run is asked to do beyond its pipeline file, and how losing the
//! shard's lock ends it.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use segpredict_core::exit::{Classify, Failure};
use segpredict_core::shard::ShardSpec;

/// What a run is asked to do beyond its pipeline file.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The part of the input this process predicts.
    pub shard: ShardSpec,
    /// How long to wait for another process holding the shard's lock
    /// (`--wait-for-lock`; zero: exit 1 at once, naming it).
    pub wait_for_lock: std::time::Duration,
    /// Set if the shard's lock is lost while the run holds it.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            shard: ShardSpec::WHOLE,
            wait_for_lock: std::time::Duration::ZERO,
            cancel: None,
        }
    }
}

/// This process lost the shard's lock to another (it stalled past its
/// lease): it stopped in order, and the newer holder goes on.
#[derive(Debug, thiserror::Error)]
#[error("lost the shard's lock to another process ({holder}) after stalling past its lease; stopped without committing more (the newer holder redoes what this one had not committed)")]
pub struct LostLock {
    pub(super) holder: String,
}

impl Classify for LostLock {
    fn failure(&self) -> Failure {
        Failure::Retryable
    }
}
