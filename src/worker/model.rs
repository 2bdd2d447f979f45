//! The TorchScript model on its device: loading, and one forward pass from a
//! [`Batch`] to label ids and scores.

use std::path::Path;

use tch::{CModule, Device, Kind, Tensor};

use super::{ModelDtype, WorkerError};
use crate::message::{Batch, BatchExtra, InputSpec, SegmentDtype};

/// The model, its device, and what it is fed.
pub struct Model {
    module: CModule,
    pub device: Device,
    kind: Kind,
    segment_shape: Vec<i64>,
    segment_dtype: SegmentDtype,
    n_labels: usize,
}

/// One forward pass's answer for each row.
pub struct Predicted {
    pub label_ids: Vec<i32>,
    pub scores: Vec<f32>,
}

impl Model {
    pub fn load(
        path: &Path,
        device: Device,
        dtype: ModelDtype,
        inputs: &InputSpec,
        n_labels: usize,
    ) -> Result<Self, WorkerError> {
        if !path.is_file() {
            return Err(WorkerError::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        let mut module =
            CModule::load_on_device(path, device).map_err(|e| WorkerError::ModelLoad {
                path: path.to_path_buf(),
                message: first_line(&e.to_string()),
            })?;
        let kind = dtype.kind();
        module.to(device, kind, false);
        module.f_set_eval().map_err(|e| WorkerError::ModelLoad {
            path: path.to_path_buf(),
            message: first_line(&e.to_string()),
        })?;
        Ok(Self {
            module,
            device,
            kind,
            segment_shape: inputs.segment_shape.iter().map(|&d| d as i64).collect(),
            segment_dtype: inputs.segment_dtype,
            n_labels,
        })
    }

    /// Re-lays every 4-D parameter out channels-last (NHWC strides, NCHW
    /// shape), as `module.to(memory_format=torch.channels_last)` does in
    /// Python; convolutions then pick NHWC kernels and pass the layout on.
    pub fn to_channels_last(&self) -> Result<usize, tch::TchError> {
        let mut converted = 0;
        for (_, mut parameter) in self.module.named_parameters()? {
            if parameter.dim() == 4 {
                let nhwc = parameter
                    .f_permute([0, 2, 3, 1])?
                    .f_contiguous()?
                    .f_permute([0, 3, 1, 2])?;
                // The handle shares the module's tensor, so this re-lays the
                // module's own weight.
                parameter.f_set_data(&nhwc)?;
                converted += 1;
            }
        }
        // Read the weights back: a silent no-op would be worse than an error.
        let laid_out = self
            .module
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

    /// Runs the model on `batch`; the caller holds the no-grad guard.
    pub fn predict(&self, batch: &Batch) -> Result<Predicted, tch::TchError> {
        let inputs = self.inputs(batch)?;
        let logits = self.module.forward_ts(&inputs)?;
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
        let scores: Vec<f32> = Vec::try_from(scores.f_to_device(Device::Cpu)?)?;
        let ids: Vec<i64> = Vec::try_from(ids.f_to_device(Device::Cpu)?)?;
        Ok(Predicted {
            label_ids: ids.into_iter().map(|i| i as i32).collect(),
            scores,
        })
    }

    /// `forward(segments, segment_counts, *extras)`, every tensor on the device.
    fn inputs(&self, batch: &Batch) -> Result<Vec<Tensor>, tch::TchError> {
        let mut shape = vec![batch.padded_segments as i64];
        shape.extend_from_slice(&self.segment_shape);
        let segments = Tensor::f_from_data_size(&batch.segments, &shape, self.segment_kind())?
            .f_to_device(self.device)?
            .f_to_kind(self.kind)?;
        let mut inputs = vec![
            segments,
            self.on_device(Tensor::f_from_slice(&batch.segment_counts)?)?,
        ];
        for extra in &batch.extras {
            match extra {
                BatchExtra::Ragged { values, counts } => {
                    inputs.push(self.on_device(Tensor::f_from_slice(values)?)?);
                    inputs.push(self.on_device(Tensor::f_from_slice(counts)?)?);
                }
                BatchExtra::Vectors { values, width } => {
                    let t = Tensor::f_from_slice(values)?
                        .f_view([batch.rows.len() as i64, *width as i64])?;
                    inputs.push(self.on_device(t)?.f_to_kind(self.kind)?);
                }
                BatchExtra::Floats(values) => inputs.push(
                    self.on_device(Tensor::f_from_slice(values)?)?
                        .f_to_kind(self.kind)?,
                ),
                BatchExtra::Ints(values) => {
                    inputs.push(self.on_device(Tensor::f_from_slice(values)?)?)
                }
            }
        }
        Ok(inputs)
    }

    fn on_device(&self, t: Tensor) -> Result<Tensor, tch::TchError> {
        t.f_to_device(self.device)
    }

    fn segment_kind(&self) -> Kind {
        match self.segment_dtype {
            SegmentDtype::U8 => Kind::Uint8,
            SegmentDtype::F16 => Kind::Half,
            SegmentDtype::F32 => Kind::Float,
        }
    }
}

/// NHWC strides: channels vary fastest. (A one-channel weight is both
/// layouts at once and counts as channels-last.)
fn is_channels_last(t: &Tensor) -> bool {
    let (size, stride) = (t.size(), t.stride());
    if size.len() != 4 {
        return false;
    }
    let (c, h, w) = (size[1], size[2], size[3]);
    c == 1 || (stride[1] == 1 && stride[3] == c && stride[2] == c * w && stride[0] == c * h * w)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or(text).trim().to_string()
}
