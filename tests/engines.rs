//! The output as the next job reads it (issue 36): `out/*.parquet` is one
//! table in DuckDB and Polars, `out/` one dataset in pyarrow and pandas,
//! and the run's other files stay at their documented paths.

use std::collections::HashMap;
use std::process::Command;

use crate::util::*;

/// What `tests/engines.py` saw of an output directory.
fn engines_read(out: &std::path::Path) -> serde_json::Value {
    let script = repo().join("tests/engines.py");
    let output = Command::new(python()).arg(&script).arg(out).output();
    let output = output.expect("running tests/engines.py");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "tests/engines.py failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// The labels of the predictions, counted.
fn label_counts(rows: &[OutRow]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for row in rows {
        *counts.entry(row.label.clone()).or_default() += 1;
    }
    counts
}

#[test]
fn every_engine_reads_the_parts_as_one_table_and_the_run_files_stay_where_documented() {
    let dir = tmp();
    let input = dir.path().join("in.parquet");
    fixture("many-rejects", &sample(), &input, &["--extra", "7"]);
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(&input, &out);
    // Several part files, so "one table" means something.
    pipeline.rows_per_file = Some(300);
    let run = pipeline.run(&["--max-reject-fraction", "0.01"]);
    assert_eq!(run.code, 0, "{}", run.describe());
    let report = read_report(&out);
    let rows_out = report_u64(&report, "rows_out");
    assert_eq!(rows_out, SAMPLE_ROWS as u64);
    assert!(part_files(&out).len() >= 4, "{:?}", part_files(&out));

    let seen = engines_read(&out);
    let expected: HashMap<String, u64> = label_counts(&read_output(&out));
    for engine in ["duckdb", "polars"] {
        assert_eq!(seen[engine]["rows"], rows_out, "{engine}: {seen}");
        let labels: HashMap<String, u64> =
            serde_json::from_value(seen[engine]["labels"].clone()).unwrap();
        assert_eq!(labels, expected, "{engine}");
    }
    for engine in ["pyarrow_dataset", "pandas"] {
        assert_eq!(seen[engine]["rows"], rows_out, "{engine}: {seen}");
        let columns = seen[engine]["columns"].as_array().unwrap();
        assert!(columns.iter().any(|c| c == "label"), "{engine}: {seen}");
    }
    // The rejects and the run's records, one documented path each.
    assert_eq!(seen["rejects_rows"], report_u64(&report, "rows_rejected"));
    assert_eq!(seen["rejects_rows"], 7);
    assert_eq!(seen["batches_rows"], report_u64(&report, "batches"));
    assert_eq!(read_rejects(&out).len(), 7);
    assert_eq!(report["batches_file"], BATCHES_FILE);
}

/// `[writers] top_k`: each row's most probable classes, most probable
/// first, the first being its `label` and `score`; the labels the same as
/// a run without it.
#[test]
fn top_k_labels_start_with_the_label_and_their_scores_descend_summing_to_at_most_one() {
    use arrow::array::AsArray;
    use arrow::datatypes::Float32Type;
    let dir = tmp();
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(sample(), &out);
    pipeline.writers_extra.push("top_k = 3".into());
    let run = pipeline.run(&[]);
    assert_eq!(run.code, 0, "{}", run.describe());
    let mut rows = 0;
    for part in part_files(&out) {
        for batch in read_batches(&part).unwrap() {
            let column = |name: &str| batch.column_by_name(name).unwrap().clone();
            let (labels, scores) = (column("label"), column("score"));
            let (labels, scores) = (
                labels.as_string::<i32>(),
                scores.as_primitive::<Float32Type>(),
            );
            let (top_labels, top_scores) = (column("top_labels"), column("top_scores"));
            for i in 0..batch.num_rows() {
                let names = top_labels.as_list::<i32>().value(i);
                let names: Vec<&str> = names.as_string::<i32>().iter().flatten().collect();
                let probs = top_scores.as_list::<i32>().value(i);
                let probs = probs.as_primitive::<Float32Type>().values().to_vec();
                assert_eq!(names.len(), 3, "{names:?}");
                assert_eq!(names[0], labels.value(i));
                assert_eq!(probs[0], scores.value(i));
                assert!(probs.windows(2).all(|w| w[0] >= w[1]), "{probs:?}");
                assert!(probs.iter().sum::<f32>() <= 1.0 + 1e-5, "{probs:?}");
                let distinct: std::collections::HashSet<&&str> = names.iter().collect();
                assert_eq!(distinct.len(), 3, "{names:?}");
            }
            rows += batch.num_rows();
        }
    }
    assert_eq!(rows, SAMPLE_ROWS);
    let without = good_baseline().predictions();
    for row in read_output(&out) {
        assert_eq!(row.label_id, without[row.id.as_str()].0, "{}", row.id);
    }
}

/// More classes than the labels file has, or none: a settings error naming
/// the key, from `run` and `check` alike, before anything is written.
#[test]
fn top_k_over_the_labels_count_is_an_error_naming_the_key_before_anything_is_written() {
    let dir = tmp();
    let text = std::fs::read_to_string(labels()).unwrap();
    let n_labels = text.lines().filter(|l| !l.trim().is_empty()).count();
    let out = dir.path().join("out");
    for (top_k, says) in [
        (n_labels + 1, format!("has {n_labels} classes")),
        (0, "top_k must be at least 1".to_string()),
    ] {
        let mut pipeline = Pipeline::new(sample(), &out);
        pipeline.writers_extra.push(format!("top_k = {top_k}"));
        let run = pipeline.run(&[]);
        let error = expect_one_line_error(&run);
        assert!(
            error.contains("[writers]") && error.contains("top_k"),
            "{error}"
        );
        assert!(error.contains(&says), "{error}");
        assert!(!out.exists(), "a refused run wrote {}", out.display());
        let file = pipeline.write(&dir.path().join("check.toml"));
        let mut command = Command::new(bin());
        command.arg("check").arg(&file);
        let checked = run_command(&mut command, dir.path());
        let error = expect_one_line_error(&checked);
        assert!(error.contains("top_k") && error.contains(&says), "{error}");
    }
}
