//! The TorchScript model on its device: loading, and one forward pass from a
//! [`Batch`] to label ids and scores.

use std::path::Path;

use tch::{CModule, Device, Kind, Tensor};

use super::alloc::DeviceEvent;
use super::backend::aoti::{self, AotiPackage, AotiSettings, ArchiveKind};
use super::{ModelConfig, WorkerError};
use crate::message::{Batch, BatchExtra, InputSpec, SegmentDtype};

/// The model, its device, and what it is fed.
pub struct Model {
    module: Module,
    pub device: Device,
    kind: Kind,
    segment_shape: Vec<i64>,
    segment_dtype: SegmentDtype,
    n_labels: usize,
}

enum Module {
    TorchScript(CModule),
    Aoti(AotiPackage),
}

/// One forward pass's answer for each row.
pub struct Predicted {
    pub label_ids: Vec<i32>,
    pub scores: Vec<f32>,
    /// Device milliseconds from the batch's first queued operation to its
    /// answers reaching the host (idle gaps inside the batch included);
    /// `None` on CPU.
    pub device_ms: Option<f64>,
}

/// A forward pass queued on the device, its answers on their way to the host.
pub struct Launched {
    scores: Tensor,
    ids: Tensor,
    start: Option<DeviceEvent>,
    done: Option<DeviceEvent>,
}

impl Launched {
    /// Blocks until the answers are on the host. Errors of kernels that
    /// failed on the device surface here.
    pub fn wait(self) -> Result<Predicted, tch::TchError> {
        let device_ms = match (&self.start, &self.done) {
            (Some(start), Some(done)) => {
                done.synchronize().map_err(tch::TchError::Torch)?;
                Some(start.elapsed_ms(done).map_err(tch::TchError::Torch)?)
            }
            _ => None,
        };
        let scores = Vec::<f32>::try_from(&self.scores)?;
        let ids = Vec::<i64>::try_from(&self.ids)?;
        Ok(Predicted {
            label_ids: ids.into_iter().map(|i| i as i32).collect(),
            scores,
            device_ms,
        })
    }
}

impl Model {
    pub fn load(
        config: &ModelConfig,
        device: Device,
        inputs: &InputSpec,
        n_labels: usize,
    ) -> Result<Self, WorkerError> {
        let path = config.path.as_path();
        if !path.is_file() {
            return Err(WorkerError::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        let (module, kind) = match aoti::archive_kind(path)? {
            ArchiveKind::TorchScript => {
                let kind = config.dtype.kind();
                (
                    Module::TorchScript(load_torchscript(path, device, kind)?),
                    kind,
                )
            }
            ArchiveKind::Aoti => {
                let settings = AotiSettings {
                    channels_last: config.channels_last,
                    dtype: Some(config.dtype),
                    jit_profiling: config.jit_profiling,
                };
                let package = AotiPackage::load(path, device, settings, inputs, n_labels)?;
                let kind = package.kind();
                (Module::Aoti(package), kind)
            }
        };
        Ok(Self {
            module,
            device,
            kind,
            segment_shape: inputs.segment_shape.iter().map(|&d| d as i64).collect(),
            segment_dtype: inputs.segment_dtype,
            n_labels,
        })
    }

    pub fn is_torchscript(&self) -> bool {
        matches!(self.module, Module::TorchScript(_))
    }

    /// Re-lays every 4-D parameter out channels-last (NHWC strides, NCHW
    /// shape), as `module.to(memory_format=torch.channels_last)` does in
    /// Python; convolutions then pick NHWC kernels and pass the layout on.
    pub fn to_channels_last(&self) -> Result<usize, tch::TchError> {
        let Module::TorchScript(module) = &self.module else {
            return Ok(0);
        };
        let mut converted = 0;
        for (_, mut parameter) in module.named_parameters()? {
            if parameter.dim() == 4 {
                // Explicit strides, not permute-contiguous-permute: for a
                // one-channel weight (the stem) `contiguous()` is a no-op
                // that keeps NCHW strides, and the whole network then runs
                // NCHW (1.3x slower on the H200).
                let size = parameter.size();
                let mut nhwc = Tensor::f_empty_strided(
                    &size,
                    channels_last_strides(&size),
                    (parameter.kind(), parameter.device()),
                )?;
                nhwc.f_copy_(&parameter)?;
                // The handle shares the module's tensor, so this re-lays the
                // module's own weight.
                parameter.f_set_data(&nhwc)?;
                converted += 1;
            }
        }
        // Read the weights back: a silent no-op would be worse than an error.
        let laid_out = module
            .named_parameters()?
            .iter()
            .filter(|(_, p)| p.dim() == 4 && is_channels_last(p))
            .count();
        if laid_out != converted {
            return Err(tch::TchError::Kind(format!(
                "{laid_out} of {converted} 4-D weights read back channels-last"
            )));
        }
        tracing::debug!(weights = converted, "weights laid out channels-last");
        Ok(converted)
    }

    /// Queues the model on `batch` and the copy of its answers to the host,
    /// without waiting for the device: the caller prepares the next batch
    /// while this one runs, and calls [`Launched::wait`] for the answers.
    /// On CPU everything has run when this returns. The caller holds the
    /// no-grad guard.
    pub fn launch(&self, batch: &Batch) -> Result<Launched, tch::TchError> {
        let start = self.record_event()?;
        let inputs = self.inputs(batch)?;
        let logits = match &self.module {
            Module::TorchScript(module) => module.forward_ts(&inputs)?,
            Module::Aoti(package) => package.forward(&inputs)?,
        };
        let n_rows = batch.rows.len() as i64;
        let size = logits.size();
        if size != [n_rows, self.n_labels as i64] {
            return Err(tch::TchError::Shape(format!(
                "the model returned logits of shape {size:?}, expected [{n_rows}, {}] ({} labels)",
                self.n_labels, self.n_labels
            )));
        }
        let probs = logits.f_softmax(-1, Kind::Float)?;
        let (scores, ids) = probs.f_max_dim(-1, false)?;
        // Non-blocking copies land in pinned host memory; `done` marks when.
        let non_blocking = self.device.is_cuda();
        let scores = scores.f_to_device_(Device::Cpu, Kind::Float, non_blocking, false)?;
        let ids = ids.f_to_device_(Device::Cpu, Kind::Int64, non_blocking, false)?;
        let done = self.record_event()?;
        Ok(Launched {
            scores,
            ids,
            start,
            done,
        })
    }

    fn record_event(&self) -> Result<Option<DeviceEvent>, tch::TchError> {
        match self.device {
            Device::Cuda(index) => DeviceEvent::record(index).map_err(tch::TchError::Torch),
            _ => Ok(None),
        }
    }

    /// `forward(segments, segment_counts, *extras)`, every tensor on the device.
    fn inputs(&self, batch: &Batch) -> Result<Vec<Tensor>, tch::TchError> {
        let mut shape = vec![batch.padded_segments as i64];
        shape.extend_from_slice(&self.segment_shape);
        let segments = Tensor::f_from_data_size(&batch.segments, &shape, self.segment_kind())?;
        let mut inputs = vec![
            self.upload(segments)?.f_to_kind(self.kind)?,
            self.upload(Tensor::f_from_slice(&batch.segment_counts)?)?,
        ];
        for extra in &batch.extras {
            match extra {
                BatchExtra::Ragged { values, counts } => {
                    inputs.push(self.upload(Tensor::f_from_slice(values)?)?);
                    inputs.push(self.upload(Tensor::f_from_slice(counts)?)?);
                }
                BatchExtra::Vectors { values, width } => {
                    let t = Tensor::f_from_slice(values)?
                        .f_view([batch.rows.len() as i64, *width as i64])?;
                    inputs.push(self.upload(t)?.f_to_kind(self.kind)?);
                }
                BatchExtra::Floats(values) => inputs.push(
                    self.upload(Tensor::f_from_slice(values)?)?
                        .f_to_kind(self.kind)?,
                ),
                BatchExtra::Ints(values) => {
                    inputs.push(self.upload(Tensor::f_from_slice(values)?)?)
                }
            }
        }
        Ok(inputs)
    }

    /// Moves a host tensor to the device without blocking the host. A
    /// blocking copy would wait for the batch still running on the device,
    /// which is the wait this pipeline exists to avoid; staging through
    /// pinned memory (libtorch caches those blocks) keeps the copy
    /// asynchronous and safe.
    fn upload(&self, t: Tensor) -> Result<Tensor, tch::TchError> {
        match self.device {
            Device::Cpu => Ok(t),
            device => super::alloc::pin_memory(&t)
                .map_err(tch::TchError::Torch)?
                .f_to_device_(device, t.kind(), true, false),
        }
    }

    fn segment_kind(&self) -> Kind {
        match self.segment_dtype {
            SegmentDtype::U8 => Kind::Uint8,
            SegmentDtype::F16 => Kind::Half,
            SegmentDtype::F32 => Kind::Float,
        }
    }
}

fn load_torchscript(path: &Path, device: Device, kind: Kind) -> Result<CModule, WorkerError> {
    let mut module = CModule::load_on_device(path, device).map_err(|e| WorkerError::ModelLoad {
        path: path.to_path_buf(),
        message: first_line(&e.to_string()),
    })?;
    module.to(device, kind, false);
    module.f_set_eval().map_err(|e| WorkerError::ModelLoad {
        path: path.to_path_buf(),
        message: first_line(&e.to_string()),
    })?;
    Ok(module)
}

/// The strides of an NCHW-shaped tensor laid out NHWC (channels fastest),
/// as PyTorch's `channels_last` memory format writes them.
fn channels_last_strides(size: &[i64]) -> [i64; 4] {
    let (c, h, w) = (size[1], size[2], size[3]);
    [h * w * c, 1, w * c, c]
}

/// Exactly the strides `channels_last` gives. (PyTorch treats a one-channel
/// tensor with NCHW strides as NCHW, so no exemption for one channel.)
fn is_channels_last(t: &Tensor) -> bool {
    let size = t.size();
    size.len() == 4 && t.stride() == channels_last_strides(&size)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or(text).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_strides_match_pytorch_for_a_one_channel_weight() {
        // torch.empty(512, 1, 2, 2).to(memory_format=torch.channels_last).stride()
        assert_eq!(channels_last_strides(&[512, 1, 2, 2]), [4, 1, 2, 1]);
        assert_eq!(
            channels_last_strides(&[256, 512, 3, 3]),
            [4608, 1, 1536, 512]
        );
    }

    #[test]
    fn a_contiguous_one_channel_weight_is_not_channels_last() {
        // The stem weight that stayed NCHW and slowed the whole network.
        let nchw = Tensor::zeros([512, 1, 2, 2], (Kind::Float, Device::Cpu));
        assert!(!is_channels_last(&nchw));
        let relaid = nchw
            .permute([0, 2, 3, 1])
            .contiguous()
            .permute([0, 3, 1, 2]);
        assert!(
            !is_channels_last(&relaid),
            "permute-contiguous-permute is a no-op for one channel"
        );
        let nhwc = Tensor::empty_strided(
            [512, 1, 2, 2],
            channels_last_strides(&[512, 1, 2, 2]),
            (Kind::Float, Device::Cpu),
        );
        assert!(is_channels_last(&nhwc));
    }
}
