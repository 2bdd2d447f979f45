//! The `segpredict` command; everything lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    segpredict::cli::main()
}
