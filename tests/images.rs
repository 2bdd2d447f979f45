//! Encoded image segments: the image sample (the sample's digits as PNG,
//! as 32x32 JPEG, and in the `datasets` layout, `sample_data/
//! make_image_samples.py`) run through its shipped pipelines, against the
//! raw sample's run and the Pillow reference (`tools/image_reference.py`);
//! bad images of every kind rejected with their reasons; `inspect`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

fn image_sample(kind: &str) -> PathBuf {
    repo().join(format!("sample_data/digits-{kind}.parquet"))
}

fn image_pipeline(kind: &str) -> PathBuf {
    repo().join(format!("pipelines/sample-{kind}.toml"))
}

/// Runs the shipped `pipelines/sample-KIND.toml` on `input`, into `out`.
fn run_image_pipeline(kind: &str, input: &Path, out: &Path, args: &[&str]) -> RunResult {
    let (input, out_arg) = (input.display().to_string(), out.display().to_string());
    let mut all = vec!["--input", &input, "--output", &out_arg, "--device", "cpu"];
    all.extend_from_slice(args);
    run_file(&image_pipeline(kind), &all, out)
}

/// Item accuracy of `output` against the sample's true labels.
fn item_accuracy(output: &[OutRow]) -> f64 {
    let input = read_input(&sample());
    let truth: HashMap<&str, &str> = input
        .iter()
        .map(|r| (r.id.as_str(), r.true_label.as_deref().unwrap()))
        .collect();
    let correct = output.iter().filter(|r| truth[r.id.as_str()] == r.label);
    correct.count() as f64 / SAMPLE_ROWS as f64
}

/// A lossless image sample predicts what the raw sample does, row for row.
fn assert_lossless_sample_matches_the_raw_run(kind: &str) {
    let dir = tmp();
    let out = dir.path().join("out");
    let run = run_image_pipeline(kind, &image_sample(kind), &out, &[]);
    run.expect_code(0);
    let output = read_output(&out);
    assert_eq!(output.len(), SAMPLE_ROWS, "{}", run.describe());
    assert!(read_rejects(&out).is_empty());
    // Every label id equal to the raw run's; scores within 1e-4 (batches
    // are composed differently, so float sums may round differently).
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&out);
    let us = report["decode_us_per_segment"].as_f64().unwrap();
    assert!(
        us > 0.0,
        "the report shows the readers' cost per segment: {report}"
    );
}

#[test]
fn png_sample_predicts_exactly_what_the_raw_sample_does() {
    assert_lossless_sample_matches_the_raw_run("png");
}

#[test]
fn datasets_layout_predicts_exactly_what_the_raw_sample_does() {
    assert_lossless_sample_matches_the_raw_run("datasets");
}

/// Starts the Pillow reference on an image pipeline.
fn start_image_reference(pipeline: &Path, out: &Path) -> std::process::Child {
    Command::new(python())
        .arg(repo().join("tools/image_reference.py"))
        .arg("--pipeline")
        .arg(pipeline)
        .arg("--output")
        .arg(out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting tools/image_reference.py")
}

#[test]
fn jpeg_sample_is_within_half_a_point_of_the_raw_accuracy_and_agrees_with_pillow() {
    let dir = tmp();
    let (out, reference_out) = (dir.path().join("out"), dir.path().join("ref.parquet"));
    let reference = start_image_reference(&image_pipeline("jpeg"), &reference_out);
    let run = run_image_pipeline("jpeg", &image_sample("jpeg"), &out, &[]);
    let reference = finish_reference(reference, &reference_out);
    run.expect_code(0);
    assert_lossy_run_keeps_the_accuracy_and_agrees_with(&out, &reference, "JPEG");
}

/// Lossy WebP (which the `image` crate cannot write, so Pillow's libwebp
/// made it) through the JPEG pipeline: the format is found by content.
#[test]
fn lossy_webp_is_found_by_content_keeps_the_accuracy_and_agrees_with_pillow() {
    let dir = tmp();
    let input = dir.path().join("digits-webp.parquet");
    fixture("webp", &sample(), &input, &[]);
    let input_text = input.display().to_string();
    let pipeline = edited_pipeline(dir.path(), "jpeg", |text| {
        let path = text.lines().find(|l| l.starts_with("path = \"")).unwrap();
        text.replace(path, &format!("path = \"{input_text}\""))
    });
    let (out, reference_out) = (dir.path().join("out"), dir.path().join("ref.parquet"));
    let reference = start_image_reference(&pipeline, &reference_out);
    let out_text = out.display().to_string();
    let run = run_file(&pipeline, &["--output", &out_text, "--device", "cpu"], &out);
    let reference = finish_reference(reference, &reference_out);
    run.expect_code(0);
    assert_lossy_run_keeps_the_accuracy_and_agrees_with(&out, &reference, "WebP");
    let inspect = run_command(Command::new(bin()).arg("inspect").arg(&input), dir.path());
    assert!(inspect.stdout.contains("WebP"), "{}", inspect.stdout);
}

/// Every row predicted, item accuracy within half a point of the raw
/// sample's, and labels equal to the Pillow reference's on >= 99.5% of rows.
fn assert_lossy_run_keeps_the_accuracy_and_agrees_with(
    out: &Path,
    reference: &HashMap<String, ReferencePrediction>,
    format: &str,
) {
    let output = read_output(out);
    assert_eq!(output.len(), SAMPLE_ROWS);
    let (lossy, raw) = (
        item_accuracy(&output),
        item_accuracy(&good_baseline().output),
    );
    assert!(
        (lossy - raw).abs() <= 0.005,
        "{format} item accuracy {lossy} vs the raw sample's {raw}"
    );
    assert_eq!(reference.len(), SAMPLE_ROWS, "Pillow decoded every row");
    let same = output
        .iter()
        .filter(|r| reference[&r.id].1 == r.label_id)
        .count();
    assert!(
        same as f64 >= 0.995 * SAMPLE_ROWS as f64,
        "only {same} of {SAMPLE_ROWS} labels equal the Pillow reference's"
    );
}

/// What `tests/fixtures.py bad-images` damages: row, segment, and words
/// the reason must hold.
const BAD_IMAGES: [(i64, usize, &str); 5] = [
    (3, 1, "PNG"),
    (10, 0, "PNG: unexpected end of file"),
    (20, 2, "is empty (0 bytes)"),
    (30, 0, "is not PNG, JPEG or WebP"),
    (
        40,
        1,
        "PNG of 100000x100000 is 10000000000 pixels, more than max_pixels = 1048576",
    ),
];

/// The PNG sample's first 200 rows with `BAD_IMAGES` damaged, in `dir`.
fn bad_images_input(dir: &Path) -> PathBuf {
    let input = dir.join("bad-images.parquet");
    let rows = ["--rows", "200"];
    fixture("bad-images", &image_sample("png"), &input, &rows);
    input
}

fn assert_bad_images_rejected(out: &Path) {
    let rejects = read_rejects(out);
    let rows: Vec<i64> = rejects.iter().map(|r| r.source_row).collect();
    assert_eq!(rows, BAD_IMAGES.map(|(row, _, _)| row), "{rejects:?}");
    for (reject, (_, segment, says)) in rejects.iter().zip(BAD_IMAGES) {
        assert_eq!(reject.kind, "bad_image", "{reject:?}");
        let named = format!("segment {segment}: ");
        assert!(
            reject.reason.starts_with(&named) && reject.reason.contains(says),
            "{reject:?} should name {named:?} and say {says:?}"
        );
    }
    let output = read_output(out);
    assert_eq!(output.len(), 200 - BAD_IMAGES.len());
    assert_same_predictions_as_baseline(&output);
}

#[test]
fn bad_images_reject_their_rows_with_reasons_and_every_other_row_is_predicted() {
    let dir = tmp();
    let input = bad_images_input(dir.path());
    let strict = dir.path().join("strict");
    // 5 of 200 rows rejected: over the default fraction (0), so exit 3.
    run_image_pipeline("png", &input, &strict, &[]).expect_code(3);
    assert_bad_images_rejected(&strict);
    let lenient = dir.path().join("lenient");
    let args = ["--max-reject-fraction", "0.05"];
    run_image_pipeline("png", &input, &lenient, &args).expect_code(0);
    assert_bad_images_rejected(&lenient);
}

#[test]
fn inspect_shows_the_images_formats_sizes_and_what_the_resize_does() {
    let pipeline = image_pipeline("jpeg");
    let inspect = |args: &[&str]| {
        let mut command = Command::new(bin());
        run_command(command.arg("inspect").args(args), Path::new("."))
    };
    let jpeg = inspect(&["--pipeline", pipeline.to_str().unwrap()]);
    jpeg.expect_code(0);
    for says in [
        "95266 images: JPEG 95266",
        "to 1x8x8 u8 by stretch, filter box",
        "32x32     95266  ########################################  shrunk x0.250",
    ] {
        assert!(
            jpeg.stdout.contains(says),
            "no {says:?} in:\n{}",
            jpeg.stdout
        );
    }
    // The bad images: two headers that do not read, one over max_pixels.
    let dir = tmp();
    let input = bad_images_input(dir.path());
    let png = image_pipeline("png");
    let bad = inspect(&[input.to_str().unwrap(), "--pipeline", png.to_str().unwrap()]);
    bad.expect_code(0);
    for says in [
        "8360 images: PNG 8358",
        "2 image(s) a run rejects by their header (bad_image), e.g. is empty (0 bytes)",
        "1 image(s) over max_pixels = 1048576: a run rejects their rows (bad_image)",
        "100000x100000         1  #  over max_pixels: a run rejects these rows (bad_image)",
        "8x8      8357  ########################################  copied as it is",
    ] {
        assert!(bad.stdout.contains(says), "no {says:?} in:\n{}", bad.stdout);
    }
}

/// What `tests/fixtures.py odd-images` puts in the PNG sample's first 200
/// rows: rejected (row, segment, words of the reason), then decoded.
const ODD_REJECTED: [(i64, usize, &str); 3] = [
    (
        5,
        0,
        "PNG: L16 pixels: only 8-bit gray, gray+alpha, RGB and RGBA images are decoded",
    ),
    (
        15,
        1,
        "WebP of 16384x16384 is 268435456 pixels, more than max_pixels = 1048576",
    ),
    (25, 0, "IDAT"),
];
/// A CMYK JPEG and a JPEG without its end marker: decoded, as Pillow does.
const ODD_DECODED: [i64; 2] = [35, 45];

#[test]
fn inspect_counts_what_a_run_rejects_and_reasons_are_one_clean_line() {
    let dir = tmp();
    let input = dir.path().join("odd-images.parquet");
    fixture(
        "odd-images",
        &image_sample("png"),
        &input,
        &["--rows", "200"],
    );
    let png = image_pipeline("png");
    let mut command = Command::new(bin());
    command
        .arg("inspect")
        .arg(&input)
        .arg("--pipeline")
        .arg(&png);
    let inspect = run_command(&mut command, dir.path());
    inspect.expect_code(0);
    for says in [
        "images: JPEG 2, PNG ",
        ", WebP 1",
        "1 image(s) a run rejects by their header (bad_image), e.g. PNG: L16 pixels",
        "1 image(s) over max_pixels = 1048576: a run rejects their rows (bad_image)",
        "16384x16384         1  #  over max_pixels: a run rejects these rows (bad_image)",
    ] {
        assert!(
            inspect.stdout.contains(says),
            "no {says:?} in:\n{}",
            inspect.stdout
        );
    }
    assert!(!inspect.stdout.contains("xinf"), "{}", inspect.stdout);
    let out = dir.path().join("out");
    let args = ["--max-reject-fraction", "0.05"];
    run_image_pipeline("png", &input, &out, &args).expect_code(0);
    let rejects = read_rejects(&out);
    let rows: Vec<i64> = rejects.iter().map(|r| r.source_row).collect();
    assert_eq!(rows, ODD_REJECTED.map(|(row, _, _)| row), "{rejects:?}");
    for (reject, (_, segment, says)) in rejects.iter().zip(ODD_REJECTED) {
        let named = format!("segment {segment}: ");
        assert!(
            reject.reason.starts_with(&named) && reject.reason.contains(says),
            "{reject:?}: {says:?}"
        );
        let clean = !reject.reason.contains('\n') && !reject.reason.contains(" { ");
        assert!(
            clean && reject.reason == reject.reason.trim(),
            "{:?}",
            reject.reason
        );
    }
    let output = read_output(&out);
    assert_eq!(output.len(), 200 - ODD_REJECTED.len());
    for row in ODD_DECODED {
        assert!(
            output.iter().any(|r| r.source_row == row),
            "row {row} predicted"
        );
    }
}

/// `inspect` on an object in a bucket (moto's S3 server) tells what it
/// tells of the same file on disk: the segments column fetched once.
#[test]
fn inspect_on_a_bucket_shows_the_same_images_as_on_disk() {
    let server = S3Server::shared();
    let bucket = server.unique_bucket("inspect-images");
    server.create_bucket(&bucket);
    let local = image_sample("jpeg");
    server.put(
        &bucket,
        "night/digits-jpeg.parquet",
        &std::fs::read(&local).unwrap(),
    );
    let url = format!("s3://{bucket}/night/digits-jpeg.parquet");
    let pipeline = image_pipeline("jpeg");
    let inspect = |input: &str| {
        let mut command = Command::new(bin());
        server.configure(&mut command);
        command.args(["inspect", input, "--pipeline", pipeline.to_str().unwrap()]);
        let result = run_command(&mut command, Path::new("."));
        result.expect_code(0);
        result.stdout
    };
    let (on_disk, in_bucket) = (inspect(local.to_str().unwrap()), inspect(&url));
    // From the histogram on: segments, images, the batch plan.
    let surveyed = |text: &str| -> String {
        let start = text.find("segments per row").expect("a histogram");
        text[start..].to_string()
    };
    assert!(
        in_bucket.contains("95266 images: JPEG 95266"),
        "{in_bucket}"
    );
    assert!(in_bucket.contains("32x32     95266"), "{in_bucket}");
    assert_eq!(surveyed(&in_bucket), surveyed(&on_disk));
}

/// A shipped image pipeline rewritten by `edit`, into `dir`.
fn edited_pipeline(dir: &Path, kind: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(image_pipeline(kind)).unwrap();
    // Relative paths resolve against the pipeline's folder: make them absolute.
    let pipelines = repo().join("pipelines").display().to_string();
    let text = edit(text.replace("\"../", &format!("\"{pipelines}/../")));
    let path = dir.join(format!("edited-{kind}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn image_settings_that_do_not_fit_and_raw_segments_under_image_are_one_line_errors() {
    let dir = tmp();
    let check = |pipeline: &Path, args: &[&str]| {
        let out = dir.path().join("out").display().to_string();
        let mut command = Command::new(bin());
        command.arg("check").arg(pipeline).args(["--output", &out]);
        run_command(command.args(args), dir.path())
    };
    let two_channels = edited_pipeline(dir.path(), "jpeg", |t| {
        t.replace("shape = [1, 8, 8]", "shape = [2, 8, 8]")
    });
    let error = expect_one_line_error(check(&two_channels, &[]).expect_code(2));
    assert!(
        error.contains("columns.segments.image") && error.contains("found 2"),
        "{error}"
    );
    // The raw sample's fixed_size_binary segments are not encoded images.
    let raw = sample().display().to_string();
    let run = check(&image_pipeline("jpeg"), &["--input", &raw]);
    let error = expect_one_line_error(run.expect_code(2));
    assert!(
        error.contains("digits.parquet: column `segments`: encoded image segments must be"),
        "{error}"
    );
}
