//! segpredict: offline batch prediction with PyTorch models whose inputs
//! vary in size, batched under a segment budget so GPU memory stays flat.
//!
//! The binary (`src/main.rs`) only calls [`cli::main`]; the library exists so
//! integration tests and benchmarks can reach the stages.

pub mod bucketing;
pub mod cli;
pub mod commit;
pub mod config;
pub mod cpu;
pub mod exit;
pub mod inspect;
pub mod local_shards;
pub mod logging;
pub mod message;
pub mod metrics;
pub mod pipeline;
pub mod progress;
pub mod reader;
pub mod report;
pub mod signals;
pub mod worker;
pub mod writer;
