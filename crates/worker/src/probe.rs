//! One tiny forward pass at start-up: a model whose outputs do not match the
//! labels file, or whose `forward` does not take the pipeline's inputs,
//! fails in seconds instead of at the first batch of the night.

use super::calibrate::synthetic_batch;
use super::{TorchError, Worker};

impl Worker {
    /// Runs the model on one row of one synthetic segment; the model checks
    /// that it answers one score per label.
    pub(super) fn probe(&self) -> Result<(), TorchError> {
        let _no_grad = tch::no_grad_guard();
        let batch = synthetic_batch(&self.inputs, 1);
        self.model.launch(&batch)?.wait().map(|_| ())
    }
}
