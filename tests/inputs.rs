//! Reader compatibility: the sample as other writers and layouts leave it
//! predicts exactly as the original; several files; empty files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::util::*;

/// Rows of the sample used where a test does not need all of it.
const SUBSET: usize = 300;

/// Makes `variant` of the sample's first `rows` rows (all with None) with
/// fixtures.py into a fresh directory, runs it, and checks every id is
/// predicted once, as the run on the original file predicts it.
fn predicts_like_original(variant: &str, rows: Option<usize>, extra: &[&str]) {
    let dir = tmp();
    let input_path = dir.path().join(format!("{variant}.parquet"));
    let rows_arg = rows.map(|n| n.to_string());
    let mut args: Vec<&str> = extra.to_vec();
    if let Some(n) = &rows_arg {
        args.extend(["--rows", n]);
    }
    fixture(variant, &sample(), &input_path, &args);
    check_predicts_like_original(&input_path, &dir.path().join("out"), rows);
}

fn check_predicts_like_original(input_path: &Path, out: &Path, rows: Option<usize>) -> Vec<OutRow> {
    check_predicts_like_original_with(input_path, out, rows, |_| {})
}

/// As [`check_predicts_like_original`], with the pipeline adjusted by `configure`.
fn check_predicts_like_original_with(
    input_path: &Path,
    out: &Path,
    rows: Option<usize>,
    configure: impl FnOnce(&mut Pipeline),
) -> Vec<OutRow> {
    let input = read_input_any(input_path);
    let expected_rows = rows.unwrap_or(SAMPLE_ROWS);
    assert_eq!(
        input.len(),
        expected_rows,
        "rows in {}",
        input_path.display()
    );
    let sample_ids: Vec<String> = (0..expected_rows).map(|i| format!("item-{i:05}")).collect();
    let mut ids = input.clone();
    ids.sort();
    assert_eq!(ids, sample_ids, "the variant holds other ids");
    let mut pipeline = Pipeline::new(input_path, out);
    configure(&mut pipeline);
    let output = run_clean(&pipeline, &input);
    assert_same_predictions_as_baseline(&output);
    output
}

/// The ids of a file, a directory of files, or a glob, via the same reader the tests trust.
fn read_input_any(path: &Path) -> Vec<String> {
    let text = path.display().to_string();
    let files: Vec<PathBuf> = if text.contains('*') {
        let dir = path.parent().unwrap();
        let prefix = file_name(path).split('*').next().unwrap().to_string();
        let mut f: Vec<PathBuf> = list_dir(dir)
            .into_iter()
            .filter(|p| file_name(p).starts_with(&prefix) && file_name(p).ends_with(".parquet"))
            .collect();
        f.sort();
        f
    } else if path.is_dir() {
        let mut f: Vec<PathBuf> = list_dir(path)
            .into_iter()
            .filter(|p| file_name(p).ends_with(".parquet"))
            .collect();
        f.sort();
        f
    } else {
        vec![path.to_path_buf()]
    };
    files
        .iter()
        .flat_map(|f| read_input(f).into_iter().map(|r| r.id))
        .collect()
}

fn row_groups(path: &Path) -> usize {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader.metadata().num_row_groups()
}

fn first_codec(path: &Path) -> parquet::basic::Compression {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    reader.metadata().row_group(0).column(0).compression()
}

#[test]
fn reads_pyarrow_file_with_50_row_groups_and_dictionary_encoding() {
    let dir = tmp();
    let input_path = dir.path().join("rowgroups.parquet");
    fixture(
        "rowgroups",
        &sample(),
        &input_path,
        &["--row-group-size", "40"],
    );
    assert_eq!(row_groups(&input_path), 50);
    check_predicts_like_original(&input_path, &dir.path().join("out"), None);
}

#[test]
fn reads_dictionary_typed_id_column() {
    predicts_like_original("dict-id", Some(SUBSET), &[]);
}

#[test]
fn reads_file_written_by_duckdb() {
    predicts_like_original("duckdb", Some(SUBSET), &[]);
}

#[test]
fn reads_file_written_by_polars() {
    predicts_like_original("polars", Some(SUBSET), &[]);
}

#[test]
fn reads_segments_as_large_list() {
    predicts_like_original("large-list", Some(SUBSET), &[]);
}

#[test]
fn reads_segments_as_list_of_fixed_size_lists_of_u8() {
    predicts_like_original("fixed-list", Some(SUBSET), &[]);
}

#[test]
fn reads_segments_as_list_of_binary() {
    predicts_like_original("binary-list", Some(SUBSET), &[]);
}

/// Segments as `list<fixed_size_list<DTYPE, 64>>` of the pixel values, read
/// with `segments.dtype = PIPELINE_DTYPE`.
fn predicts_like_original_from_float_segments(dtype: &str, pipeline_dtype: &str) {
    let dir = tmp();
    let input_path = dir.path().join(format!("{dtype}-segments.parquet"));
    let rows = SUBSET.to_string();
    fixture(
        "float-list",
        &sample(),
        &input_path,
        &["--rows", &rows, "--dtype", dtype],
    );
    // The fixture really holds float items of that type.
    let batches = read_batches(&input_path).unwrap();
    let segments_type = batches[0].column_by_name("segments").unwrap().data_type();
    let expected_item = match dtype {
        "float16" => arrow::datatypes::DataType::Float16,
        _ => arrow::datatypes::DataType::Float32,
    };
    match segments_type {
        arrow::datatypes::DataType::List(f) => match f.data_type() {
            arrow::datatypes::DataType::FixedSizeList(item, 64) => {
                assert_eq!(item.data_type(), &expected_item, "{segments_type}")
            }
            other => panic!("segments items are {other}"),
        },
        other => panic!("segments column of type {other}"),
    }
    check_predicts_like_original_with(&input_path, &dir.path().join("out"), Some(SUBSET), |p| {
        p.segments_dtype = pipeline_dtype.into()
    });
}

#[test]
fn reads_segments_as_fixed_size_lists_of_f32() {
    predicts_like_original_from_float_segments("float32", "f32");
}

#[test]
fn reads_segments_as_fixed_size_lists_of_f16() {
    predicts_like_original_from_float_segments("float16", "f16");
}

/// The extras a model of `fixtures.py wrapper-model` takes, after the tags.
const VECTOR_AND_SCALAR_EXTRAS: [&str; 4] = [
    r#"{ name = "tags", kind = "ragged" }"#,
    r#"{ name = "vec", kind = "vector", width = 3 }"#,
    r#"{ name = "f", kind = "float" }"#,
    r#"{ name = "i", kind = "int" }"#,
];

/// Writes into `dir` the sample's first `SUBSET` rows with the extra columns
/// `vec`, `f` and `i` (fixtures.py `extras`, with `fixture_args`), and a
/// wrapper model that changes its predictions unless every row gets its own
/// `vec == [i, 1, 2]`, `f == i + 0.5` and `i` = its position, in that order.
/// Returns the input file and a pipeline reading it with that model.
fn extras_case(dir: &Path, fixture_args: &[&str]) -> (PathBuf, Pipeline) {
    let input_path = dir.join("extras.parquet");
    let rows = SUBSET.to_string();
    let mut args = vec!["--rows", rows.as_str()];
    args.extend_from_slice(fixture_args);
    fixture("extras", &sample(), &input_path, &args);
    let model_path = dir.join("wrapper.pt");
    fixture("wrapper-model", &model(), &model_path, &[]);
    let labels_path = dir.join("wrapper.labels.txt");
    std::fs::copy(labels(), &labels_path).expect("copying the labels file");

    let mut pipeline = Pipeline::new(&input_path, dir.join("out"));
    pipeline.model = model_path;
    pipeline.labels = labels_path;
    pipeline.extras = VECTOR_AND_SCALAR_EXTRAS
        .iter()
        .map(|e| e.to_string())
        .collect();
    // Several batches, so rows and their extras are regrouped on the way.
    pipeline.max_segments = 256;
    pipeline.max_rows = 64;
    (input_path, pipeline)
}

#[test]
fn passes_vector_and_scalar_extras_in_declared_order() {
    let dir = tmp();
    let (input_path, pipeline) = extras_case(dir.path(), &[]);
    let ids = ids_of(&read_input(&input_path));
    assert_eq!(ids.len(), SUBSET);
    let output = run_clean(&pipeline, &ids);
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&pipeline.output);
    assert!(
        report_u64(&report, "batches") > 1,
        "one batch only: {report}"
    );
}

#[test]
fn vector_of_wrong_width_is_rejected_with_reason() {
    const SHORT_ROW: usize = 123;
    let dir = tmp();
    let (input_path, pipeline) =
        extras_case(dir.path(), &["--short-vec-row", &SHORT_ROW.to_string()]);
    // The fixture really holds a plain list column with one short row.
    let vec = read_batches(&input_path).unwrap()[0]
        .column_by_name("vec")
        .unwrap()
        .clone();
    assert!(
        matches!(vec.data_type(), arrow::datatypes::DataType::List(_)),
        "vec is {}",
        vec.data_type()
    );
    let input = read_input(&input_path);
    assert_eq!(input.len(), SUBSET);

    let RejectingRun {
        out,
        output,
        rejects,
        ..
    } = run_with_rejects(&pipeline, &input);
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    let reject = &rejects[0];
    assert_eq!(reject.kind, "bad_input_width", "{reject:?}");
    assert_eq!(reject.source_row, SHORT_ROW as i64, "{reject:?}");
    assert_eq!(reject.id.as_deref(), Some(input[SHORT_ROW].id.as_str()));
    assert_eq!(Path::new(&reject.source_file), input_path, "{reject:?}");
    for needle in ["vec", "2", "3"] {
        assert!(reject.reason.contains(needle), "{reject:?}");
    }
    assert_eq!(output.len(), SUBSET - 1);
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "rows_rejected"), 1);
    assert_eq!(report_u64(&report, "rows_out"), (SUBSET - 1) as u64);
}

fn codec_dir(dir: &Path) -> PathBuf {
    let codecs = dir.join("codecs");
    fixture(
        "codecs",
        &sample(),
        &codecs,
        &["--rows", &SUBSET.to_string()],
    );
    use parquet::basic::Compression as C;
    let mut files = list_dir(&codecs);
    files.sort();
    let found: Vec<String> = files
        .iter()
        .map(|f| match first_codec(f) {
            C::SNAPPY => "snappy".to_string(),
            C::ZSTD(_) => "zstd".to_string(),
            C::GZIP(_) => "gzip".to_string(),
            C::UNCOMPRESSED => "none".to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(found, ["snappy", "zstd", "gzip", "none"]);
    codecs
}

#[test]
fn reads_directory_of_files_with_different_codecs() {
    let dir = tmp();
    let codecs = codec_dir(dir.path());
    let output = check_predicts_like_original(&codecs, &dir.path().join("out"), Some(SUBSET));
    let files: std::collections::BTreeSet<String> = output
        .iter()
        .map(|r| file_name(Path::new(&r.source_file)))
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
}

#[test]
fn reads_files_matched_by_glob() {
    let dir = tmp();
    let codecs = codec_dir(dir.path());
    // A file the glob must not pick up.
    std::fs::write(codecs.join("notes.txt"), "not parquet").unwrap();
    let glob = codecs.join("part-*.parquet");
    check_predicts_like_original(&glob, &dir.path().join("out"), Some(SUBSET));
}

#[test]
fn a_recursive_glob_never_reads_underscore_or_dot_paths() {
    let dir = tmp();
    let root = dir.path().join("nightly");
    for folder in ["day=1", "_progress", "_rejects", "_segpredict", ".staging"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    let good = sample_subset(&root.join("day=1"), "part-00000.parquet", 50);
    // What segpredict, Spark and uploaders leave beside data, truncated
    // here so that reading any of them would fail the run.
    for marker in [
        "_batches.parquet",
        "_rejects/rejects.parquet",
        "_segpredict/batches.parquet",
        "_progress/part-00000.parquet",
        ".staging/part-00001.parquet",
        "day=1/_tmp.parquet",
    ] {
        fixture(
            "truncated",
            &sample(),
            &root.join(marker),
            &["--rows", "50"],
        );
    }
    let pipeline = Pipeline::new(root.join("**/*.parquet"), dir.path().join("out"));
    let output = run_clean(&pipeline, &ids_of(&read_input(&good)));
    assert_eq!(output.len(), 50);
}

#[test]
fn null_tags_are_read_as_empty_tag_lists() {
    let dir = tmp();
    let rows = SUBSET.to_string();
    let nulls = dir.path().join("null-tags.parquet");
    let empties = dir.path().join("empty-tags.parquet");
    fixture(
        "tags",
        &sample(),
        &nulls,
        &["--rows", &rows, "--every", "7"],
    );
    fixture(
        "tags",
        &sample(),
        &empties,
        &["--rows", &rows, "--every", "7", "--empty"],
    );
    // The fixture really holds null lists.
    let null_count: usize = read_batches(&nulls)
        .unwrap()
        .iter()
        .map(|b| b.column_by_name("tags").unwrap().null_count())
        .sum();
    assert_eq!(null_count, SUBSET.div_ceil(7));

    let ids = read_input_any(&nulls);
    let with_nulls = run_clean(&Pipeline::new(&nulls, dir.path().join("out-nulls")), &ids);
    let with_empties = run_clean(
        &Pipeline::new(&empties, dir.path().join("out-empties")),
        &ids,
    );
    let empties_by_id = by_id(&with_empties);
    for row in &with_nulls {
        let other = empties_by_id[row.id.as_str()];
        assert_eq!(row.label_id, other.label_id, "{row:?} vs {other:?}");
        assert!(
            (row.score - other.score).abs() <= 1e-4,
            "{row:?} vs {other:?}"
        );
    }
    // Rows whose tags were kept predict as in the original.
    let kept: Vec<OutRow> = with_nulls
        .into_iter()
        .filter(|r| r.source_row % 7 != 0)
        .collect();
    assert_eq!(kept.len(), SUBSET - SUBSET.div_ceil(7));
    assert_same_predictions_as_baseline(&kept);
}

#[test]
fn several_files_give_each_id_once_with_its_file_and_row() {
    let dir = tmp();
    let inputs = dir.path().join("inputs");
    fixture(
        "split",
        &sample(),
        &inputs,
        &["--rows", &SUBSET.to_string(), "--sizes", "120,80,100"],
    );
    let mut files = list_dir(&inputs);
    files.sort();
    assert_eq!(files.len(), 3);
    let mut origin: HashMap<String, (String, i64)> = HashMap::new();
    let mut ids = Vec::new();
    for file in &files {
        for (row, r) in read_input(file).into_iter().enumerate() {
            ids.push(r.id.clone());
            origin.insert(r.id, (file_name(file), row as i64));
        }
    }
    assert_eq!(ids.len(), SUBSET);
    let output = run_clean(&Pipeline::new(&inputs, dir.path().join("out")), &ids);
    for row in &output {
        let (file, source_row) = &origin[&row.id];
        assert_eq!(&file_name(Path::new(&row.source_file)), file, "{row:?}");
        assert_eq!(
            Path::new(&row.source_file).parent(),
            Some(inputs.as_path()),
            "{row:?}"
        );
        assert_eq!(row.source_row, *source_row, "{row:?}");
    }
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&dir.path().join("out"));
    assert_eq!(report_u64(&report, "input_files"), 3);
    assert_eq!(report_u64(&report, "rows_in"), SUBSET as u64);
}

#[test]
fn zero_row_file_completes_with_no_output_rows() {
    let dir = tmp();
    let empty = dir.path().join("empty.parquet");
    fixture("empty", &sample(), &empty, &[]);
    let out = dir.path().join("out");
    let run = Pipeline::new(&empty, &out).run(&[]);
    run.expect_code(0);
    assert!(out.join("_SUCCESS").is_file());
    assert!(read_output(&out).is_empty());
    assert!(read_rejects(&out).is_empty());
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "rows_in"), 0);
    assert_eq!(report_u64(&report, "rows_out"), 0);
}

#[test]
fn zero_row_file_beside_a_normal_file() {
    let dir = tmp();
    let inputs = dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    fixture("empty", &sample(), &inputs.join("a-empty.parquet"), &[]);
    let normal = sample_subset(&inputs, "b-rows.parquet", 50);
    let ids = ids_of(&read_input(&normal));
    let output = run_clean(&Pipeline::new(&inputs, dir.path().join("out")), &ids);
    assert_eq!(output.len(), 50);
    for row in &output {
        assert_eq!(file_name(Path::new(&row.source_file)), "b-rows.parquet");
    }
    assert_same_predictions_as_baseline(&output);
    let report = read_report(&dir.path().join("out"));
    assert_eq!(report_u64(&report, "input_files"), 2);
}
