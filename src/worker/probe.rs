//! One tiny forward pass at start-up: a model whose outputs do not match the
//! labels file, or whose `forward` does not take the pipeline's inputs,
//! fails in seconds instead of at the first batch of the night.

use super::calibrate::synthetic_batch;
use super::Worker;

impl Worker {
    /// Runs the model on one row of one synthetic segment and checks that it
    /// answers one score per label; the error is TorchScript's first line.
    pub(super) fn probe(&self) -> Result<(), String> {
        let _no_grad = tch::no_grad_guard();
        let batch = synthetic_batch(&self.inputs, 1);
        self.model
            .launch(&batch)
            .and_then(|launched| launched.wait())
            .map(|_| ())
            .map_err(|e| first_meaningful_line(&e.to_string()))
    }
}

/// TorchScript errors span many lines; the first says what went wrong.
fn first_meaningful_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(text)
        .to_string()
}
