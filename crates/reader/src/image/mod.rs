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
mod error;
mod fit;
mod format;
mod pixels;
mod resample;
pub(crate) mod sniff;
pub mod survey;
mod tensor;

use serde::Deserialize;

use segpredict_core::message::SegmentDtype;

pub use error::{ImageError, SettingsError};
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
    /// Per-channel means subtracted after scaling: one value for every
    /// channel (`mean = 0.5` or `mean = [0.5]`) or one per channel. Default 0.
    #[serde(default, deserialize_with = "one_or_per_channel")]
    pub mean: Option<Vec<f32>>,
    /// Per-channel standard deviations divided by: one value for every
    /// channel (`std = 0.25` or `std = [0.25]`) or one per channel. Default 1.
    #[serde(default, deserialize_with = "one_or_per_channel")]
    pub std: Option<Vec<f32>>,
    /// An image whose header says more pixels than this (width x height)
    /// rejects its row (`bad_image`) before any pixel memory is allocated:
    /// a decompression bomb costs nothing. Default 16,777,216 (4096 x 4096;
    /// 64 MiB as RGBA), held at most once per decode thread.
    #[serde(default = "default_max_pixels")]
    pub max_pixels: u64,
}

/// `max_pixels`' default: 4096 x 4096.
pub const DEFAULT_MAX_PIXELS: u64 = 4096 * 4096;

fn default_max_pixels() -> u64 {
    DEFAULT_MAX_PIXELS
}

/// `mean` and `std`: a number (one for every channel) or a list of them.
fn one_or_per_channel<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<f32>>, D::Error> {
    struct Values;
    impl<'de> serde::de::Visitor<'de> for Values {
        type Value = Vec<f32>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number (one for every channel) or a list of numbers (one per channel)")
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(vec![v as f32])
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(vec![v as f32])
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(vec![v as f32])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut values = Vec::new();
            while let Some(v) = seq.next_element::<f32>()? {
                values.push(v);
            }
            Ok(values)
        }
    }
    deserializer.deserialize_any(Values).map(Some)
}

/// How an image of another aspect ratio meets the target size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeMode {
    /// Scaled to the target's width and height independently: the aspect
    /// ratio is not kept.
    #[default]
    Stretch,
    /// Scaled to fit inside, centered, the rest filled with `pad_value`.
    Fit,
    /// Scaled to cover, the overflow cut equally from both sides.
    Crop,
}

/// Pillow's resampling filters, by Pillow's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    /// The nearest source pixel; no smoothing, the cheapest.
    Nearest,
    /// The mean of the source pixels each target pixel covers.
    Box,
    /// Linear interpolation (triangle filter), antialiased when shrinking.
    #[default]
    Bilinear,
    /// Hamming-windowed filter: sharper than bilinear at about its cost.
    Hamming,
    /// Cubic interpolation (Pillow's a = -0.5).
    Bicubic,
    /// Lanczos-3: the sharpest, about three times bilinear's cost.
    Lanczos,
}

/// The order of the colour channels in the tensor (`channel_order`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelOrder {
    /// Red, green, blue (then alpha): what torchvision-trained models take.
    #[default]
    Rgb,
    /// Blue, green, red (then alpha): what OpenCV-trained models take.
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
    /// 1 (gray), 3 (RGB) or 4 (RGBA); images of other layouts are
    /// converted.
    pub channels: usize,
    /// Rows of the tensor, at least 1.
    pub height: u32,
    /// Columns of the tensor, at least 1.
    pub width: u32,
    /// The element type written: raw pixels for u8, scaled and normalised
    /// for f16 and f32.
    pub dtype: SegmentDtype,
}

impl Target {
    /// The target a `[C, H, W]` shape names, or why the shape cannot be one.
    pub fn of(shape: &[usize], dtype: SegmentDtype) -> Result<Self, SettingsError> {
        let &[channels, height, width] = shape else {
            return refuse(format!(
                "image segments need shape [channels, height, width], found {shape:?}"
            ));
        };
        if !matches!(channels, 1 | 3 | 4) {
            return refuse(format!(
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
            _ => refuse(format!(
                "image height and width must be 1 or more, found {shape:?}"
            )),
        }
    }
}

impl ImageInput {
    /// Checks the settings against the segments' shape and dtype.
    pub fn validate(&self, shape: &[usize], dtype: SegmentDtype) -> Result<(), SettingsError> {
        let target = Target::of(shape, dtype)?;
        let normalizes = self.scale.is_some() || self.mean.is_some() || self.std.is_some();
        if dtype == SegmentDtype::U8 && normalizes {
            return refuse("scale, mean and std need dtype f16 or f32: a u8 tensor takes the resized pixels as they are");
        }
        for (name, values) in [("mean", &self.mean), ("std", &self.std)] {
            let n = values.as_ref().map_or(1, Vec::len);
            if n != 1 && n != target.channels {
                return refuse(format!(
                    "{name} has {n} values: give one, or one per channel ({})",
                    target.channels
                ));
            }
        }
        if let Some(zero) = self.std.iter().flatten().find(|s| **s == 0.0) {
            return refuse(format!("std must not be {zero}"));
        }
        if self.max_pixels == 0 {
            return refuse("max_pixels must be at least 1");
        }
        Ok(())
    }
}

/// A settings error saying `why`.
fn refuse<T>(why: impl Into<String>) -> Result<T, SettingsError> {
    Err(SettingsError(why.into()))
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
    pub fn new(
        input: &ImageInput,
        shape: &[usize],
        dtype: SegmentDtype,
    ) -> Result<Self, SettingsError> {
        input.validate(shape, dtype)?;
        let target = Target::of(shape, dtype)?;
        Ok(Self {
            target,
            normalize: tensor::Normalize::new(input, target.channels),
            input: input.clone(),
        })
    }

    /// The tensor each image becomes, from the segments' shape and dtype.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Appends the image's tensor (`C*H*W*dtype` bytes) to `out`, or says
    /// why the image cannot be one. Never panics: a decoder's panic is
    /// caught and becomes the reason.
    pub fn append(&self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), ImageError> {
        let decoded = crate::panics::catch(|| self.decode(bytes))
            .map_err(|p| ImageError::Panicked(p.0))??;
        let resized = fit::resize(decoded, &self.target, &self.input);
        tensor::append(
            &resized,
            &self.target,
            self.input.channel_order,
            &self.normalize,
            out,
        );
        Ok(())
    }

    /// The header first: a size over `max_pixels` is refused before the
    /// pixels are allocated.
    fn decode(&self, bytes: &[u8]) -> Result<pixels::Pixels, ImageError> {
        let opened = sniff::open(bytes)?;
        let header = opened.checked_header()?;
        if header.pixels() > self.input.max_pixels {
            return Err(ImageError::TooLarge {
                format: header.format,
                width: header.width,
                height: header.height,
                pixels: header.pixels(),
                max_pixels: self.input.max_pixels,
            });
        }
        pixels::decode(opened, &header, self.target.channels)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Cursor;

    use image::{ExtendedColorType, ImageEncoder};

    use super::*;

    /// An 8x8 gray ramp, 0, 4, 8, ... 252.
    pub fn ramp() -> Vec<u8> {
        (0..64).map(|i| (i * 4) as u8).collect()
    }

    pub fn encode(format: sniff::Format, width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        let color = match pixels.len() / (width * height) as usize {
            1 => ExtendedColorType::L8,
            2 => ExtendedColorType::L16,
            _ => ExtendedColorType::Rgb8,
        };
        let written = match format {
            sniff::Format::Png => image::codecs::png::PngEncoder::new(&mut out)
                .write_image(pixels, width, height, color),
            sniff::Format::Jpeg => {
                image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 100)
                    .write_image(pixels, width, height, color)
            }
            sniff::Format::WebP => image::codecs::webp::WebPEncoder::new_lossless(&mut out)
                .write_image(pixels, width, height, color),
        };
        written.unwrap();
        out.into_inner()
    }

    pub fn gray_8x8(settings: &str) -> ImageDecoder {
        let input: ImageInput = toml::from_str(settings).unwrap();
        ImageDecoder::new(&input, &[1, 8, 8], SegmentDtype::U8).unwrap()
    }

    /// The tensor bytes, or the reject's reason.
    fn decoded(decoder: &ImageDecoder, bytes: &[u8]) -> Result<Vec<u8>, ImageError> {
        let mut out = Vec::new();
        decoder.append(bytes, &mut out).map(|()| out)
    }

    #[test]
    fn png_and_lossless_webp_give_the_pixels_and_jpeg_nearly() {
        let decoder = gray_8x8("");
        for format in [sniff::Format::Png, sniff::Format::WebP] {
            let bytes = encode(format, 8, 8, &ramp());
            assert_eq!(decoded(&decoder, &bytes).unwrap(), ramp(), "{format}");
        }
        let jpeg = decoded(&decoder, &encode(sniff::Format::Jpeg, 8, 8, &ramp())).unwrap();
        let worst = jpeg.iter().zip(ramp()).map(|(a, b)| a.abs_diff(b)).max();
        assert!(worst <= Some(3), "JPEG q100 off by {worst:?}: {jpeg:?}");
    }

    #[test]
    fn an_rgb_image_becomes_gray_or_bgr_planes_resized() {
        // 16x8 RGB, every pixel (200, 100, 50): gray 124 (Pillow's L).
        let rgb: Vec<u8> = [200, 100, 50].repeat(128);
        let png = encode(sniff::Format::Png, 16, 8, &rgb);
        assert_eq!(
            decoded(&gray_8x8("resize = \"crop\""), &png).unwrap(),
            [124; 64]
        );
        let input: ImageInput = toml::from_str("channel_order = \"bgr\"").unwrap();
        let bgr = ImageDecoder::new(&input, &[3, 2, 2], SegmentDtype::U8).unwrap();
        assert_eq!(
            decoded(&bgr, &png).unwrap(),
            [[50; 4], [100; 4], [200; 4]].concat()
        );
    }

    /// PNG's chunk CRC (ISO 3309), so a test can forge a header.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// A real 8x8 PNG whose header claims `side x side` (a valid CRC).
    pub fn png_claiming(side: u32) -> Vec<u8> {
        let mut png = encode(sniff::Format::Png, 8, 8, &ramp());
        png[16..20].copy_from_slice(&side.to_be_bytes());
        png[20..24].copy_from_slice(&side.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
        png
    }

    #[test]
    fn a_header_over_max_pixels_is_refused_before_decoding() {
        // 100,000 x 100,000 would be 10 GB of pixels; the header alone says no.
        let error = decoded(&gray_8x8(""), &png_claiming(100_000))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "PNG of 100000x100000 is 10000000000 pixels, more than max_pixels = 16777216"
        );
        let small = gray_8x8("max_pixels = 63");
        let png = encode(sniff::Format::Png, 8, 8, &ramp());
        let error = decoded(&small, &png).unwrap_err().to_string();
        assert!(
            error.contains("64 pixels, more than max_pixels = 63"),
            "{error}"
        );
    }

    /// A real lossless 8x8 WebP whose VP8L header claims `side x side`.
    pub fn webp_claiming(side: u32) -> Vec<u8> {
        let mut webp = encode(sniff::Format::WebP, 8, 8, &ramp());
        let at = webp.windows(4).position(|w| w == b"VP8L").unwrap() + 9;
        let mut bits = u32::from_le_bytes(webp[at..at + 4].try_into().unwrap());
        bits = (bits & !((1 << 28) - 1)) | (side - 1) | ((side - 1) << 14);
        webp[at..at + 4].copy_from_slice(&bits.to_le_bytes());
        webp
    }

    /// The PNG with its first IDAT chunk's CRC wrong.
    fn crc_broken(mut png: Vec<u8>) -> Vec<u8> {
        let at = png.windows(4).position(|w| w == b"IDAT").unwrap();
        let length = u32::from_be_bytes(png[at - 4..at].try_into().unwrap()) as usize;
        png[at + 4 + length] ^= 0xff;
        png
    }

    #[test]
    fn a_forged_webp_size_and_a_16_bit_png_are_refused_from_the_header() {
        let forged = webp_claiming(16384);
        match sniff::header(&forged) {
            Ok(header) => assert_eq!((header.width, header.height), (16384, 16384)),
            Err(why) => panic!("the forged header did not read: {why}"),
        }
        let error = decoded(&gray_8x8(""), &forged).unwrap_err().to_string();
        assert!(
            error.contains("WebP of 16384x16384 is 268435456 pixels"),
            "{error}"
        );
        let gray16 = encode(sniff::Format::Png, 8, 8, &[7; 128]);
        let why = sniff::header(&gray16).unwrap_err().to_string();
        assert_eq!(
            why,
            "PNG: L16 pixels: only 8-bit gray, gray+alpha, RGB and RGBA images are decoded"
        );
    }

    #[test]
    fn reasons_are_one_line_without_debug_dumps() {
        let dump = "CRC error: expected 0x1 have 0x2 while decoding ChunkType { type: IDAT, \
                    critical: true, private: false, reserved: false, safecopy: false } chunk.\n";
        assert_eq!(
            error::one_line(dump),
            "CRC error: expected 0x1 have 0x2 while decoding IDAT chunk"
        );
        let png = encode(sniff::Format::Png, 8, 8, &ramp());
        let why = decoded(&gray_8x8(""), &crc_broken(png))
            .unwrap_err()
            .to_string();
        assert!(why.starts_with("PNG") && why.contains("IDAT"), "{why}");
        assert!(!why.contains('\n') && !why.contains(" { "), "{why:?}");
    }

    #[test]
    fn every_bad_image_says_why_and_nothing_panics() {
        let png = encode(sniff::Format::Png, 8, 8, &ramp());
        let jpeg = encode(sniff::Format::Jpeg, 8, 8, &ramp());
        let mut corrupt = png.clone();
        let middle = corrupt.len() / 2;
        corrupt[middle] ^= 0xff;
        let gray16 = encode(sniff::Format::Png, 8, 8, &[7; 128]);
        let cases: [(&str, &[u8], &str); 7] = [
            ("zero bytes", &[], "is empty (0 bytes)"),
            ("GIF", b"GIF89a\x08\x00\x08\x00", "is not PNG, JPEG or WebP"),
            ("truncated PNG", &png[..png.len() / 2], "PNG"),
            ("corrupt PNG", &corrupt, "PNG"),
            ("truncated JPEG", &jpeg[..jpeg.len() / 3], "JPEG"),
            ("JPEG header only", &jpeg[..4], "JPEG"),
            ("16-bit gray PNG", &gray16, "only 8-bit"),
        ];
        for (what, bytes, says) in cases {
            let error = decoded(&gray_8x8(""), bytes)
                .err()
                .unwrap_or_else(|| panic!("{what} decoded"))
                .to_string();
            assert!(error.contains(says), "{what}: {error}");
            assert!(
                !error.contains('\n') && !error.ends_with(' '),
                "{what}: {error:?}"
            );
        }
    }

    #[test]
    fn settings_that_do_not_fit_the_shape_are_refused() {
        let input = |text: &str| toml::from_str::<ImageInput>(text).unwrap();
        let refused =
            |text: &str, shape: &[usize], dtype| input(text).validate(shape, dtype).unwrap_err().0;
        assert!(refused("", &[8, 8], SegmentDtype::U8).contains("[channels, height, width]"));
        assert!(refused("", &[2, 8, 8], SegmentDtype::U8).contains("found 2"));
        assert!(refused("scale = 0.5", &[1, 8, 8], SegmentDtype::U8).contains("f16 or f32"));
        assert!(refused("mean = [1.0, 2.0]", &[3, 8, 8], SegmentDtype::F32)
            .contains("one per channel (3)"));
        assert!(refused("std = [0.0]", &[1, 8, 8], SegmentDtype::F32).contains("std must not be 0"));
        // One value, as a number or a list of one, is every channel's.
        for one in ["mean = 0.0", "mean = 0", "mean = [0.0]\nstd = 0.5"] {
            assert!(
                input(one).validate(&[3, 4, 4], SegmentDtype::F32).is_ok(),
                "{one}"
            );
        }
        assert_eq!(input("mean = 0.5\nstd = 2").std, Some(vec![2.0]));
        assert_eq!(input("mean = 0.5").mean, Some(vec![0.5]));
        let wrong = toml::from_str::<ImageInput>("mean = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("a number (one for every channel)"),
            "{wrong}"
        );
        assert!(input("mean = [0.5]\nstd = [0.25, 0.5, 1.0]")
            .validate(&[3, 4, 4], SegmentDtype::F16)
            .is_ok());
    }
}
