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
