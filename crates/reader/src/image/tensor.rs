//! Interleaved pixels to the model's `[channels, height, width]` bytes in
//! the segments' dtype: u8 as the pixels are; f16/f32 as
//! `(pixel * scale - mean[c]) / std[c]`, little-endian like every segment.

use segpredict_core::message::SegmentDtype;

use super::pixels::Pixels;
use super::{ChannelOrder, ImageInput, Target};

/// Per-channel `pixel * mul + add`, folded from scale, mean and std once.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalize {
    mul: Vec<f32>,
    add: Vec<f32>,
}

impl Normalize {
    pub fn new(input: &ImageInput, channels: usize) -> Self {
        let scale = input.scale.unwrap_or(1.0);
        let per_channel = |values: &Option<Vec<f32>>, default: f32, c: usize| match values {
            Some(v) if v.len() == 1 => v[0],
            Some(v) => v.get(c).copied().unwrap_or(default),
            None => default,
        };
        let (mut mul, mut add) = (Vec::new(), Vec::new());
        for c in 0..channels {
            let mean = per_channel(&input.mean, 0.0, c);
            let std = per_channel(&input.std, 1.0, c);
            mul.push(scale / std);
            add.push(-mean / std);
        }
        Self { mul, add }
    }
}

/// The tensor channel `c` takes its values from this pixel channel.
fn source_channel(c: usize, channels: usize, order: ChannelOrder) -> usize {
    match (order, channels) {
        (ChannelOrder::Bgr, 3 | 4) if c < 3 => 2 - c,
        _ => c,
    }
}

/// Appends `pixels` (already at the target size) as the target's tensor.
pub fn append(
    pixels: &Pixels,
    target: &Target,
    order: ChannelOrder,
    normalize: &Normalize,
    out: &mut Vec<u8>,
) {
    let channels = pixels.channels;
    out.reserve(pixels.data.len() * target.dtype.size_bytes());
    for c in 0..channels {
        let plane = pixels
            .data
            .iter()
            .skip(source_channel(c, channels, order))
            .step_by(channels);
        let (mul, add) = (normalize.mul[c], normalize.add[c]);
        match target.dtype {
            SegmentDtype::U8 => out.extend(plane),
            SegmentDtype::F32 => {
                for &p in plane {
                    out.extend_from_slice(&(f32::from(p) * mul + add).to_le_bytes());
                }
            }
            SegmentDtype::F16 => {
                for &p in plane {
                    let value = half::f16::from_f32(f32::from(p) * mul + add);
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_come_out_in_the_asked_order_normalized() {
        // Two RGB pixels.
        let pixels = Pixels {
            width: 2,
            height: 1,
            channels: 3,
            data: vec![10, 20, 30, 40, 50, 60],
        };
        let target = Target {
            channels: 3,
            height: 1,
            width: 2,
            dtype: SegmentDtype::U8,
        };
        let plain = Normalize::new(&toml::from_str("").unwrap(), 3);
        let mut out = Vec::new();
        append(&pixels, &target, ChannelOrder::Bgr, &plain, &mut out);
        assert_eq!(out, [30, 60, 20, 50, 10, 40]);

        let input: ImageInput =
            toml::from_str("scale = 0.5\nmean = [5.0, 0.0, 0.0]\nstd = [2.0]").unwrap();
        let f32_target = Target {
            dtype: SegmentDtype::F32,
            ..target
        };
        let mut out = Vec::new();
        append(
            &pixels,
            &f32_target,
            ChannelOrder::Rgb,
            &Normalize::new(&input, 3),
            &mut out,
        );
        let values: Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        // R: (10 * 0.5 - 5) / 2 = 0, (40 * 0.5 - 5) / 2 = 7.5; G: 20 * 0.5 / 2 = 5.
        assert_eq!(values, [0.0, 7.5, 5.0, 12.5, 7.5, 15.0]);
    }
}
