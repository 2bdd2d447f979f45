//! The model behind the worker: one trait, one implementation per model
//! format. The worker builds the input tensors, uploads them, and turns the
//! logits into labels and scores; a backend only runs the model.

mod torchscript;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::{ModelConfig, TorchError, WorkerError};

pub use torchscript::TorchScript;

/// `[model] format`: how the model file was exported.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModelFormat {
    /// Decided from the file; today every file is taken as TorchScript.
    #[default]
    Auto,
    /// `torch.jit.script(model).save(path)`.
    TorchScript,
    /// An AOTInductor package (`torch._inductor.aoti_compile_and_package`).
    Aoti,
}

/// A loaded model on its device.
pub trait ModelBackend: Send {
    /// Runs the model. `inputs` are on the model's device, in its calling
    /// order `(segments, segment_counts, *extras)`; returns logits
    /// `[rows, n_labels]`. May return before the device has finished (the
    /// caller waits on an event).
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor, tch::TchError>;

    /// The format this backend runs.
    fn format(&self) -> ModelFormat;

    /// Whether [`ModelBackend::convert_to_channels_last`] can re-lay the weights.
    fn supports_channels_last(&self) -> bool {
        false
    }

    /// Re-lays every 4-D weight channels-last; returns how many. A format
    /// whose layout is fixed when it is compiled cannot.
    fn convert_to_channels_last(&mut self) -> Result<usize, tch::TchError> {
        Err(tch::TchError::Kind(format!(
            "a {:?} model's weight layout cannot be changed after export",
            self.format()
        )))
    }
}

/// Loads the model file of `config` on `device` with weights of `kind`.
pub fn load_backend(
    config: &ModelConfig,
    device: Device,
    kind: Kind,
) -> Result<Box<dyn ModelBackend>, WorkerError> {
    if !config.path.is_file() {
        return Err(WorkerError::ModelMissing {
            path: config.path.clone(),
        });
    }
    let load_error = |source: TorchError| WorkerError::ModelLoad {
        path: config.path.clone(),
        source,
    };
    match config.format {
        ModelFormat::Auto | ModelFormat::TorchScript => {
            let model = TorchScript::load(&config.path, device, kind, config.jit_profiling)
                .map_err(load_error)?;
            Ok(Box::new(model))
        }
        ModelFormat::Aoti => Err(WorkerError::FormatUnsupported {
            format: config.format,
        }),
    }
}
