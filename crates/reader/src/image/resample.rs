//! Pillow's `Image.resize`, by hand and to the bit (Pillow 13's
//! `Image.resize`, `_resize` in `_imaging.c`, `libImaging/Resample.c` and
//! `ImagingScaleAffine` in `Geometry.c`): the same box in C floats, the same
//! coefficients in doubles normalized to 22-bit fixed point, the same pass
//! order (horizontal first, over only the rows the vertical pass reads,
//! unless the height shrinks by more than twice what the width does), the
//! same rounding and clipping; `nearest` as Pillow's affine scaling; RGBA
//! premultiplied around a convolution as Pillow's `RGBa`. Pixel for pixel
//! equal to Pillow on every filter (`tests::pillow_gives_the_same_pixels`).

use std::borrow::Cow;
use std::f64::consts::PI;

use super::pixels::Pixels;
use super::Filter;

/// `32 - 8 - 2`: 8 bits for the result, 2 for the filters' negative lobes
/// and overshoot (Resample.c's `PRECISION_BITS`).
const PRECISION_BITS: u32 = 22;

/// A source box `(x0, y0, x1, y1)` as Python gives it to `Image.resize`.
pub type SourceBox = (f64, f64, f64, f64);

/// `Image.resize(size, filter, box)` on 8-bit gray, RGB or RGBA pixels
/// (Pillow 13.0.0's, the version `tools/requirements*.txt` installs).
pub fn resize(source: &Pixels, size: (u32, u32), filter: Filter, source_box: SourceBox) -> Pixels {
    let (w, h) = (f64::from(source.width), f64::from(source.height));
    if size == (source.width, source.height) && source_box == (0.0, 0.0, w, h) {
        return source.clone();
    }
    if source.channels == 4 && filter != Filter::Nearest {
        // RGBA -> RGBa, resized, -> RGBA.
        let premultiplied = map_pixels(source, premultiply);
        let resized = imaging_resize(&premultiplied, size, filter, source_box);
        return map_pixels(&resized, unpremultiply);
    }
    imaging_resize(source, size, filter, source_box)
}

/// `_imaging.c`'s `_resize`: the box in C floats; a whole-pixel box of the
/// output's size is a crop.
fn imaging_resize(source: &Pixels, size: (u32, u32), filter: Filter, b: SourceBox) -> Pixels {
    let bx = [b.0 as f32, b.1 as f32, b.2 as f32, b.3 as f32];
    let (xsize, ysize) = (size.0 as f32, size.1 as f32);
    let whole = |v: f32| v - (v as i32) as f32 == 0.0;
    if whole(bx[0]) && bx[2] - bx[0] == xsize && whole(bx[1]) && bx[3] - bx[1] == ysize {
        return crop(source, (bx[0] as usize, bx[1] as usize), size);
    }
    if filter == Filter::Nearest {
        return scale_affine(source, size, bx);
    }
    resample(source, size, filter, bx)
}

fn blank(width: u32, height: u32, channels: usize) -> Pixels {
    Pixels {
        width,
        height,
        channels,
        data: vec![0; width as usize * height as usize * channels],
    }
}

fn crop(source: &Pixels, (x0, y0): (usize, usize), (width, height): (u32, u32)) -> Pixels {
    let mut out = blank(width, height, source.channels);
    let row = width as usize * source.channels;
    let source_row = source.width as usize * source.channels;
    for (y, line) in out.data.chunks_exact_mut(row).enumerate() {
        let start = (y0 + y) * source_row + x0 * source.channels;
        line.copy_from_slice(&source.data[start..start + row]);
    }
    out
}

/// Geometry.c's `COORD`.
fn coord(v: f64) -> i64 {
    if v < 0.0 {
        -1
    } else {
        v as i64
    }
}

/// `nearest`: Geometry.c's `ImagingScaleAffine`, its positions summed step
/// by step as Pillow sums them.
fn scale_affine(source: &Pixels, (xsize, ysize): (u32, u32), bx: [f32; 4]) -> Pixels {
    let channels = source.channels;
    let mut out = blank(xsize, ysize, channels);
    let a0 = f64::from(bx[2] - bx[0]) / f64::from(xsize);
    let a4 = f64::from(bx[3] - bx[1]) / f64::from(ysize);
    let (mut xo, mut yo) = (f64::from(bx[0]) + a0 * 0.5, f64::from(bx[1]) + a4 * 0.5);
    let mut xintab = vec![0usize; xsize as usize];
    let (mut xmin, mut xmax) = (xsize as usize, 0);
    for (x, slot) in xintab.iter_mut().enumerate() {
        let xin = coord(xo);
        if (0..i64::from(source.width)).contains(&xin) {
            xmax = x + 1;
            xmin = xmin.min(x);
            *slot = xin as usize;
        }
        xo += a0;
    }
    let row = xsize as usize * channels;
    let source_row = source.width as usize * channels;
    for line in out.data.chunks_exact_mut(row) {
        let yi = coord(yo);
        if (0..i64::from(source.height)).contains(&yi) {
            let input = &source.data[yi as usize * source_row..][..source_row];
            for x in xmin..xmax {
                let from = xintab[x] * channels;
                line[x * channels..][..channels].copy_from_slice(&input[from..from + channels]);
            }
        }
        yo += a4;
    }
    out
}

/// A filter and its support (Resample.c's `struct filter`).
fn kernel(filter: Filter) -> (fn(f64) -> f64, f64) {
    match filter {
        Filter::Box => (box_filter, 0.5),
        Filter::Bilinear => (bilinear_filter, 1.0),
        Filter::Hamming => (hamming_filter, 1.0),
        Filter::Bicubic => (bicubic_filter, 2.0),
        Filter::Lanczos => (lanczos_filter, 3.0),
        // Never convolved: `scale_affine`.
        Filter::Nearest => (box_filter, 0.5),
    }
}

fn box_filter(x: f64) -> f64 {
    if x > -0.5 && x <= 0.5 {
        1.0
    } else {
        0.0
    }
}

fn bilinear_filter(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

fn hamming_filter(x: f64) -> f64 {
    let x = x.abs();
    if x == 0.0 {
        return 1.0;
    }
    if x >= 1.0 {
        return 0.0;
    }
    let x = x * PI;
    // `0.54f + 0.46f * cos(x)`: C float constants.
    x.sin() / x * (f64::from(0.54f32) + f64::from(0.46f32) * x.cos())
}

fn bicubic_filter(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

fn sinc_filter(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let x = x * PI;
    x.sin() / x
}

fn lanczos_filter(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) {
        sinc_filter(x) * sinc_filter(x / 3.0)
    } else {
        0.0
    }
}

/// One pass's coefficients: for each output pixel the first input pixel
/// and how many it reads, and `ksize` weights in fixed point.
struct Coefficients {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
}

impl Coefficients {
    /// Resample.c's `precompute_coeffs` then `normalize_coeffs_8bpc`.
    fn new(in_size: u32, in0: f32, in1: f32, out_size: u32, filter: Filter) -> Self {
        let (function, support) = kernel(filter);
        let scale = f64::from(in1 - in0) / f64::from(out_size);
        let filterscale = scale.max(1.0);
        let support = support * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let inv_filterscale = 1.0 / filterscale;
        let mut bounds = Vec::with_capacity(out_size as usize);
        let mut weights = vec![0; out_size as usize * ksize];
        let mut k = vec![0.0f64; ksize];
        for (xx, fixed) in weights.chunks_exact_mut(ksize).enumerate() {
            let center = f64::from(in0) + (xx as f64 + 0.5) * scale;
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(i64::from(in_size)) - xmin;
            let taps = (xmax.max(0) as usize).min(ksize);
            let mut ww = 0.0;
            for (x, w) in k.iter_mut().enumerate().take(taps) {
                *w = function(((x as i64 + xmin) as f64 - center + 0.5) * inv_filterscale);
                ww += *w;
            }
            for (x, out) in fixed.iter_mut().enumerate().take(taps) {
                let w = if ww == 0.0 { k[x] } else { k[x] / ww };
                *out = fixed_point(w);
            }
            bounds.push((xmin as usize, taps));
        }
        Self {
            ksize,
            bounds,
            weights,
        }
    }

    fn of(&self, out: usize) -> (usize, &[i32]) {
        let (first, taps) = self.bounds[out];
        (first, &self.weights[out * self.ksize..][..taps])
    }
}

fn fixed_point(w: f64) -> i32 {
    let one = f64::from(1u32 << PRECISION_BITS);
    if w < 0.0 {
        (-0.5 + w * one) as i32
    } else {
        (0.5 + w * one) as i32
    }
}

/// Resample.c's `clip8`.
fn clip8(sum: i32) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Resample.c's `ImagingResampleInner`: two passes, the horizontal first
/// (over only the rows the vertical pass reads) unless the image's height
/// shrinks by more than twice its width does, then the vertical first.
fn resample(source: &Pixels, (xsize, ysize): (u32, u32), filter: Filter, bx: [f32; 4]) -> Pixels {
    let need_horizontal = xsize != source.width || bx[0] != 0.0 || bx[2] != xsize as f32;
    let need_vertical = ysize != source.height || bx[1] != 0.0 || bx[3] != ysize as f32;
    // Pillow 13: the vertical pass first when the height shrinks by more
    // than twice what the width does (in whole pixels of the image).
    let (shrunk_h, shrunk_w) = (
        i64::from(source.height) - i64::from(ysize),
        i64::from(source.width) - i64::from(xsize),
    );
    let horizontal_first = !(shrunk_h > 0 && shrunk_h > shrunk_w * 2);
    let mut vertical = Coefficients::new(source.height, bx[1], bx[3], ysize, filter);
    let horizontal = Coefficients::new(source.width, bx[0], bx[2], xsize, filter);
    let mut current = Cow::Borrowed(source);
    if horizontal_first {
        if need_horizontal {
            let first_row = vertical.bounds[0].0;
            let last = vertical.bounds[ysize as usize - 1];
            for bound in &mut vertical.bounds {
                bound.0 -= first_row;
            }
            let rows = first_row..last.0 + last.1;
            current = Cow::Owned(horizontal_pass(source, rows, &horizontal, xsize));
        }
        if need_vertical {
            current = Cow::Owned(vertical_pass(&current, &vertical, ysize));
        }
    } else {
        if need_vertical {
            current = Cow::Owned(vertical_pass(source, &vertical, ysize));
        }
        if need_horizontal {
            let rows = 0..current.height as usize;
            current = Cow::Owned(horizontal_pass(&current, rows, &horizontal, xsize));
        }
    }
    current.into_owned()
}

fn horizontal_pass(
    source: &Pixels,
    rows: std::ops::Range<usize>,
    coefficients: &Coefficients,
    xsize: u32,
) -> Pixels {
    let channels = source.channels;
    let mut out = blank(xsize, rows.len() as u32, channels);
    let source_row = source.width as usize * channels;
    let row = xsize as usize * channels;
    for (y, line) in out.data.chunks_exact_mut(row).enumerate() {
        let input = &source.data[(rows.start + y) * source_row..][..source_row];
        match channels {
            1 => horizontal_row::<1>(input, line, coefficients),
            3 => horizontal_row::<3>(input, line, coefficients),
            _ => horizontal_row::<4>(input, line, coefficients),
        }
    }
    out
}

/// One row of the horizontal pass, `C` channels a pixel.
fn horizontal_row<const C: usize>(input: &[u8], line: &mut [u8], coefficients: &Coefficients) {
    for (xx, pixel) in line.chunks_exact_mut(C).enumerate() {
        let (first, k) = coefficients.of(xx);
        let read = &input[first * C..(first + k.len()) * C];
        let mut sums = [HALF; C];
        for (from, weight) in read.chunks_exact(C).zip(k) {
            for (sum, &value) in sums.iter_mut().zip(from) {
                *sum += i32::from(value) * weight;
            }
        }
        for (value, sum) in pixel.iter_mut().zip(sums) {
            *value = clip8(sum);
        }
    }
}

fn vertical_pass(source: &Pixels, coefficients: &Coefficients, ysize: u32) -> Pixels {
    let mut out = blank(source.width, ysize, source.channels);
    let row = source.width as usize * source.channels;
    let mut sums = vec![0i32; row];
    for (yy, line) in out.data.chunks_exact_mut(row).enumerate() {
        let (first, k) = coefficients.of(yy);
        sums.fill(HALF);
        for (y, weight) in k.iter().enumerate() {
            let input = &source.data[(first + y) * row..][..row];
            for (sum, &value) in sums.iter_mut().zip(input) {
                *sum += i32::from(value) * weight;
            }
        }
        for (value, &sum) in line.iter_mut().zip(&sums) {
            *value = clip8(sum);
        }
    }
    out
}

fn map_pixels(source: &Pixels, f: fn(&mut [u8])) -> Pixels {
    let mut out = source.clone();
    out.data.chunks_exact_mut(4).for_each(f);
    out
}

/// Convert.c's `rgbA2rgba`: `MULDIV255`.
fn premultiply(pixel: &mut [u8]) {
    let alpha = u32::from(pixel[3]);
    for value in &mut pixel[..3] {
        let tmp = u32::from(*value) * alpha + 128;
        *value = (((tmp >> 8) + tmp) >> 8) as u8;
    }
}

/// Convert.c's `rgba2rgbA`.
fn unpremultiply(pixel: &mut [u8]) {
    let alpha = u32::from(pixel[3]);
    if alpha == 255 || alpha == 0 {
        return;
    }
    for value in &mut pixel[..3] {
        *value = ((255 * u32::from(*value)) / alpha).min(255) as u8;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::path::Path;
    use std::process::Command;

    use image::{ExtendedColorType, ImageEncoder};
    use segpredict_core::message::SegmentDtype;

    use super::super::{ImageDecoder, ImageInput};

    /// Reads each case's PNG, converts and resizes it with Pillow as
    /// `tools/image_reference.py` does (its `resized`: the same geometry),
    /// and appends the `[C, H, W]` u8 pixels to the output file.
    const PILLOW: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from PIL import Image
from image_reference import MODES, resized
with open(sys.argv[3], "wb") as out:
    for case in json.load(open(sys.argv[2])):
        c, h, w = case["shape"]
        img = Image.open(case["png"])
        img.load()
        if img.mode != MODES[c]:
            img = img.convert(MODES[c])
        px = np.asarray(resized(img, w, h, case["spec"]), dtype=np.uint8)
        out.write(px.reshape(h, w, c).transpose(2, 0, 1).tobytes())
"#;

    /// Noise (every value a step from its neighbours: the hardest case for
    /// rounding), alpha included, from a fixed seed.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 56) as u8
            })
            .collect()
    }

    fn png(width: u32, height: u32, channels: usize, seed: u64) -> Vec<u8> {
        let color = match channels {
            1 => ExtendedColorType::L8,
            3 => ExtendedColorType::Rgb8,
            _ => ExtendedColorType::Rgba8,
        };
        let mut pixels = noise(width as usize * height as usize * channels, seed);
        if channels == 4 && pixels.len() >= 8 {
            // Transparent and opaque pixels too (unpremultiplied as is).
            pixels[3] = 0;
            pixels[7] = 255;
        }
        let mut out = Cursor::new(Vec::new());
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(&pixels, width, height, color)
            .unwrap();
        out.into_inner()
    }

    fn python() -> String {
        std::env::var("VIRTUAL_ENV").map_or("python3".into(), |v| format!("{v}/bin/python"))
    }

    /// (png path, shape, settings) of every case, the sources written to `dir`.
    fn cases(dir: &Path) -> Vec<(std::path::PathBuf, [usize; 3], String)> {
        let sources = [
            (5, 7),
            (7, 5),
            (1, 1),
            (13, 9),
            (64, 48),
            (33, 17),
            (2, 301),
            (9, 9),
        ];
        let targets = [(5, 7), (7, 5), (8, 8), (11, 6), (24, 32)];
        let mut cases = Vec::new();
        for (i, &(w, h)) in sources.iter().enumerate() {
            for channels in [1, 3, 4] {
                let path = dir.join(format!("{w}x{h}x{channels}.png"));
                std::fs::write(&path, png(w, h, channels, (i * 10 + channels) as u64)).unwrap();
                for (tw, th) in targets {
                    for filter in [
                        "nearest", "box", "bilinear", "hamming", "bicubic", "lanczos",
                    ] {
                        for mode in ["stretch", "fit", "crop"] {
                            let spec = format!(
                                "resize = \"{mode}\"\nfilter = \"{filter}\"\npad_value = 7"
                            );
                            cases.push((path.clone(), [channels, th, tw], spec));
                        }
                    }
                }
            }
        }
        cases
    }

    fn pillow(dir: &Path, cases: &[(std::path::PathBuf, [usize; 3], String)]) -> Vec<u8> {
        let json: Vec<String> = cases
            .iter()
            .map(|(png, shape, spec)| {
                let spec: toml::Table = toml::from_str(spec).unwrap();
                let spec = serde_json_like(&spec);
                format!(
                    "{{\"png\": {:?}, \"shape\": {shape:?}, \"spec\": {spec}}}",
                    png.display().to_string()
                )
            })
            .collect();
        let (list, out) = (dir.join("cases.json"), dir.join("pillow.bin"));
        std::fs::write(&list, format!("[{}]", json.join(",\n"))).unwrap();
        let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools");
        let ran = Command::new(python())
            .args(["-c", PILLOW, tools])
            .arg(&list)
            .arg(&out)
            .output()
            .expect("python with Pillow (the project's .venv)");
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        std::fs::read(out).unwrap()
    }

    /// The settings as a JSON object (strings and integers only).
    fn serde_json_like(table: &toml::Table) -> String {
        let fields: Vec<String> = table
            .iter()
            .map(|(k, v)| match v {
                toml::Value::String(s) => format!("{k:?}: {s:?}"),
                other => format!("{k:?}: {other}"),
            })
            .collect();
        format!("{{{}}}", fields.join(", "))
    }

    #[test]
    fn pillow_gives_the_same_pixels_for_every_filter_mode_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let cases = cases(dir.path());
        let expected = pillow(dir.path(), &cases);
        let (mut at, mut differing) = (0, Vec::new());
        for (png, shape, spec) in &cases {
            let input: ImageInput = toml::from_str(spec).unwrap();
            let decoder = ImageDecoder::new(&input, shape, SegmentDtype::U8).unwrap();
            let mut ours = Vec::new();
            decoder
                .append(&std::fs::read(png).unwrap(), &mut ours)
                .unwrap();
            let theirs = &expected[at..at + ours.len()];
            at += ours.len();
            let off = ours.iter().zip(theirs).filter(|(a, b)| a != b).count();
            if off > 0 {
                let worst = ours.iter().zip(theirs).map(|(a, b)| a.abs_diff(*b)).max();
                differing.push(format!(
                    "{} to {shape:?} {spec:?}: {off} values, worst {worst:?}",
                    png.display()
                ));
            }
        }
        assert_eq!(at, expected.len(), "Pillow wrote as many values");
        assert!(
            differing.is_empty(),
            "{} of {} cases differ from Pillow:\n{}",
            differing.len(),
            cases.len(),
            differing.join("\n")
        );
    }
}
