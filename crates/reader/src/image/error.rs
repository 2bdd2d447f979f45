//! Why an image is not a segment (its row's `bad_image` reason, the
//! decoder's own words kept), and why image settings do not fit the shape.

use super::format::Format;

/// A decoder's or resizer's own error, kept whole.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why one encoded image cannot become a segment. The `Display` is the
/// reject's reason, so it carries the decoder's message in one line.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("is empty (0 bytes)")]
    Empty,
    #[error("is not PNG, JPEG or WebP ({len} bytes starting {start})")]
    UnknownFormat { len: usize, start: String },
    #[error("{format} header: {}", one_line(&source.to_string()))]
    Header {
        format: Format,
        #[source]
        source: Cause,
    },
    #[error("{format} header says {width}x{height}: an image without pixels")]
    NoPixels {
        format: Format,
        width: u32,
        height: u32,
    },
    #[error(
        "{format} of {width}x{height} is {pixels} pixels, more than max_pixels = {max_pixels}"
    )]
    TooLarge {
        format: Format,
        width: u32,
        height: u32,
        pixels: u64,
        max_pixels: u64,
    },
    #[error(
        "{format}: {color} pixels: only 8-bit gray, gray+alpha, RGB and RGBA images are decoded"
    )]
    NotEightBit { format: Format, color: String },
    #[error("{format}: {}", one_line(&source.to_string()))]
    Decode {
        format: Format,
        #[source]
        source: Cause,
    },
    #[error("{format}: decoded {got} bytes where {width}x{height} needs {expected}")]
    ShortDecode {
        format: Format,
        got: usize,
        width: u32,
        height: u32,
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
