//! libtorch's errors, classified once, where they come back to Rust: an
//! out-of-memory is the one the worker recovers from.

use super::alloc::ShimError;

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
    #[error("{}", first_line(.0))]
    Failed(tch::TchError),
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
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, TorchError::OutOfMemory(_))
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
