//! segpredict's shared vocabulary: the messages stages exchange, the
//! dealing of input units to shards, the done set, fixed-size batch
//! statistics, the exit codes and CPU priorities. It links no libtorch, so
//! its tests build and run without it.

#![warn(missing_docs)]

pub mod accounting;
pub mod carry;
pub mod cpu;
pub mod done;
pub mod exit;
pub mod message;
pub mod record;
pub mod requests;
pub mod shard;
pub mod stats;
pub mod time;
