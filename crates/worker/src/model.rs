//! The model on its device and one forward pass from a [`Batch`] to label
//! ids and scores: input tensors built and uploaded (pinned, non-blocking),
//! the backend run, softmax and argmax, the answers' copy to the host
//! marked by a device event.

use tch::{Device, Kind, Tensor};

use super::alloc::DeviceEvent;
use super::backend::{load_backend, ModelBackend};
use super::{ModelConfig, TorchError, WorkerError};
use segpredict_core::message::{Batch, BatchExtra, InputSpec, SegmentDtype, TopK};

/// The model, its device, and what it is fed.
pub struct Model {
    backend: Box<dyn ModelBackend>,
    pub device: Device,
    kind: Kind,
    segment_shape: Vec<i64>,
    segment_dtype: SegmentDtype,
    n_labels: usize,
    /// `[writers] top_k`: the classes each row's answer names.
    top_k: Option<usize>,
}

/// One forward pass's answer for each row.
pub struct Predicted {
    pub label_ids: Vec<i32>,
    pub scores: Vec<f32>,
    /// The `top_k` most probable classes per row, when asked for.
    pub top: Option<TopK>,
    /// Device milliseconds from the batch's first queued operation to its
    /// answers reaching the host (idle gaps inside the batch included);
    /// `None` on CPU.
    pub device_ms: Option<f64>,
}

/// A forward pass queued on the device, its answers on their way to the host:
/// per row its top-1, or its `top_k` most probable classes (row-major).
pub struct Launched {
    scores: Tensor,
    ids: Tensor,
    top_k: Option<usize>,
    start: Option<DeviceEvent>,
    done: Option<DeviceEvent>,
}

impl Launched {
    /// Blocks until the answers are on the host. Errors of kernels that
    /// failed on the device surface here.
    pub fn wait(self) -> Result<Predicted, TorchError> {
        let device_ms = match (&self.start, &self.done) {
            (Some(start), Some(done)) => {
                done.synchronize()?;
                Some(start.elapsed_ms(done)?)
            }
            _ => None,
        };
        let scores = Vec::<f32>::try_from(&self.scores.f_reshape([-1])?)?;
        let ids = Vec::<i64>::try_from(&self.ids.f_reshape([-1])?)?;
        let ids: Vec<i32> = ids.into_iter().map(|i| i as i32).collect();
        Ok(match self.top_k {
            None => Predicted {
                label_ids: ids,
                scores,
                top: None,
                device_ms,
            },
            // `[writers] top_k` is at least 1 (checked with the settings).
            Some(k) => Predicted {
                label_ids: ids.iter().step_by(k.max(1)).copied().collect(),
                scores: scores.iter().step_by(k.max(1)).copied().collect(),
                top: Some(TopK {
                    k,
                    label_ids: ids,
                    scores,
                }),
                device_ms,
            },
        })
    }
}

impl Model {
    /// `top_k` (at most `n_labels`) asks for each row's most probable
    /// classes besides its top-1.
    pub fn load(
        config: &ModelConfig,
        device: Device,
        inputs: &InputSpec,
        n_labels: usize,
        top_k: Option<usize>,
    ) -> Result<Self, WorkerError> {
        let backend = load_backend(config, device, config.dtype.kind(), inputs)?;
        let kind = backend.input_kind().unwrap_or(config.dtype.kind());
        Ok(Self {
            backend,
            device,
            kind,
            segment_shape: inputs.segment_shape.iter().map(|&d| d as i64).collect(),
            segment_dtype: inputs.segment_dtype,
            n_labels,
            top_k,
        })
    }

    /// How the model file was exported (never `Auto`).
    pub fn format(&self) -> super::ModelFormat {
        self.backend.format()
    }

    /// The most segments a batch may hold, when the model file bounds it.
    pub fn max_segments(&self) -> Option<usize> {
        self.backend.max_segments()
    }

    /// See [`ModelBackend::set_row_cap`].
    pub fn set_row_cap(&self, max_rows: usize) {
        self.backend.set_row_cap(max_rows)
    }

    /// See [`ModelBackend::take_paths`].
    pub fn take_paths(&self) -> Vec<segpredict_core::message::ModelPath> {
        self.backend.take_paths()
    }

    /// See [`ModelBackend::check_size_classes`].
    pub fn check_size_classes(
        &self,
        classes: Option<&[usize]>,
    ) -> Result<(), super::backend::AotiError> {
        self.backend.check_size_classes(classes)
    }

    /// Whether the backend can re-lay its weights channels-last.
    pub fn supports_channels_last(&self) -> bool {
        self.backend.supports_channels_last()
    }

    /// Re-lays the weights channels-last (see the backend).
    pub fn convert_to_channels_last(&mut self) -> Result<usize, TorchError> {
        Ok(self.backend.convert_to_channels_last()?)
    }

    /// Queues the model on `batch` and the copy of its answers to the host,
    /// without waiting for the device: the caller prepares the next batch
    /// while this one runs, and calls [`Launched::wait`] for the answers.
    /// On CPU everything has run when this returns. The caller holds the
    /// no-grad guard.
    pub fn launch(&self, batch: &Batch) -> Result<Launched, TorchError> {
        let start = self.record_event()?;
        let inputs = self.inputs(batch)?;
        let logits = self.backend.forward(&inputs)?;
        let n_rows = batch.rows.len() as i64;
        let size = logits.size();
        if size != [n_rows, self.n_labels as i64] {
            return Err(TorchError::Failed(tch::TchError::Shape(format!(
                "the model returned logits of shape {size:?}, expected [{n_rows}, {}] ({} labels)",
                self.n_labels, self.n_labels
            ))));
        }
        let probs = logits.f_softmax(-1, Kind::Float)?;
        let (scores, ids) = match self.top_k {
            // Sorted, most probable first: [rows, k].
            Some(k) => probs.f_topk(k as i64, -1, true, true)?,
            None => probs.f_max_dim(-1, false)?,
        };
        // Non-blocking copies land in pinned host memory; `done` marks when.
        let non_blocking = self.device.is_cuda();
        let scores = scores.f_to_device_(Device::Cpu, Kind::Float, non_blocking, false)?;
        let ids = ids.f_to_device_(Device::Cpu, Kind::Int64, non_blocking, false)?;
        let done = self.record_event()?;
        Ok(Launched {
            scores,
            ids,
            top_k: self.top_k,
            start,
            done,
        })
    }

    fn record_event(&self) -> Result<Option<DeviceEvent>, TorchError> {
        match self.device {
            Device::Cuda(index) => Ok(DeviceEvent::record(index)?),
            _ => Ok(None),
        }
    }

    /// The backend alone on inputs already on the device; its output is
    /// dropped (`segpredict speed`).
    pub fn forward_alone(&self, inputs: &[Tensor]) -> Result<(), TorchError> {
        drop(self.backend.forward(inputs)?);
        Ok(())
    }

    /// `forward(segments, segment_counts, *extras)`, every tensor on the device.
    pub fn inputs(&self, batch: &Batch) -> Result<Vec<Tensor>, TorchError> {
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
    fn upload(&self, t: Tensor) -> Result<Tensor, TorchError> {
        match self.device {
            Device::Cpu => Ok(t),
            device => {
                let pinned = super::alloc::pin_memory(&t)?;
                Ok(pinned.f_to_device_(device, t.kind(), true, false)?)
            }
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
