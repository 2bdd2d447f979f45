//! `[writers] carry`: input columns kept beside each prediction, typed as
//! read, each equal to its own input row after bucketing has reordered the
//! rows, sharded and resumed after a kill too; a carried column that is
//! not there, or that the output has already, is refused before the run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, UInt64Array};
use arrow::compute::{concat_batches, take};
use arrow::record_batch::RecordBatch;

use crate::util::*;

/// The carry fixture's columns (tests/fixtures.py `carried_columns`):
/// string, float64, timestamp, list of int32, a mostly-null string.
pub(crate) const CARRIED: [&str; 5] = ["city", "weight", "seen_at", "codes", "note"];

/// `carry = [...]` as a `[writers]` line.
pub(crate) fn carry_line(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| toml_string(n)).collect();
    format!("carry = [{}]", quoted.join(", "))
}

/// The sample with the carried columns, in row groups of 40.
fn carry_input(dir: &Path) -> PathBuf {
    let input = dir.join("carry.parquet");
    fixture("carry", &sample(), &input, &["--row-group-size", "40"]);
    input
}

/// A Parquet file (or every committed part of an output) as one batch.
pub(crate) fn one_batch(files: &[PathBuf]) -> RecordBatch {
    let batches: Vec<RecordBatch> = files
        .iter()
        .flat_map(|f| read_batches(f).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn column(batch: &RecordBatch, name: &str) -> ArrayRef {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column `{name}` in {:?}", batch.schema()))
        .clone()
}

/// Asserts the output under `out` has each of `names` with the input's
/// type, and in every row the value of the input row its `source_row`
/// names; returns the output's `source_row`s in part order.
pub(crate) fn assert_carried(out: &Path, input: &Path, names: &[&str]) -> Vec<u64> {
    let input = one_batch(&[input.to_path_buf()]);
    let output = one_batch(&part_files(out));
    let rows: Vec<u64> = arrow::compute::cast(
        &column(&output, "source_row"),
        &arrow::datatypes::DataType::UInt64,
    )
    .unwrap()
    .as_any()
    .downcast_ref::<UInt64Array>()
    .unwrap()
    .values()
    .to_vec();
    let at = UInt64Array::from(rows.clone());
    for name in names {
        let (want, got) = (column(&input, name), column(&output, name));
        assert_eq!(got.data_type(), want.data_type(), "column `{name}`'s type");
        let want = take(want.as_ref(), &at, None).unwrap();
        let differ =
            (0..got.len()).find(|&i| want.slice(i, 1).as_ref() != got.slice(i, 1).as_ref());
        assert!(
            differ.is_none(),
            "`{name}` of output row {:?} (input row {:?}) differs from its input row",
            differ,
            differ.map(|i| rows[i])
        );
        assert!(got.null_count() > 0, "`{name}` has nulls in the input");
    }
    rows
}

fn reordered(rows: &[u64]) -> bool {
    rows.windows(2).any(|w| w[0] > w[1])
}

/// A pipeline carrying [`CARRIED`] into `dir/out` in small batches, so
/// rows leave their buckets far from file order.
fn carrying_in_small_batches(input: &Path, dir: &Path) -> Pipeline {
    let mut pipeline = Pipeline::new(input, dir.join("out"));
    pipeline.max_segments = 64;
    pipeline.max_rows = 16;
    pipeline.writers_extra.push(carry_line(&CARRIED));
    pipeline
}

#[test]
fn carried_columns_equal_their_input_rows_after_bucketing_reorders_them() {
    let dir = tmp();
    let input = carry_input(dir.path());
    let run = carrying_in_small_batches(&input, dir.path()).run(&[]);
    run.expect_code(0);
    let rows = assert_carried(&run.out_dir, &input, &CARRIED);
    assert_eq!(rows.len(), SAMPLE_ROWS);
    assert!(reordered(&rows), "the test needs rows out of file order");
    assert_same_predictions_as_baseline(&read_output(&run.out_dir));
    // The output's own columns come first, the carried ones in carry's order.
    let names: Vec<String> = one_batch(&part_files(&run.out_dir))
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names[names.len() - CARRIED.len()..], CARRIED);
}

#[test]
fn carry_all_keeps_every_column_that_is_no_model_input() {
    let dir = tmp();
    let input = carry_input(dir.path());
    let mut pipeline = Pipeline::new(&input, dir.path().join("out"));
    pipeline.writers_extra.push("carry = \"all\"".into());
    let run = pipeline.run(&[]);
    run.expect_code(0);
    let output = one_batch(&part_files(&run.out_dir));
    let names: Vec<&str> = output
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>();
    let mut all = vec!["true_label"];
    all.extend(CARRIED);
    assert_eq!(names[names.len() - all.len()..], all, "{names:?}");
    assert!(!names.contains(&"segments") && !names.contains(&"tags"));
    assert_carried(&run.out_dir, &input, &CARRIED);
}

#[test]
fn carried_columns_survive_local_shards() {
    let dir = tmp();
    let input = carry_input(dir.path());
    let run = carrying_in_small_batches(&input, dir.path()).run(&["--local-shards", "2"]);
    run.expect_code(0);
    let parts: Vec<String> = part_files(&run.out_dir)
        .iter()
        .map(|p| file_name(p))
        .collect();
    assert!(parts.iter().any(|p| p.contains("s001of002")), "{parts:?}");
    let rows = assert_carried(&run.out_dir, &input, &CARRIED);
    assert_eq!(rows.len(), SAMPLE_ROWS);
}

#[test]
fn carried_columns_survive_a_kill_and_the_resume() {
    let dir = tmp();
    let input = carry_input(dir.path());
    let out = dir.path().join("out");
    let mut pipeline = slowed(&input, &out);
    pipeline.writers_extra.push(carry_line(&CARRIED));
    let file = pipeline.write(&dir.path().join("slowed.toml"));
    let mut child = spawn(&file, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed = kill_when(&mut child, deadline, || has_part(&out, "part-"));
    assert!(killed, "the run finished before it could be killed");
    let rerun = run_file(&file, &[], &out);
    rerun.expect_code(0);
    assert!(report_u64(&read_report(&out), "rows_resumed") > 0);
    let rows = assert_carried(&out, &input, &CARRIED);
    assert_eq!(rows.len(), SAMPLE_ROWS);
    assert_same_predictions_as_baseline(&read_output(&out));
}

#[test]
fn a_carried_column_missing_or_taken_by_the_output_is_refused_naming_it_and_the_file() {
    let dir = tmp();
    let input = carry_input(dir.path());
    for (name, why) in [
        ("nope", "no column of this file"),
        ("label", "the output has already"),
    ] {
        let mut pipeline = Pipeline::new(&input, dir.path().join(format!("out-{name}")));
        pipeline.writers_extra.push(carry_line(&["city", name]));
        let run = pipeline.run(&[]);
        run.expect_code(2);
        let line = expect_one_line_error(&run);
        for part in [&format!("column `{name}`"), why, "carry.parquet"] {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
        assert!(part_files(&run.out_dir).is_empty(), "nothing ran");
    }
}
