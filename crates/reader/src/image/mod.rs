//! Segments stored as encoded images (PNG, JPEG, WebP): the pipeline's
//! `[readers.columns.segments.image]` settings, and the decoding of one
//! image's bytes into the tensor bytes the model takes, on the decode pool.
//!
//! The steps, each its own module: `sniff` tells the format from the first
//! bytes and reads the header's size (no pixel is allocated before the size
//! is checked against `max_pixels`); `pixels` decodes into 8-bit gray, RGB or
//! RGBA as the target's channels ask (Pillow's conversions); `fit` resizes
//! (`stretch`, `fit` with padding, `crop`) with Pillow's convolution
//! filters; `tensor` lays the pixels out as channels x height x width in the
//! pipeline's dtype, scaled and normalized. `column` reads the column forms
//! (`list<binary>`, `list<struct<bytes, path>>`, `binary`,
//! `struct<bytes, path>`); `survey` backs `inspect`.

pub(crate) mod column;
mod fit;
mod pixels;
pub(crate) mod sniff;
pub mod survey;
mod tensor;

use serde::Deserialize;

use segpredict_core::message::SegmentDtype;

pub use fit::Geometry;

/// `[readers.columns.segments.image]`: the segments are encoded images, and
/// this is how each becomes the tensor of the segments' `shape`
/// (`[channels, height, width]`) and `dtype`. Every field has a default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImageInput {
    /// How an image of another size becomes `height x width`: `stretch`
    /// (both sides scaled, the aspect ratio not kept), `fit` (scaled to fit
    /// inside, the rest padded with `pad_value`, the image centered) or
    /// `crop` (scaled to cover, the overflow cut equally from both sides).
    /// Default `stretch`. An image already of the target size is copied.
    #[serde(default)]
    pub resize: ResizeMode,
    /// The resampling filter, as Pillow's `resample`: `nearest`, `box`,
    /// `bilinear`, `hamming`, `bicubic` or `lanczos`. Default `bilinear`.
    /// Convolution filters widen with the scale when shrinking
    /// (antialiasing), as Pillow's do; `lanczos` costs about three times
    /// `bilinear`.
    #[serde(default)]
    pub filter: Filter,
    /// For 3 or 4 channels, their order in the tensor: `rgb` or `bgr`
    /// (OpenCV-trained models). Default `rgb`. A 4th channel is alpha.
    #[serde(default)]
    pub channel_order: ChannelOrder,
    /// `fit`'s padding, one 0..255 value for every channel before scaling.
    /// Default 0.
    #[serde(default)]
    pub pad_value: u8,
    /// f16/f32 only: each 0..255 value is multiplied by this, then
    /// `(value - mean[c]) / std[c]`. Default 1.0 (e.g. 0.00392156862745098
    /// for 0..1, as torchvision's `ToTensor`). A u8 tensor takes the
    /// resized pixels as they are: `scale`, `mean` and `std` must be left out.
    pub scale: Option<f32>,
    /// Per-channel means subtracted after scaling, one value or one per
    /// channel. Default 0.
    pub mean: Option<Vec<f32>>,
    /// Per-channel standard deviations divided by, one value or one per
    /// channel. Default 1.
    pub std: Option<Vec<f32>>,
    /// An image whose header says more pixels than this (width x height)
    /// rejects its row (`bad_image`) before any pixel memory is allocated:
    /// a decompression bomb costs nothing. Default 16,777,216 (4096 x 4096;
    /// 64 MiB as RGBA), held at most once per decode thread.
    #[serde(default = "default_max_pixels")]
    pub max_pixels: u64,
}

fn default_max_pixels() -> u64 {
    4096 * 4096
}

/// How an image of another aspect ratio meets the target size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeMode {
    #[default]
    Stretch,
    Fit,
    Crop,
}

/// Pillow's resampling filters, by Pillow's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    Nearest,
    Box,
    #[default]
    Bilinear,
    Hamming,
    Bicubic,
    Lanczos,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelOrder {
    #[default]
    Rgb,
    Bgr,
}

impl std::fmt::Display for ResizeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format!("{self:?}").to_lowercase())
    }
}

impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format!("{self:?}").to_lowercase())
    }
}

/// The tensor one image becomes: `[channels, height, width]` of `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub channels: usize,
    pub height: u32,
    pub width: u32,
    pub dtype: SegmentDtype,
}

impl Target {
    /// The target a `[C, H, W]` shape names, or why the shape cannot be one.
    pub fn of(shape: &[usize], dtype: SegmentDtype) -> Result<Self, String> {
        let &[channels, height, width] = shape else {
            return Err(format!(
                "image segments need shape [channels, height, width], found {shape:?}"
            ));
        };
        if !matches!(channels, 1 | 3 | 4) {
            return Err(format!(
                "image segments have 1 (gray), 3 (RGB) or 4 (RGBA) channels, found {channels}"
            ));
        }
        let side = |n: usize| u32::try_from(n).ok().filter(|&n| n > 0);
        match (side(height), side(width)) {
            (Some(height), Some(width)) => Ok(Self {
                channels,
                height,
                width,
                dtype,
            }),
            _ => Err(format!("image height and width must be 1 or more, found {shape:?}")),
        }
    }
}

impl ImageInput {
    /// Checks the settings against the segments' shape and dtype.
    pub fn validate(&self, shape: &[usize], dtype: SegmentDtype) -> Result<(), String> {
        let target = Target::of(shape, dtype)?;
        let normalizes = self.scale.is_some() || self.mean.is_some() || self.std.is_some();
        if dtype == SegmentDtype::U8 && normalizes {
            return Err("scale, mean and std need dtype f16 or f32: a u8 tensor takes the resized pixels as they are".into());
        }
        for (name, values) in [("mean", &self.mean), ("std", &self.std)] {
            let n = values.as_ref().map_or(1, Vec::len);
            if n != 1 && n != target.channels {
                return Err(format!(
                    "{name} has {n} values: give one, or one per channel ({})",
                    target.channels
                ));
            }
        }
        if let Some(zero) = self.std.iter().flatten().find(|s| **s == 0.0) {
            return Err(format!("std must not be {zero}"));
        }
        if self.max_pixels == 0 {
            return Err("max_pixels must be at least 1".into());
        }
        Ok(())
    }
}

/// Turns one encoded image into one segment's tensor bytes; shared by the
/// decode pool's threads (each keeps its own resize buffers).
#[derive(Debug, Clone)]
pub struct ImageDecoder {
    target: Target,
    input: ImageInput,
    normalize: tensor::Normalize,
}

impl ImageDecoder {
    /// `input` validated against `shape` and `dtype` first.
    pub fn new(input: &ImageInput, shape: &[usize], dtype: SegmentDtype) -> Result<Self, String> {
        input.validate(shape, dtype)?;
        let target = Target::of(shape, dtype)?;
        Ok(Self {
            target,
            normalize: tensor::Normalize::new(input, target.channels),
            input: input.clone(),
        })
    }

    pub fn target(&self) -> Target {
        self.target
    }

    /// Appends the image's tensor (`C*H*W*dtype` bytes) to `out`, or says
    /// why the image cannot be one. Never panics: a decoder's panic is
    /// caught and becomes the reason.
    pub fn append(&self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let decoded = crate::panics::catch(|| self.decode(bytes))
            .map_err(|p| format!("the decoder panicked: {}", p.0))??;
        let resized = fit::resize(&decoded, &self.target, &self.input)?;
        tensor::append(&resized, &self.target, self.input.channel_order, &self.normalize, out);
        Ok(())
    }

    /// The header first: a size over `max_pixels` is refused before the
    /// pixels are allocated.
    fn decode(&self, bytes: &[u8]) -> Result<pixels::Pixels, String> {
        let opened = sniff::open(bytes)?;
        let header = opened.header();
        if header.pixels() > self.input.max_pixels {
            return Err(format!(
                "{} of {}x{} is {} pixels, more than max_pixels = {}",
                header.format,
                header.width,
                header.height,
                header.pixels(),
                self.input.max_pixels
            ));
        }
        pixels::decode(opened, &header, self.target.channels)
    }
}
