//! Why an image is not a segment (its row's `bad_image` reason, the
//! decoder's own words kept), and why image settings do not fit the shape.

use super::sniff::Format;

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
    #[error("{format} header: {source}")]
    Header {
        format: Format,
        #[source]
        source: Cause,
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
    #[error("{format}: {source}")]
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
    #[error("resizing: {0}")]
    Resize(#[source] Cause),
    /// A decoder panicked on these bytes; caught, so only this row is lost.
    #[error("the decoder panicked: {0}")]
    Panicked(String),
}

/// Image settings that do not fit the segments' shape and dtype.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);
