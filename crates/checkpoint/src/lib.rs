//! The output location as the run's checkpoint: the commit protocol.
//!
//! Everything a run writes goes through a [`store::Store`] (the
//! `segpredict-store` crate); `layout.rs` owns every name; what is visible
//! is what each shard's commit log (`log.rs`) counts; the protocol over
//! them is `checkpoint.rs` (the verdict `run` and `check` share, the lock,
//! an attempt's beginning, its epoch and its undoing) and `commit.rs` (the
//! run's commit). A file is made visible by streaming it to the store
//! (`committing.rs`: [`CommittingParquet`], whole or not at all, its size
//! and SHA-256 taken) and naming it in a record the shard's [`LogWriter`]
//! appends. The writer threads that fill parts, rejects and batch records
//! are the `segpredict-writers` crate's, above this one; the formats this
//! crate reads back or merges (`rejects.rs`, `batches.rs`) are here.

pub mod batches;
pub mod checkpoint;
pub mod commit;
pub mod committing;
pub mod layout;
pub mod log;
pub mod manifest;
pub mod rejects;

use segpredict_core::exit::{Classify, Failure};

pub use committing::{CommittingParquet, Written};
pub use layout::{AttemptNames, OutputLayout, BATCHES};
pub use log::{FileEntry, FileKind, LogWriter};
/// The store crate, under the name the protocol's modules use for it.
pub use segpredict_store as store;
pub use segpredict_store::{open_store, LocalStore, Store, StoreError};

/// Why a file the checkpoint writes, reads back or merges failed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing {location}")]
    Parquet {
        location: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("writing {location}: building the record batch")]
    Arrow {
        location: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("reading {location}: {problem}")]
    Content { location: String, problem: String },
    #[error("writing {location}: the file is already closed")]
    Closed { location: String },
}

impl Classify for FileError {
    /// A malformed committed file stays so on a retry; a full disk or a
    /// flaky store may not.
    fn failure(&self) -> Failure {
        match self {
            FileError::Store(e) => e.failure(),
            FileError::Parquet { .. } | FileError::Arrow { .. } | FileError::Closed { .. } => {
                Failure::Retryable
            }
            FileError::Content { .. } => Failure::Permanent,
        }
    }
}
