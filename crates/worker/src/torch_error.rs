//! libtorch's errors, classified once, where they come back to Rust: an
//! out-of-memory is the one the worker recovers from.

use super::alloc::ShimError;
use segpredict_core::exit::{Classify, Failure};

/// A libtorch (or shim) failure while loading or running the model.
///
/// libtorch's message carries a C++ backtrace after its first line; the
/// error is kept whole (for `Debug`) and shows its first line, so the
/// chain printed for a person stays one line.
#[derive(Debug, thiserror::Error)]
pub enum TorchError {
    /// The device ran out of memory: recoverable by running less at once.
    #[error("{}", first_line(.0))]
    OutOfMemory(tch::TchError),
    /// Any other libtorch error; shown as its first line and its cause.
    #[error("{}", first_and_last_lines(.0))]
    Failed(tch::TchError),
    /// The C++ shim's own call failed.
    #[error(transparent)]
    Shim(#[from] ShimError),
}

impl From<tch::TchError> for TorchError {
    /// The one place an out-of-memory is recognised: libtorch raises
    /// `c10::OutOfMemoryError`, which reaches Rust only as its message.
    fn from(error: tch::TchError) -> Self {
        if error.to_string().contains("out of memory") {
            TorchError::OutOfMemory(error)
        } else {
            TorchError::Failed(error)
        }
    }
}

impl TorchError {
    /// Whether the device ran out of memory: the worker then splits the
    /// batch and lowers the budget rather than failing.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, TorchError::OutOfMemory(_))
    }

    /// A failure the rows of the batch may have caused (a value the model
    /// cannot take), rather than the device or the model's outputs against
    /// the labels: the worker looks for the row(s) by splitting the batch.
    pub fn may_be_the_rows(&self) -> bool {
        matches!(self, TorchError::Failed(e) if !matches!(e, tch::TchError::Shape(_)))
            && !self.is_device_failure()
    }

    /// The device failed (out of memory, a CUDA error, the shim): a retry,
    /// on this device or another, may succeed. A CUDA error poisons the
    /// context, so the whole run is retried.
    pub fn is_device_failure(&self) -> bool {
        match self {
            TorchError::OutOfMemory(_) | TorchError::Shim(_) => true,
            TorchError::Failed(e) => {
                let text = e.to_string();
                [
                    "CUDA error",
                    "cuDNN error",
                    "CUBLAS_STATUS",
                    "device-side assert",
                ]
                .iter()
                .any(|device| text.contains(device))
            }
        }
    }

    /// The cause as libtorch states it last (TorchScript's first line is
    /// only "The following operation failed in the TorchScript
    /// interpreter"; the last says what, e.g. "index out of range in self").
    pub fn cause(&self) -> String {
        match self {
            TorchError::OutOfMemory(e) | TorchError::Failed(e) => last_line(e),
            TorchError::Shim(e) => e.to_string(),
        }
    }
}

/// The last non-empty line of libtorch's message, which names the cause.
fn last_line(error: &tch::TchError) -> String {
    let text = error.to_string();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(&text)
        .trim()
        .to_string()
}

/// The header and the cause, in one line.
fn first_and_last_lines(error: &tch::TchError) -> String {
    let (first, last) = (first_line(error), last_line(error));
    match first == last {
        true => first,
        false => format!("{first} ... {last}"),
    }
}

/// The first non-empty line of libtorch's message.
fn first_line(error: &tch::TchError) -> String {
    let text = error.to_string();
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(&text)
        .trim()
        .to_string()
}

impl Classify for TorchError {
    /// A device that failed may not fail again; the model's own error will.
    fn failure(&self) -> Failure {
        Failure::permanent_if(!self.is_device_failure())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_out_of_memory_is_classified_and_shown_in_one_line() {
        let message = "CUDA out of memory. Tried to allocate 2.00 GiB\nException raised from malloc at ...\nframe #0: c10::Error";
        let error = TorchError::from(tch::TchError::Torch(message.into()));
        assert!(error.is_out_of_memory());
        assert_eq!(
            error.to_string(),
            "Internal torch error: CUDA out of memory. Tried to allocate 2.00 GiB"
        );
    }

    #[test]
    fn other_errors_are_not_out_of_memory() {
        let error = TorchError::from(tch::TchError::Shape("expected [4, 10]".into()));
        assert!(!error.is_out_of_memory());
        assert!(!TorchError::from(ShimError::NoAccelerator).is_out_of_memory());
    }
}
