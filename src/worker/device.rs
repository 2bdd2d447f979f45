//! The device and the libtorch settings that must be made before the model
//! loads: the caching allocator's configuration and cuDNN's benchmark mode.

use tch::Device;

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

/// Sets the allocator before anything touches CUDA: libtorch reads
/// `PYTORCH_ALLOC_CONF` once, at its first device allocation. A value the
/// user exported wins. Returns the setting in force.
///
/// Call it from `main` before any thread exists, so no one reads the
/// environment concurrently.
pub fn configure_allocator(config: &ModelConfig) -> Option<String> {
    for name in ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"] {
        if let Ok(value) = std::env::var(name) {
            return Some(value);
        }
    }
    if config.allocator.is_empty() {
        return None;
    }
    std::env::set_var("PYTORCH_ALLOC_CONF", &config.allocator);
    Some(config.allocator.clone())
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
