//! Decoding into 8-bit pixels of the target's channel count, converted as
//! Pillow's `Image.convert` does (so the Python reference and segpredict
//! see the same pixels): RGB to gray is ITU-R 601-2 luma in Pillow's fixed
//! point; alpha is dropped, not composited; gray to RGB repeats the value.

use image::ColorType;
use zune_core::colorspace::ColorSpace;

use super::error::ImageError;
use super::sniff::{Header, Opened};

/// Interleaved 8-bit pixels, `channels` per pixel, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    pub channels: usize,
    pub data: Vec<u8>,
}

/// Decodes the opened image (its size already checked) into `channels`
/// (1, 3 or 4) channels.
pub fn decode(opened: Opened<'_>, header: &Header, channels: usize) -> Result<Pixels, ImageError> {
    let format = header.format;
    let (native, data) = match opened {
        Opened::Png(d) => read_with_image(*d, header)?,
        Opened::WebP(d, _) => read_with_image(*d, header)?,
        Opened::Jpeg(mut d) => {
            // Gray stays gray; anything else (YCbCr, CMYK) comes out RGB.
            let gray = d.input_colorspace() == Some(ColorSpace::Luma);
            let out = if gray {
                ColorSpace::Luma
            } else {
                ColorSpace::RGB
            };
            d.set_options(d.options().jpeg_set_out_colorspace(out));
            let data = d.decode().map_err(|e| ImageError::Decode {
                format,
                source: Box::new(e),
            })?;
            (if gray { Native::Gray } else { Native::Rgb }, data)
        }
    };
    let expected = header.pixels() as usize * native.channels();
    if data.len() != expected {
        return Err(ImageError::ShortDecode {
            format,
            got: data.len(),
            width: header.width,
            height: header.height,
            expected,
        });
    }
    Ok(Pixels {
        width: header.width,
        height: header.height,
        channels,
        data: convert(data, native, channels),
    })
}

/// The 8-bit layouts decoders give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Native {
    Gray,
    GrayAlpha,
    Rgb,
    Rgba,
}

impl Native {
    fn channels(self) -> usize {
        match self {
            Native::Gray => 1,
            Native::GrayAlpha => 2,
            Native::Rgb => 3,
            Native::Rgba => 4,
        }
    }
}

fn read_with_image(
    decoder: impl image::ImageDecoder,
    header: &Header,
) -> Result<(Native, Vec<u8>), ImageError> {
    let format = header.format;
    let native = match decoder.color_type() {
        ColorType::L8 => Native::Gray,
        ColorType::La8 => Native::GrayAlpha,
        ColorType::Rgb8 => Native::Rgb,
        ColorType::Rgba8 => Native::Rgba,
        other => {
            return Err(ImageError::NotEightBit {
                format,
                color: format!("{other:?}"),
            })
        }
    };
    let mut data = vec![0; decoder.total_bytes() as usize];
    decoder
        .read_image(&mut data)
        .map_err(|e| ImageError::Decode {
            format,
            source: Box::new(e),
        })?;
    Ok((native, data))
}

/// Pillow's `L = R * 299/1000 + G * 587/1000 + B * 114/1000` (Convert.c's
/// `L24`, rounded).
fn luma(r: u8, g: u8, b: u8) -> u8 {
    let sum = u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000;
    (sum >> 16) as u8
}

fn convert(data: Vec<u8>, native: Native, channels: usize) -> Vec<u8> {
    let from = native.channels();
    if from == channels && native != Native::GrayAlpha {
        return data;
    }
    let mut out = Vec::with_capacity(data.len() / from * channels);
    for pixel in data.chunks_exact(from) {
        let (rgb, alpha) = match native {
            Native::Gray => ([pixel[0]; 3], 255),
            Native::GrayAlpha => ([pixel[0]; 3], pixel[1]),
            Native::Rgb => ([pixel[0], pixel[1], pixel[2]], 255),
            Native::Rgba => ([pixel[0], pixel[1], pixel[2]], pixel[3]),
        };
        match channels {
            1 if matches!(native, Native::Gray | Native::GrayAlpha) => out.push(pixel[0]),
            1 => out.push(luma(rgb[0], rgb[1], rgb[2])),
            3 => out.extend_from_slice(&rgb),
            _ => out.extend_from_slice(&[rgb[0], rgb[1], rgb[2], alpha]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_pillows() {
        // Pillow: Image.new("RGB", (1, 1), (200, 100, 50)).convert("L") -> 124.
        assert_eq!(convert(vec![200, 100, 50], Native::Rgb, 1), [124]);
        assert_eq!(convert(vec![255, 255, 255, 0], Native::Rgba, 1), [255]);
        assert_eq!(convert(vec![7, 9], Native::GrayAlpha, 1), [7]);
        assert_eq!(convert(vec![7], Native::Gray, 3), [7, 7, 7]);
        assert_eq!(convert(vec![1, 2, 3, 4], Native::Rgba, 3), [1, 2, 3]);
        assert_eq!(convert(vec![7, 9], Native::GrayAlpha, 4), [7, 7, 7, 9]);
        assert_eq!(convert(vec![1, 2, 3], Native::Rgb, 4), [1, 2, 3, 255]);
    }
}
