//! Resizing to the target size as Pillow's `Image.resize` does
//! (`resample`, to the bit): `stretch`,
//! `fit` (scaled inside, padded, centered) and `crop` (scaled to cover, the
//! source box centered). The geometry is one function, so the Python
//! reference (`tools/image_reference.py`) and `inspect` compute the same.

use super::pixels::Pixels;
use super::resample;
use super::{ImageInput, ResizeMode, Target};

/// Where a source image lands in the target: the source box resampled
/// (left, top, width, height, in source pixels, fractional for `crop`), and
/// the size and offset it is drawn at in the target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// `(left, top, width, height)` of the source region resampled, in
    /// source pixels.
    pub source_box: (f64, f64, f64, f64),
    /// `(width, height)` the region is resampled to.
    pub drawn: (u32, u32),
    /// `(x, y)` of the drawn region's top-left corner in the target; the
    /// rest is padding (`fit` only).
    pub offset: (u32, u32),
}

impl Geometry {
    /// The geometry for a `width x height` source.
    pub fn of(width: u32, height: u32, target: &Target, mode: ResizeMode) -> Self {
        let (w, h) = (f64::from(width), f64::from(height));
        let (tw, th) = (f64::from(target.width), f64::from(target.height));
        let full = (0.0, 0.0, w, h);
        match mode {
            ResizeMode::Stretch => Self {
                source_box: full,
                drawn: (target.width, target.height),
                offset: (0, 0),
            },
            ResizeMode::Fit => {
                let scale = (tw / w).min(th / h);
                // Python's `round`: half to even.
                let side = |n: f64, max: u32| ((n * scale).round_ties_even() as u32).clamp(1, max);
                let drawn = (side(w, target.width), side(h, target.height));
                Self {
                    source_box: full,
                    drawn,
                    offset: ((target.width - drawn.0) / 2, (target.height - drawn.1) / 2),
                }
            }
            ResizeMode::Crop => {
                let scale = (tw / w).max(th / h);
                let (bw, bh) = (tw / scale, th / scale);
                Self {
                    source_box: ((w - bw) / 2.0, (h - bh) / 2.0, bw, bh),
                    drawn: (target.width, target.height),
                    offset: (0, 0),
                }
            }
        }
    }

    /// Whether the source is copied as it is (same size, nothing cut).
    pub fn is_identity(&self, width: u32, height: u32) -> bool {
        self.drawn == (width, height)
            && self.source_box == (0.0, 0.0, f64::from(width), f64::from(height))
    }
}

/// The pixels at the target size (interleaved, the target's channels).
pub fn resize(source: Pixels, target: &Target, input: &ImageInput) -> Pixels {
    let geometry = Geometry::of(source.width, source.height, target, input.resize);
    let drawn = if geometry.is_identity(source.width, source.height) {
        source.data
    } else {
        let (left, top, width, height) = geometry.source_box;
        let source_box = (left, top, left + width, top + height);
        resample::resize(&source, geometry.drawn, input.filter, source_box).data
    };
    if geometry.drawn == (target.width, target.height) {
        return Pixels {
            width: target.width,
            height: target.height,
            channels: source.channels,
            data: drawn,
        };
    }
    pad(&drawn, &geometry, target, source.channels, input.pad_value)
}

/// `drawn` placed at the geometry's offset on a `pad_value` canvas.
fn pad(drawn: &[u8], geometry: &Geometry, target: &Target, channels: usize, value: u8) -> Pixels {
    let row_bytes = target.width as usize * channels;
    let mut data = vec![value; row_bytes * target.height as usize];
    let drawn_row = geometry.drawn.0 as usize * channels;
    let (x0, y0) = (geometry.offset.0 as usize, geometry.offset.1 as usize);
    for (y, row) in drawn.chunks_exact(drawn_row).enumerate() {
        let start = (y0 + y) * row_bytes + x0 * channels;
        data[start..start + drawn_row].copy_from_slice(row);
    }
    Pixels {
        width: target.width,
        height: target.height,
        channels,
        data,
    }
}

#[cfg(test)]
mod tests {
    use segpredict_core::message::SegmentDtype;

    use super::*;

    fn target(width: u32, height: u32) -> Target {
        Target {
            channels: 1,
            height,
            width,
            dtype: SegmentDtype::U8,
        }
    }

    #[test]
    fn fit_pads_and_centers_and_crop_cuts_the_middle() {
        let fit = Geometry::of(40, 20, &target(8, 8), ResizeMode::Fit);
        assert_eq!((fit.drawn, fit.offset), ((8, 4), (0, 2)));
        let crop = Geometry::of(40, 20, &target(8, 8), ResizeMode::Crop);
        assert_eq!(crop.source_box, (10.0, 0.0, 20.0, 20.0));
        let same = Geometry::of(8, 8, &target(8, 8), ResizeMode::Crop);
        assert!(same.is_identity(8, 8));
    }

    #[test]
    fn a_box_filter_shrinking_by_four_averages_each_block() {
        // A 4x4 image of 0..16 shrunk to 1x1: the mean, 7.5, rounds to 8.
        let source = Pixels {
            width: 4,
            height: 4,
            channels: 1,
            data: (0..16).collect(),
        };
        let input: ImageInput = toml::from_str("filter = \"box\"").unwrap();
        let out = resize(source.clone(), &target(1, 1), &input);
        assert_eq!(out.data, [8]);
        let input: ImageInput = toml::from_str("resize = \"fit\"\npad_value = 9").unwrap();
        let out = resize(source, &target(2, 1), &input);
        assert_eq!(out.data.len(), 2);
        assert_eq!(out.data[1], 9, "the right half is padding: {:?}", out.data);
    }
}
