//! Hive-partitioned input (`events/dt=2026-12-05/part-0.parquet`), on disk
//! and in a bucket (moto): the folder is read recursively, `_`- and
//! `.`-prefixed files and folders left out, and the partition key is a
//! column `[writers] carry` keeps, as a string.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;

use crate::carry::{carry_line, one_batch};
use crate::util::*;

/// The sample split by `tests/fixtures.py hive` into `dir/events/`.
fn events(dir: &Path) -> PathBuf {
    let out = dir.join("events");
    fixture("hive", &sample(), &out, &["--row-group-size", "100"]);
    out
}

/// Every output row's `dt` is the partition its source file lies in, a
/// string; no row came from a skipped file; every sample id is there once
/// with the unpartitioned run's label.
fn assert_partitioned_output(out: &Path) {
    let rows = read_output(out);
    assert_eq!(rows.len(), SAMPLE_ROWS);
    assert_same_predictions_as_baseline(&rows);
    let ids: std::collections::HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), SAMPLE_ROWS);
    let batch = one_batch(&part_files(out));
    let dt = batch.column_by_name("dt").expect("a dt column");
    assert_eq!(dt.data_type(), &DataType::Utf8);
    let dt = dt.as_string::<i32>();
    let files = arrow::compute::cast(
        batch.column_by_name("source_file").unwrap(),
        &DataType::Utf8,
    )
    .unwrap();
    let files = files.as_string::<i32>();
    let mut per_dt: HashMap<&str, usize> = HashMap::new();
    for i in 0..batch.num_rows() {
        let (file, value) = (files.value(i), dt.value(i));
        assert!(
            file.contains(&format!("/dt={value}/")),
            "row {i}: dt {value} from {file}"
        );
        assert!(!file.contains("/_") && !file.contains("/."), "read {file}");
        *per_dt.entry(value).or_default() += 1;
    }
    assert_eq!(
        per_dt,
        HashMap::from([("2026-12-01", 900), ("2026-12-02", 1100)])
    );
}

#[test]
fn a_hive_partitioned_folder_gives_the_samples_labels_with_dt_carried() {
    let dir = tmp();
    let input = events(dir.path());
    let mut pipeline = Pipeline::new(&input, dir.path().join("out"));
    pipeline.writers_extra.push(carry_line(&["dt"]));
    let run = pipeline.run(&[]);
    run.expect_code(0);
    assert_partitioned_output(&run.out_dir);
    // A glob below the root finds the partitions the same way.
    let mut glob = Pipeline::new(input.join("*/part-*.parquet"), dir.path().join("glob"));
    glob.writers_extra.push(carry_line(&["dt"]));
    let run = glob.run(&[]);
    run.expect_code(0);
    assert_partitioned_output(&run.out_dir);
}

#[test]
fn a_carried_partition_key_some_file_lacks_is_refused_naming_the_file() {
    let dir = tmp();
    let input = events(dir.path());
    sample_subset(&input, "loose.parquet", 10);
    let mut pipeline = Pipeline::new(&input, dir.path().join("out"));
    pipeline.writers_extra.push(carry_line(&["dt"]));
    let run = pipeline.run(&[]);
    run.expect_code(2);
    let line = expect_one_line_error(&run);
    assert!(
        line.contains("loose.parquet") && line.contains("column `dt`"),
        "{line}"
    );
}

#[test]
fn a_hive_partitioned_prefix_in_s3_gives_the_samples_labels_with_dt_carried() {
    let bucket = Bucket::new(S3Server::shared(), "hive");
    let dir = tmp();
    let local = events(dir.path());
    let mut files = Vec::new();
    collect(&local, &mut files);
    for file in &files {
        let key = file.strip_prefix(&local).unwrap().display().to_string();
        bucket.put(&format!("in/events/{key}"), &std::fs::read(file).unwrap());
    }
    let mut pipeline = Pipeline::new(bucket.url("in/events/"), bucket.url("out/"));
    pipeline.writers_extra.push(carry_line(&["dt"]));
    let file = pipeline.write(&dir.path().join("s3.toml"));
    bucket
        .run(bucket.endpoint(), &file, &[], dir.path())
        .expect_code(0);
    let out = bucket.download("out/", &dir.path().join("s3"));
    assert_partitioned_output(&out);
}

/// Every file under `dir`, hidden ones too (the bucket gets them all).
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in list_dir(dir) {
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
