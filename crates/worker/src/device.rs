//! The device and the libtorch settings that must be made before the model
//! loads: cuDNN's benchmark mode; and CUDA's libraries initialised while it
//! loads. (The allocator's configuration is process state: `process.rs`.)

use tch::{Device, Kind, Tensor};

use super::{ModelConfig, WorkerError};

/// Parses the device setting; `auto` is CUDA device 0 when CUDA is present.
pub fn choose_device(setting: &str) -> Result<Device, WorkerError> {
    let cuda = |index: usize| {
        if tch::Cuda::is_available() && index < tch::Cuda::device_count() as usize {
            Ok(Device::Cuda(index))
        } else {
            Err(WorkerError::NoCuda(setting.to_string()))
        }
    };
    match setting {
        "auto" if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
        "auto" | "cpu" => Ok(Device::Cpu),
        "cuda" => cuda(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => cuda(index),
            _ => Err(WorkerError::BadDevice(other.to_string())),
        },
    }
}

/// CUDA devices visible to this process (0 without CUDA): `--local-shards
/// all` starts one shard per device.
pub fn cuda_device_count() -> usize {
    match tch::Cuda::is_available() {
        true => usize::try_from(tch::Cuda::device_count()).unwrap_or(0),
        false => 0,
    }
}

/// A device as users write it: `cpu`, `cuda:0`.
pub fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(index) => format!("cuda:{index}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
    }
}

/// cuDNN benchmark mode re-tunes for every new input shape, so it is allowed
/// only when padding bounds the shapes (`padded_shapes`); it is off unless
/// asked for, since on the H200 it made the seed's convs slower end to end
/// (0.87x) and reserved twice the memory (benches/gpu/RESULTS.md). Returns
/// whether it is on.
pub fn set_cudnn_benchmark(
    config: &ModelConfig,
    padded_shapes: bool,
    device: Device,
) -> Result<bool, WorkerError> {
    let wanted = config.cudnn_benchmark;
    if wanted && !padded_shapes {
        return Err(WorkerError::CudnnNeedsPadding);
    }
    let on = wanted && device.is_cuda();
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(on);
    }
    Ok(on)
}

/// Initialises CUDA's libraries for `device` while the caller loads the
/// model: a tiny convolution (cuDNN: its libraries loaded, a handle made)
/// and a tiny matrix product (cuBLAS) in the weights' `kind`, channels-last.
/// A model's first forward pass otherwise pays both after the weights are
/// on the device. The handles go back to libtorch's per-device pools when
/// this thread ends, for the threads that run the model. A failure here is
/// only logged: the model's own probe reports what is wrong with the device.
pub fn prime_device(device: Device, kind: Kind) {
    let started = std::time::Instant::now();
    let _no_grad = tch::no_grad_guard();
    let primed = (|| -> Result<(), tch::TchError> {
        let options = (kind, device);
        // NHWC storage seen as NCHW: channels-last strides, as segpredict
        // runs TorchScript weights unless `channels_last = false`.
        let input = Tensor::f_zeros([2, 8, 8, 8], options)?.f_permute([0, 3, 1, 2])?;
        let weight = Tensor::f_zeros([8, 3, 3, 8], options)?.f_permute([0, 3, 1, 2])?;
        let conv = input.f_conv2d(&weight, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)?;
        let flat = conv.f_flatten(1, -1)?;
        let product = flat.f_matmul(&Tensor::f_zeros([flat.size()[1], 8], options)?)?;
        product.f_sum(Kind::Float)?.f_double_value(&[])?;
        Ok(())
    })();
    match primed {
        Ok(()) => tracing::debug!(
            seconds = started.elapsed().as_secs_f64(),
            "primed cuDNN and cuBLAS"
        ),
        Err(error) => tracing::debug!(%error, "could not prime cuDNN and cuBLAS"),
    }
}
