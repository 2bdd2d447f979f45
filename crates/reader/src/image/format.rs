//! The encodings decoded, by name. Its own module so that `error` (which
//! names the format in every reason) and `sniff` (which tells it) do not
//! import each other.

/// The encodings decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    Png,
    Jpeg,
    WebP,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::WebP => "WebP",
        })
    }
}
