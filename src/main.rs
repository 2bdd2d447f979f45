//! segpredict: offline batch prediction with PyTorch models whose inputs
//! vary in size, batched under a segment budget so GPU memory stays flat.

mod bucketing;
mod cli;
mod config;
mod cpu;
mod inspect;
mod logging;
mod message;
mod pipeline;
mod reader;
mod report;
mod worker;
mod writer;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
