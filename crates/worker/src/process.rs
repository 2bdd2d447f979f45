//! Process state: the environment variables libtorch and AOTInductor read,
//! set before the process starts any thread of its own.
//!
//! `getenv` in C and C++ code (libtorch, CUDA's libraries, a package's
//! compiled code) takes no lock, so changing the environment while another
//! thread may read it is a data race (Rust 2024 makes `set_var` unsafe for
//! this reason). This module is the only place that changes it
//! (`tests/tidy.rs` holds every other source to that), and
//! [`prepare_process`] is called first thing in each command that loads a
//! model, before the metrics exporter, the readers or the model's own
//! loading thread exist.

use std::ffi::OsString;

use super::backend;
use super::ModelConfig;
use segpredict_core::message::InputSpec;

/// AOTInductor's switch for the input checks it compiles into a package.
const CHECK_INPUTS_VAR: &str = "AOTI_RUNTIME_CHECK_INPUTS";

/// Sets what the process's libraries read from the environment, then, for
/// an AOTInductor package, runs its start-up input check (see
/// [`check_package_inputs`]). Call it before any thread starts. Returns
/// the allocator setting in force. A model that cannot be checked here
/// (missing file, labels or device) is left for [`crate::Worker::load`] to
/// report, in its own order; so is the check's outcome.
pub fn prepare_process(config: &ModelConfig, inputs: &InputSpec) -> Option<String> {
    let allocator = configure_allocator(config);
    check_package_inputs(config, inputs);
    allocator
}

/// Sets the allocator before anything touches CUDA: libtorch reads
/// `PYTORCH_ALLOC_CONF` once, at its first device allocation. A value the
/// user exported wins. Returns the setting in force.
fn configure_allocator(config: &ModelConfig) -> Option<String> {
    for name in ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"] {
        if let Ok(value) = std::env::var(name) {
            return Some(value);
        }
    }
    if config.allocator.is_empty() {
        return None;
    }
    std::env::set_var("PYTORCH_ALLOC_CONF", &config.allocator);
    Some(config.allocator.clone())
}

/// AOTInductor compiles checks of every input's dtype, shape and device
/// into each package, run only when `AOTI_RUNTIME_CHECK_INPUTS` is set at
/// the first run of a loaded copy (each load extracts its own copy of the
/// compiled code, which reads the variable once, into a static). Without
/// them a wrong dtype is read as garbage; with them it is an error naming
/// the input. But they also refuse any dynamic size below 2 (one row, no
/// tags), which batches have: so only a checking copy, loaded and run here,
/// sees the variable, and the copy that runs the batches, loaded later by
/// the worker, does not. No loader API or package metadata turns the checks
/// on for one copy (torch 2.11), so the variable is set for this window
/// alone: before the process's first thread, on a thread of its own that
/// ends before the variable is put back (libgomp keeps an OpenMP team for
/// every thread that ran a parallel operator; see `Worker::load`). Only
/// libtorch's and CUDA's own helper threads, which read their settings
/// when they start, can exist when it is put back.
fn check_package_inputs(config: &ModelConfig, inputs: &InputSpec) {
    if !backend::is_package(config) {
        return;
    }
    let previous: Option<OsString> = std::env::var_os(CHECK_INPUTS_VAR);
    std::env::set_var(CHECK_INPUTS_VAR, "1");
    std::thread::scope(|scope| {
        scope
            .spawn(|| backend::check_package_inputs(config, inputs))
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    match previous {
        Some(value) => std::env::set_var(CHECK_INPUTS_VAR, value),
        None => std::env::remove_var(CHECK_INPUTS_VAR),
    }
}
