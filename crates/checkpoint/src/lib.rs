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

#![warn(missing_docs)]

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
    /// The store failed (a checksum that does not match included).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Parquet writer or reader failed.
    #[error("writing {location}")]
    Parquet {
        /// The file.
        location: String,
        /// What the Parquet crate said.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A record batch could not be built from the rows.
    #[error("writing {location}: building the record batch")]
    Arrow {
        /// The file.
        location: String,
        /// What Arrow said.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A committed file read back does not hold what this program writes
    /// (a column missing or of another type): a retry reads the same.
    #[error("reading {location}: {problem}")]
    Content {
        /// The file.
        location: String,
        /// What is wrong with it, for the message.
        problem: String,
    },
    /// A write to a file after it was committed: a bug in the caller.
    #[error("writing {location}: the file is already closed")]
    Closed {
        /// The file.
        location: String,
    },
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
