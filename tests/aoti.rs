//! AOTInductor packages (`.pt2`): the sample predicted by the committed CPU
//! package of digits-small, and each start-up refusal as one line naming the
//! file and the problem.

use std::path::{Path, PathBuf};

use crate::util::*;

/// `models/digits-small.pt2`: digits-small's weights, exported and compiled
/// for CPU by `tools/make_models.py --aoti` (`just models-aoti`).
fn package() -> PathBuf {
    repo().join("models/digits-small.pt2")
}

#[test]
fn package_predicts_the_sample_like_torchscript_and_the_python_reference() {
    let dir = tmp();
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(sample(), &out);
    pipeline.model = package();
    let input = read_input(&sample());
    let output = run_clean(&pipeline, &ids_of(&input));
    assert_eq!(output.len(), SAMPLE_ROWS);

    let reference_out = dir.path().join("reference.parquet");
    let reference = finish_reference(start_reference(&reference_out), &reference_out);
    assert_eq!(reference.len(), SAMPLE_ROWS);
    assert_matches_reference(&output, &reference);
    // The same binary with the TorchScript model.
    assert_same_predictions_as_baseline(&output);
}

/// Runs a pipeline of 10 sample rows on `package`, changed by `configure`
/// and then by `(from, to)` replacements in its TOML text; checks the run
/// fails with one line naming the package, and returns that line.
fn refused(
    dir: &Path,
    package: &Path,
    configure: impl FnOnce(&mut Pipeline),
    replace: &[(&str, &str)],
) -> String {
    let input = sample_subset(dir, "subset.parquet", 10);
    let out = dir.join("out");
    let mut pipeline = Pipeline::new(&input, &out);
    pipeline.model = package.to_path_buf();
    configure(&mut pipeline);
    let mut text = pipeline.toml();
    for (from, to) in replace {
        assert!(text.contains(from), "{from} is not in {text}");
        text = text.replace(from, to);
    }
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).unwrap();
    let run = run_file(&file, &[], &out);
    let line = expect_one_line_error(&run);
    assert!(
        line.contains(&package.display().to_string()),
        "the error does not name the file: {line}"
    );
    assert!(
        !out.join("_SUCCESS").exists(),
        "a refused model still wrote output"
    );
    line
}

const BF16: &[(&str, &str)] = &[("dtype = \"f32\"", "dtype = \"bf16\"")];

#[test]
fn truncated_package_is_one_line_naming_the_file() {
    let dir = tmp();
    let bytes = std::fs::read(package()).unwrap();
    let truncated = dir.path().join("truncated.pt2");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let line = refused(dir.path(), &truncated, |_| {}, &[]);
    assert!(
        line.contains("neither a TorchScript module nor an AOTInductor package"),
        "{line}"
    );
    assert!(line.contains("failed finding central directory"), "{line}");
}

/// A CUDA package cannot be built here (no GPU), so this one is the CPU
/// package with its metadata record saying `cuda`. That record is what a
/// real CUDA package differs by where segpredict looks: the device check
/// reads the metadata before the compiled code is opened, as it must (a
/// CUDA package's code cannot even be loaded on a CPU-only machine).
#[test]
fn cuda_package_on_a_cpu_run_is_one_line_naming_both_devices() {
    let dir = tmp();
    let cuda = dir.path().join("cuda.pt2");
    fixture(
        "aoti-metadata",
        &package(),
        &cuda,
        &["--set", "AOTI_DEVICE_KEY=cuda"],
    );
    let line = refused(dir.path(), &cuda, |_| {}, &[]);
    assert!(
        line.contains("compiled for cuda, but the run is on cpu"),
        "{line}"
    );
}

/// The package takes (segments, segment_counts, tags, tag_counts); a
/// pipeline without the tags extra gives it two inputs. The start-up
/// forward pass finds it before any row is read.
#[test]
fn package_given_the_wrong_number_of_inputs_is_one_line_with_the_counts() {
    let dir = tmp();
    let line = refused(dir.path(), &package(), |p| p.extras.clear(), &[]);
    assert!(
        line.contains("does not take this pipeline's inputs"),
        "{line}"
    );
    assert!(
        line.contains("expected inputs vector size to be 4, but got 2"),
        "{line}"
    );
}

/// Without the dtype segpredict records, the dtype comes from the pipeline
/// and the start-up forward pass checks it: the package's own input checks
/// name the input.
#[test]
fn package_given_the_wrong_dtype_is_one_line_naming_the_input() {
    let dir = tmp();
    let unrecorded = dir.path().join("unrecorded-dtype.pt2");
    fixture(
        "aoti-metadata",
        &package(),
        &unrecorded,
        &["--set", "segpredict.dtype="],
    );
    let line = refused(dir.path(), &unrecorded, |_| {}, BF16);
    assert!(line.contains("input_handles[0]: unmatched dtype"), "{line}");
}

#[test]
fn torchscript_only_settings_are_refused_for_a_package() {
    let dir = tmp();
    let line = refused(
        dir.path(),
        &package(),
        |p| p.model_extra.push("channels_last = true".into()),
        &[],
    );
    assert!(line.contains("`channels_last = true`"), "{line}");
    let dir = tmp();
    let line = refused(dir.path(), &package(), |_| {}, BF16);
    assert!(line.contains("the package takes f32"), "{line}");
}

/// Every dynamic size at its smallest: the out-of-memory recovery (an
/// injected fault) splits batches down to lone rows, which the package must
/// run like any batch. (AOTInductor's own input checks would refuse one row:
/// segpredict turns them on only for the start-up check.)
#[test]
fn package_runs_batches_of_one_row() {
    const LIMIT: usize = 100;
    let dir = tmp();
    let input_path = sample_subset(dir.path(), "subset.parquet", 40);
    let input = read_input(&input_path);
    let mut pipeline = Pipeline::new(&input_path, dir.path().join("out"));
    pipeline.model = package();
    pipeline
        .model_extra
        .push(format!("fault_oom_above_segments = {LIMIT}"));
    let run = pipeline.run(&[]);
    let out = &run.out_dir;
    let output = read_output(out);
    let rejects = match out.join(REJECTS_FILE).is_file() {
        true => read_rejects(out),
        false => Vec::new(),
    };
    run.expect_code(if rejects.is_empty() { 0 } else { 3 });
    assert_each_id_once(input.iter().map(|r| r.id.as_str()), &output, &rejects);
    for reject in &rejects {
        let row = &input[reject.source_row as usize];
        assert_eq!(reject.kind, "oom_single_row", "{reject:?}");
        assert!(row.n_segments.unwrap() > LIMIT, "{reject:?}");
    }
    assert_same_predictions_as_baseline(&output);
    let report = read_report(out);
    let one_row_batches = read_batch_records(out)
        .iter()
        .filter(|b| b["rows"] == 1)
        .count();
    assert!(one_row_batches > 0, "no batch of one row ran: {report}");
}

/// `format` set in the pipeline must agree with the file; `auto` (the
/// default, used by every other test here) tells them apart.
#[test]
fn format_contradicting_the_file_is_one_line_naming_both() {
    let dir = tmp();
    let line = refused(
        dir.path(),
        &model(),
        |p| p.model_extra.push("format = \"aoti\"".into()),
        &[],
    );
    assert!(
        line.contains("`format = \"aoti\"` but the file is a TorchScript module"),
        "{line}"
    );
    let dir = tmp();
    let line = refused(
        dir.path(),
        &package(),
        |p| p.model_extra.push("format = \"torchscript\"".into()),
        &[],
    );
    assert!(
        line.contains("`format = \"torchscript\"` but the file is an AOTInductor package"),
        "{line}"
    );
}

/// A copy of the committed package whose metadata records
/// `segpredict.max_segments = bound` (as tools/make_models.py records it for
/// CUDA packages; the CPU package itself has no bound).
fn package_bounded_at(dir: &Path, bound: usize) -> PathBuf {
    let source = std::fs::File::open(package()).unwrap();
    let mut archive = zip::ZipArchive::new(source).unwrap();
    let path = dir.join("bounded.pt2");
    let mut out = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let stored =
        zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut bounded = 0;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).unwrap();
        let name = entry.name().to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        if name.ends_with("wrapper_metadata.json") {
            let mut metadata: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            metadata["segpredict.max_segments"] = bound.to_string().into();
            bytes = serde_json::to_vec(&metadata).unwrap();
            bounded += 1;
        }
        out.start_file(name, stored).unwrap();
        std::io::Write::write_all(&mut out, &bytes).unwrap();
    }
    out.finish().unwrap();
    assert_eq!(bounded, 1, "the package has one wrapper metadata file");
    path
}

/// A package's recorded bound is kept: a budget over it is refused at
/// start-up, naming the file and the bound; under it, a row holding more
/// segments than the bound is rejected with that reason, and every other
/// row is predicted as the TorchScript model predicts it.
#[test]
fn a_packages_segment_bound_is_kept() {
    const BOUND: usize = 1024;
    let dir = tmp();
    let bounded = package_bounded_at(dir.path(), BOUND);
    let line = refused(dir.path(), &bounded, |p| p.max_segments = 2 * BOUND, &[]);
    assert!(
        line.contains("at most 1024 segments") && line.contains("is 2048"),
        "{line}"
    );

    let input = read_input(&sample());
    let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
    pipeline.model = bounded;
    pipeline.max_segments = BOUND;
    let run = run_with_rejects(&pipeline, &input);
    let over: Vec<_> = input
        .iter()
        .filter(|r| r.n_segments.unwrap() > BOUND)
        .collect();
    assert!(
        !over.is_empty(),
        "the sample has rows over {BOUND} segments"
    );
    assert_eq!(run.rejects.len(), over.len(), "{:?}", run.rejects);
    for reject in &run.rejects {
        let row = &input[reject.source_row as usize];
        assert!(row.n_segments.unwrap() > BOUND, "{reject:?}");
        assert_eq!(reject.kind, "too_many_segments", "{reject:?}");
        assert!(
            reject.reason.contains("segpredict.max_segments"),
            "{reject:?}"
        );
    }
    assert_same_predictions_as_baseline(&run.output);
}

/// `models/digits-small.classes.pt2`: digits-small's dynamic package and a
/// model per size class, 256 and 1024 segments (`tools/make_models.py --aoti
/// --only digits-small --size-classes 256,1024`).
fn bundle() -> PathBuf {
    repo().join("models/digits-small.classes.pt2")
}

/// A copy of the bundle without its dynamic model (`--no-dynamic`).
fn bundle_without_dynamic(dir: &Path) -> PathBuf {
    let source = std::fs::File::open(bundle()).unwrap();
    let mut archive = zip::ZipArchive::new(source).unwrap();
    let path = dir.join("no-dynamic.classes.pt2");
    let mut out = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let stored =
        zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut left_out = 0;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).unwrap();
        let name = entry.name().to_string();
        if name.contains("/data/aotinductor/model/") {
            left_out += 1;
            continue;
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        out.start_file(name, stored).unwrap();
        std::io::Write::write_all(&mut out, &bytes).unwrap();
    }
    out.finish().unwrap();
    assert!(left_out > 0, "the bundle has a dynamic model");
    path
}

/// The sample through a bundle: budget 1024, padded, `classes`.
fn bundle_pipeline(model: PathBuf, out: PathBuf, classes: &str) -> Pipeline {
    let mut pipeline = Pipeline::new(sample(), out);
    pipeline.model = model;
    pipeline.max_segments = 1024;
    pipeline
        .bucketing_extra
        .push(format!("size_classes = {classes}"));
    pipeline
}

/// The report's `model_paths`, as (segments, ran) -> batches.
fn model_paths(out: &Path) -> std::collections::BTreeMap<(u64, String), u64> {
    let report = read_report(out);
    let paths = report["model_paths"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    paths
        .iter()
        .map(|p| {
            let key = (
                p["segments"].as_u64().unwrap(),
                p["ran"].as_str().unwrap().to_string(),
            );
            (key, p["batches"].as_u64().unwrap())
        })
        .collect()
}

/// Each padded batch runs on its size class's own model (256 and 1024), a
/// class the bundle has no model for (512) and the rows over the budget run
/// on its dynamic model; every label and score is the TorchScript model's.
/// (16 rows a batch spreads the batches over the classes.)
#[test]
fn size_class_packages_predict_the_sample_each_class_on_its_own_model() {
    let dir = tmp();
    let mut pipeline = bundle_pipeline(bundle(), dir.path().join("out"), "[256, 512, 1024]");
    pipeline.max_rows = 16;
    let input = read_input(&sample());
    let output = run_clean(&pipeline, &ids_of(&input));
    assert_same_predictions_as_baseline(&output);
    let paths = model_paths(&pipeline.output);
    let ran = |segments: u64| -> Vec<&str> {
        let of = paths.iter().filter(|((s, _), _)| *s == segments);
        of.map(|((_, r), _)| r.as_str()).collect()
    };
    assert_eq!(ran(256), ["static"], "{paths:?}");
    assert_eq!(ran(512), ["dynamic"], "{paths:?}");
    assert_eq!(ran(1024), ["static"], "{paths:?}");
    let over: Vec<_> = paths.keys().filter(|(s, _)| *s > 1024).collect();
    assert!(
        !over.is_empty(),
        "the sample has rows over the budget: {paths:?}"
    );
    assert!(over.iter().all(|(_, r)| r == "dynamic"), "{paths:?}");
    let batches: u64 = paths.values().sum();
    assert_eq!(
        batches,
        report_u64(&read_report(&pipeline.output), "batches")
    );
}

/// Without its dynamic model, a bundle refuses at start-up a run whose size
/// classes it lacks, or whose batches are not padded, naming the file and
/// the classes; with its own classes it runs, rejecting the rows over its
/// largest class (its bound) and padding a batch of a class lowered by an
/// out-of-memory up to a class it has.
#[test]
fn a_bundle_without_its_dynamic_model_takes_only_its_classes() {
    let dir = tmp();
    let bundle = bundle_without_dynamic(dir.path());
    let classes = |p: &mut Pipeline| {
        p.max_segments = 1024;
        p.bucketing_extra
            .push("size_classes = [256, 512, 1024]".into());
    };
    let line = refused(dir.path(), &bundle, classes, &[]);
    assert!(
        line.contains("size classes [256, 1024] and no dynamic model")
            && line.contains("also come in [512]")
            && line.contains("--size-classes 256,512,1024"),
        "{line}"
    );
    let dir = tmp();
    let unpadded = |p: &mut Pipeline| p.max_segments = 1024;
    let padding_off = &[("pad_to_size_classes = true", "pad_to_size_classes = false")];
    let line = refused(dir.path(), &bundle, unpadded, padding_off);
    assert!(line.contains("every segment total"), "{line}");

    let input = read_input(&sample());
    let mut pipeline = bundle_pipeline(bundle.clone(), dir.path().join("out"), "[256, 1024]");
    // Every 1024-segment batch fails as if out of memory: it is split in
    // unpadded halves and the budget drops below 1024 to a class the bundle
    // lacks; all of those are padded up to 1024.
    pipeline
        .model_extra
        .push("fault_oom_above_segments = 1023".into());
    let run = run_with_rejects(&pipeline, &input);
    for reject in &run.rejects {
        let row = &input[reject.source_row as usize];
        assert!(row.n_segments.unwrap() > 512, "{reject:?}");
        assert!(
            ["too_many_segments", "oom_single_row"].contains(&reject.kind.as_str()),
            "{reject:?}"
        );
    }
    assert!(run.rejects.iter().any(|r| r.kind == "too_many_segments"));
    assert_same_predictions_as_baseline(&run.output);
    let paths = model_paths(&run.out);
    // The halves of a split batch, and the batches under the lowered budget.
    assert!(
        paths
            .keys()
            .any(|(s, r)| *s < 1024 && *s != 256 && r == "static, padded up to 1024"),
        "{paths:?}"
    );
    assert!(
        paths.keys().all(|(_, r)| r.starts_with("static")),
        "{paths:?}"
    );
}
