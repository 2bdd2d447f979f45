//! The format from the first bytes (never from a path or a name), and the
//! decoder opened on the header alone: its size is known before any pixel
//! memory is allocated.

use std::io::Cursor;

use image::codecs::png::PngDecoder;
use image::codecs::webp::WebPDecoder;
use image::{ColorType, ImageDecoder as _};
use zune_core::bytestream::ZCursor;
use zune_core::options::DecoderOptions;

use super::error::{Cause, ImageError};
pub use super::format::Format;

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    pub width: u32,
    pub height: u32,
}

impl Header {
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// The format by its signature, or why the bytes are none of them.
pub fn format_of(bytes: &[u8]) -> Result<Format, ImageError> {
    match bytes {
        [] => Err(ImageError::Empty),
        [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', ..] => Ok(Format::Png),
        [0xff, 0xd8, 0xff, ..] => Ok(Format::Jpeg),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Ok(Format::WebP),
        _ => Err(ImageError::UnknownFormat {
            len: bytes.len(),
            start: hex_prefix(bytes),
        }),
    }
}

fn hex_prefix(bytes: &[u8]) -> String {
    let shown: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    shown.join(" ")
}

/// A decoder that has read the header and nothing more.
pub enum Opened<'a> {
    Png(Box<PngDecoder<Cursor<&'a [u8]>>>),
    Jpeg(Box<zune_jpeg::JpegDecoder<ZCursor<&'a [u8]>>>),
    /// With the size its header says (`lossless_size`).
    WebP(Box<WebPDecoder<Cursor<&'a [u8]>>>, (u32, u32)),
}

impl Opened<'_> {
    pub fn header(&self) -> Header {
        let (format, (width, height)) = match self {
            Opened::Png(d) => (Format::Png, d.dimensions()),
            Opened::WebP(_, size) => (Format::WebP, *size),
            Opened::Jpeg(d) => {
                let (w, h) = d.dimensions().unwrap_or((0, 0));
                // JPEG sides are 16-bit, so they fit.
                let side = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                (Format::Jpeg, (side(w), side(h)))
            }
        };
        Header {
            format,
            width,
            height,
        }
    }
}

impl Opened<'_> {
    /// The header, or why a run rejects the image from its header alone: a
    /// side of 0, or PNG/WebP pixels that are not 8-bit gray, gray+alpha,
    /// RGB or RGBA (16-bit PNG). `max_pixels` is the caller's.
    pub fn checked_header(&self) -> Result<Header, ImageError> {
        let header = self.header();
        if header.width == 0 || header.height == 0 {
            return Err(ImageError::NoPixels {
                format: header.format,
                width: header.width,
                height: header.height,
            });
        }
        let color = match self {
            Opened::Png(d) => d.color_type(),
            Opened::WebP(d, _) => d.color_type(),
            Opened::Jpeg(_) => return Ok(header),
        };
        match color {
            ColorType::L8 | ColorType::La8 | ColorType::Rgb8 | ColorType::Rgba8 => Ok(header),
            other => Err(ImageError::NotEightBit {
                format: header.format,
                color: format!("{other:?}"),
            }),
        }
    }
}

/// Opens the decoder for `bytes`' format and reads its header.
pub fn open(bytes: &[u8]) -> Result<Opened<'_>, ImageError> {
    let format = format_of(bytes)?;
    let failed = |source: Cause| ImageError::Header { format, source };
    match format {
        Format::Png => PngDecoder::new(Cursor::new(bytes))
            .map(|d| Opened::Png(Box::new(d)))
            .map_err(|e| failed(Box::new(e))),
        Format::WebP => WebPDecoder::new(Cursor::new(bytes))
            .map(|d| {
                let size = lossless_size(bytes).unwrap_or(d.dimensions());
                Opened::WebP(Box::new(d), size)
            })
            .map_err(|e| failed(Box::new(e))),
        Format::Jpeg => {
            // Lenient, as libjpeg is: a missing end marker or padding is
            // decoded; a truncated scan still fails in the decode.
            let options = DecoderOptions::default()
                .set_strict_mode(false)
                .set_max_width(usize::MAX)
                .set_max_height(usize::MAX);
            let mut decoder =
                zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
            decoder.decode_headers().map_err(|e| failed(Box::new(e)))?;
            Ok(Opened::Jpeg(Box::new(decoder)))
        }
    }
}

/// A simple lossless WebP's size from its VP8L header: 14 bits a side,
/// each the side minus one. image-webp 0.2 adds the one before masking, so
/// it reads a side of 16384 (a forged bomb's favourite) as 0.
fn lossless_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let is_vp8l = bytes.get(12..16) == Some(b"VP8L") && bytes.get(20) == Some(&0x2f);
    let bits = u32::from_le_bytes(bytes.get(21..25)?.try_into().ok()?);
    is_vp8l.then(|| (1 + (bits & 0x3fff), 1 + ((bits >> 14) & 0x3fff)))
}

/// The header alone, checked as a run checks it (for `inspect`).
pub fn header(bytes: &[u8]) -> Result<Header, ImageError> {
    crate::panics::catch(|| open(bytes).and_then(|o| o.checked_header()))
        .map_err(|p| ImageError::Panicked(p.0))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_content_and_anything_else_is_named() {
        assert_eq!(format_of(b"\x89PNG\r\n\x1a\nrest").ok(), Some(Format::Png));
        assert_eq!(
            format_of(&[0xff, 0xd8, 0xff, 0xe0]).ok(),
            Some(Format::Jpeg)
        );
        assert_eq!(format_of(b"RIFF\0\0\0\0WEBPVP8 ").ok(), Some(Format::WebP));
        let empty = format_of(b"").unwrap_err().to_string();
        assert_eq!(empty, "is empty (0 bytes)");
        let gif = format_of(b"GIF89a\x01\x00").unwrap_err().to_string();
        assert!(
            gif.contains("not PNG, JPEG or WebP") && gif.contains("47 49 46"),
            "{gif}"
        );
    }
}
