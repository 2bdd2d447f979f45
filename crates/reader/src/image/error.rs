//! Why an image is not a segment (its row's `bad_image` reason, the
//! decoder's own words kept), and why image settings do not fit the shape.

use super::format::Format;

/// A decoder's or resizer's own error, kept whole.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why one encoded image cannot become a segment. The `Display` is the
/// reject's reason, so it carries the decoder's message in one line.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The segment holds no bytes.
    #[error("is empty (0 bytes)")]
    Empty,
    /// The bytes start with no PNG, JPEG or WebP signature.
    #[error("is not PNG, JPEG or WebP ({len} bytes starting {start})")]
    UnknownFormat {
        /// The segment's length in bytes.
        len: usize,
        /// Its first bytes in hex, to tell what it is.
        start: String,
    },
    /// The header does not parse.
    #[error("{format} header: {}", one_line(&source.to_string()))]
    Header {
        /// The format the signature named.
        format: Format,
        /// The decoder's error.
        #[source]
        source: Cause,
    },
    /// The header gives a zero width or height.
    #[error("{format} header says {width}x{height}: an image without pixels")]
    NoPixels {
        /// The image's format.
        format: Format,
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
    },
    /// More pixels than `max_pixels` allows: refused before decoding, so a
    /// hostile header cannot claim the memory.
    #[error(
        "{format} of {width}x{height} is {pixels} pixels, more than max_pixels = {max_pixels}"
    )]
    TooLarge {
        /// The image's format.
        format: Format,
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// `width * height`.
        pixels: u64,
        /// The configured bound.
        max_pixels: u64,
    },
    /// A pixel layout other than 8-bit gray, gray+alpha, RGB or RGBA
    /// (16-bit, CMYK, ...).
    #[error(
        "{format}: {color} pixels: only 8-bit gray, gray+alpha, RGB and RGBA images are decoded"
    )]
    NotEightBit {
        /// The image's format.
        format: Format,
        /// The decoder's name for the layout.
        color: String,
    },
    /// The pixel data does not decode (truncated, corrupt).
    #[error("{format}: {}", one_line(&source.to_string()))]
    Decode {
        /// The image's format.
        format: Format,
        /// The decoder's error.
        #[source]
        source: Cause,
    },
    /// The decoder returned fewer bytes than the header's size needs.
    #[error("{format}: decoded {got} bytes where {width}x{height} needs {expected}")]
    ShortDecode {
        /// The image's format.
        format: Format,
        /// Bytes the decoder gave.
        got: usize,
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// Bytes that size needs in the decoded layout.
        expected: usize,
    },
    /// A decoder panicked on these bytes; caught, so only this row is lost.
    #[error("the decoder panicked: {}", one_line(.0))]
    Panicked(String),
}

/// A decoder's message as one clean line: whitespace (newlines included)
/// collapsed, and the `png` crate's `ChunkType { type: IDAT, critical: .. }`
/// (a Debug dump) written as the chunk's name.
pub fn one_line(message: &str) -> String {
    let mut text = message.split_whitespace().collect::<Vec<_>>().join(" ");
    while let Some(start) = text.find("ChunkType {") {
        let Some(len) = text[start..].find('}') else {
            break;
        };
        let dump = &text[start..start + len + 1];
        let name = dump
            .split_once("type: ")
            .and_then(|(_, rest)| rest.split([',', ' ', '}']).next())
            .unwrap_or("?")
            .to_string();
        text.replace_range(start..start + len + 1, &name);
    }
    text.trim_end_matches(['.', ':', ' ']).to_string()
}

/// Image settings that do not fit the segments' shape and dtype.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);
