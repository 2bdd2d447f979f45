//! Decode + resize throughput on one thread, for benches/images/compare.py:
//! reads a directory of image files (the same files Pillow and torchvision
//! read), decodes and resizes each `--repeat` times through segpredict's
//! `ImageDecoder` (or, `--variant image-crate`, the `image` crate's own
//! `load_from_memory` + `imageops::resize`, the alternative measured), and
//! prints one JSON line: images, seconds, images per second.
//!
//! decode_images DIR C,H,W RESIZE FILTER [--repeat N] [--variant segpredict|image-crate] [--dump FILE]
//!
//! `--dump FILE` writes each file's u8 tensor once, in file order, for the
//! pixel comparison with Pillow (compare.py --parity).

use std::path::PathBuf;
use std::time::Instant;

use segpredict_core::message::SegmentDtype;
use segpredict_reader::image::{ImageDecoder, ImageInput};

struct Args {
    files: Vec<Vec<u8>>,
    shape: Vec<usize>,
    settings: String,
    repeat: usize,
    variant: String,
    dump: Option<PathBuf>,
}

/// An error for a person running the benchmark by hand.
type Failure = Box<dyn std::error::Error>;

fn parse() -> Result<Args, Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "decode_images DIR C,H,W RESIZE FILTER [--repeat N] [--variant V]";
    let [dir, shape, resize, filter, rest @ ..] = &args[..] else {
        return Err(Failure::from(usage));
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{dir}: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    let files = paths
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect::<Result<Vec<_>, _>>()?;
    let shape = shape
        .split(',')
        .map(|n| {
            n.parse()
                .map_err(|_| Failure::from(format!("bad shape {shape}")))
        })
        .collect::<Result<Vec<usize>, Failure>>()?;
    let flag = |name: &str| {
        let at = rest.iter().position(|a| a == name)?;
        rest.get(at + 1).cloned()
    };
    Ok(Args {
        files,
        shape,
        settings: format!("resize = {resize:?}\nfilter = {filter:?}"),
        repeat: flag("--repeat").and_then(|n| n.parse().ok()).unwrap_or(1),
        variant: flag("--variant").unwrap_or_else(|| "segpredict".into()),
        dump: flag("--dump").map(PathBuf::from),
    })
}

/// The `image` crate alone: decode to 8-bit, convert, resize (its own
/// resampling), as a user without segpredict's resize or zune-jpeg would.
fn image_crate(bytes: &[u8], shape: &[usize], filter: image::imageops::FilterType) -> usize {
    let decoded = image::load_from_memory(bytes).expect("the benchmark's files decode");
    let (w, h) = (shape[2] as u32, shape[1] as u32);
    match shape[0] {
        1 => image::imageops::resize(&decoded.to_luma8(), w, h, filter).len(),
        _ => image::imageops::resize(&decoded.to_rgb8(), w, h, filter).len(),
    }
}

fn main() -> Result<(), Failure> {
    let args = parse()?;
    let input: ImageInput = toml::from_str(&args.settings)?;
    let decoder = ImageDecoder::new(&input, &args.shape, SegmentDtype::U8)?;
    // The image crate has no box filter: Triangle (bilinear) for every set.
    let filter = image::imageops::FilterType::Triangle;
    if let Some(path) = &args.dump {
        let mut all = Vec::new();
        for file in &args.files {
            decoder.append(file, &mut all)?;
        }
        std::fs::write(path, all)?;
    }
    let mut out = Vec::new();
    let started = Instant::now();
    let mut bytes_out = 0usize;
    for _ in 0..args.repeat {
        for file in &args.files {
            if args.variant == "image-crate" {
                bytes_out += image_crate(file, &args.shape, filter);
                continue;
            }
            out.clear();
            decoder.append(file, &mut out)?;
            bytes_out += out.len();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let images = args.files.len() * args.repeat;
    println!(
        "{{\"variant\": {:?}, \"images\": {images}, \"seconds\": {seconds:.6}, \"images_per_s\": {:.1}, \"bytes_out\": {bytes_out}}}",
        args.variant,
        images as f64 / seconds
    );
    Ok(())
}
