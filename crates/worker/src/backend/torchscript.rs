//! TorchScript models through libtorch's `CModule`.

use std::path::Path;

use tch::{CModule, Device, Kind, Tensor};

use super::{ModelBackend, ModelFormat};
use crate::TorchError;

/// A TorchScript module on its device, in eval mode.
pub struct TorchScript {
    module: CModule,
}

impl TorchScript {
    /// Loads `path` onto `device` with weights of `kind`. `jit_profiling`
    /// chooses TorchScript's profiling executor (libtorch's default) over
    /// the simple one; it is process-wide, so it is set here, before the
    /// module's first run.
    pub fn load(
        path: &Path,
        device: Device,
        kind: Kind,
        jit_profiling: bool,
    ) -> Result<Self, TorchError> {
        tch::jit::f_set_profiling_mode(jit_profiling)?;
        let mut module = CModule::load_on_device(path, device)?;
        module.to(device, kind, false);
        module.f_set_eval()?;
        Ok(Self { module })
    }
}

impl ModelBackend for TorchScript {
    fn forward(&self, inputs: &[Tensor]) -> Result<Tensor, tch::TchError> {
        self.module.forward_ts(inputs)
    }

    fn format(&self) -> ModelFormat {
        ModelFormat::TorchScript
    }

    fn supports_channels_last(&self) -> bool {
        true
    }

    /// Re-lays every 4-D parameter out channels-last (NHWC strides, NCHW
    /// shape), as `module.to(memory_format=torch.channels_last)` does in
    /// Python; convolutions then pick NHWC kernels and pass the layout on.
    fn convert_to_channels_last(&mut self) -> Result<usize, tch::TchError> {
        let mut converted = 0;
        for (_, mut parameter) in self.module.named_parameters()? {
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
