//! segpredict: offline batch prediction with PyTorch models whose inputs
//! vary in size, batched under a segment budget so GPU memory stays flat.
//!
//! This crate wires the stage crates (`segpredict-reader`,
//! `segpredict-bucketing`, `segpredict-worker`, `segpredict-checkpoint`)
//! over the vocabulary of `segpredict-core`; the binary (`src/main.rs`)
//! only calls [`cli::main`].

pub mod cli;
pub mod config;
pub mod inspect;
pub mod local_shards;
pub mod logging;
pub mod metrics;
pub mod pipeline;
pub mod progress;
pub mod signals;
