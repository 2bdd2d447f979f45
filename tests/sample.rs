//! The sample run against the Python reference, the segment budget, and the
//! command-line overrides.

use std::collections::HashMap;
use std::process::Command;

use crate::util::*;

#[test]
fn sample_matches_python_reference() {
    let dir = tmp();
    let reference_out = dir.path().join("reference.parquet");
    // The reference runs while the baseline run does.
    let reference = start_reference(&reference_out);
    let baseline = good_baseline();
    let reference = finish_reference(reference, &reference_out);

    // Every input id exactly once, from the right row of the right file.
    let input = read_input(&sample());
    assert_eq!(input.len(), SAMPLE_ROWS);
    assert_eq!(baseline.output.len(), SAMPLE_ROWS);
    assert_each_id_once(
        input.iter().map(|r| r.id.as_str()),
        &baseline.output,
        &baseline.rejects,
    );
    let row_of: HashMap<&str, usize> = input
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    let label_names: Vec<String> = std::fs::read_to_string(labels())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    for row in &baseline.output {
        assert_eq!(row.source_row, row_of[row.id.as_str()] as i64, "{row:?}");
        assert!(
            row.source_file.ends_with("sample_data/digits.parquet"),
            "{row:?}"
        );
        assert_eq!(row.label, label_names[row.label_id as usize], "{row:?}");
    }

    // Same label as the reference on every row, scores within 1e-4.
    assert_eq!(reference.len(), SAMPLE_ROWS);
    assert_matches_reference(&baseline.output, &reference);

    // Item accuracy against the sample's true labels.
    let truth: HashMap<&str, &str> = input
        .iter()
        .map(|r| (r.id.as_str(), r.true_label.as_deref().unwrap()))
        .collect();
    let correct = baseline
        .output
        .iter()
        .filter(|r| truth[r.id.as_str()] == r.label)
        .count();
    let accuracy = correct as f64 / SAMPLE_ROWS as f64;
    assert!(accuracy >= 0.97, "item accuracy {accuracy}");

    // The completion marker, an empty rejects file and the report.
    assert!(
        baseline.success_marker,
        "no _SUCCESS in {:?}",
        baseline.files
    );
    assert!(
        baseline.files.iter().any(|f| f == REJECTS_FILE),
        "no {REJECTS_FILE} in {:?}",
        baseline.files
    );
    assert!(baseline.rejects.is_empty(), "{:?}", baseline.rejects);
    assert!(
        !baseline.files.iter().any(|f| f.ends_with(".inprogress")),
        "temporary files left: {:?}",
        baseline.files
    );
    let report = &baseline.report;
    assert_eq!(report_u64(report, "rows_in"), SAMPLE_ROWS as u64);
    assert_eq!(report_u64(report, "rows_out"), SAMPLE_ROWS as u64);
    assert_eq!(report_u64(report, "rows_rejected"), 0);
    assert!(
        report.get("memory").is_none(),
        "CPU report has a memory key: {}",
        report["memory"]
    );
    assert!(report.get("device_busy_share").is_none(), "{report}");
    assert_eq!(
        report["channels_last"], true,
        "channels-last is the default for a model with 4-D weights, on CPU too"
    );
    assert_eq!(report["batches_file"], BATCHES_FILE);
    assert!(baseline.files.iter().any(|f| f == BATCHES_FILE));
    // `out/*.parquet` is one table: the part files alone.
    let top: Vec<&String> = baseline.files.iter().filter(|f| !f.contains('/')).collect();
    let parquet = top.iter().filter(|f| f.ends_with(".parquet"));
    assert!(parquet.clone().all(|f| f.starts_with("part-")), "{top:?}");
    let records = &baseline.batch_records;
    assert_eq!(records.len() as u64, report_u64(report, "batches"));
    for record in records {
        assert!(
            record.get("memory").is_none() && record.get("device_ms").is_none(),
            "CPU batch record has device fields: {record}"
        );
    }
    let rows_in_batches: u64 = records.iter().map(|r| r["rows"].as_u64().unwrap()).sum();
    assert_eq!(rows_in_batches, SAMPLE_ROWS as u64);
    assert_batch_times_are_on_the_run_clock(report, records);
}

/// Each batch is queued before its answers arrive, both inside the run; the
/// first queued is the report's time to first batch.
fn assert_batch_times_are_on_the_run_clock(
    report: &serde_json::Value,
    records: &[serde_json::Value],
) {
    let wall_ms = report["wall_s"].as_f64().unwrap() * 1e3;
    let mut first_ms = f64::INFINITY;
    for record in records {
        let (queued, done) = (
            record["queued_at_ms"].as_f64().unwrap(),
            record["done_at_ms"].as_f64().unwrap(),
        );
        assert!(
            0.0 < queued && queued <= done && done <= wall_ms,
            "batch times off the run clock: {record}"
        );
        assert!(record["launch_ms"].as_f64().unwrap() >= 0.0, "{record}");
        first_ms = first_ms.min(queued);
    }
    let first_s = report["time_to_first_batch_s"]
        .as_f64()
        .expect("time_to_first_batch_s");
    assert!(
        (first_s * 1e3 - first_ms).abs() < 1e-6,
        "time_to_first_batch_s {first_s} vs first queued {first_ms} ms"
    );
}

#[test]
fn row_over_budget_is_predicted_alone_not_rejected() {
    let dir = tmp();
    let input_path = sample_subset(dir.path(), "subset.parquet", 300);
    let input = read_input(&input_path);
    let big = input.iter().filter(|r| r.n_segments.unwrap() > 256).count() as u64;
    assert!(big >= 2, "the subset should hold rows over 256 segments");
    let mut pipeline = Pipeline::new(&input_path, dir.path().join("out"));
    pipeline.max_segments = 256;
    let output = run_clean(&pipeline, &ids_of(&input));
    assert_same_predictions_as_baseline(&output);

    let report = read_report(&dir.path().join("out"));
    assert_eq!(report_u64(&report, "max_segments"), 256);
    assert_eq!(report_u64(&report, "oversized_batches"), big);
    let records = read_batch_records(&dir.path().join("out"));
    let mut oversized = 0;
    for record in records {
        let segments = record["segments"].as_u64().unwrap();
        let padded = record["padded_segments"].as_u64().unwrap();
        if record["flush_reason"] == "oversized" {
            oversized += 1;
            assert_eq!(
                record["rows"], 1,
                "an oversized batch holds one row: {record}"
            );
            assert!(segments > 256, "{record}");
            assert_eq!(padded, segments, "an oversized row is not padded: {record}");
        } else {
            assert!(segments <= 256, "batch over the budget: {record}");
            assert!(padded <= 256, "batch padded over the budget: {record}");
        }
    }
    assert_eq!(oversized, big);
}

#[test]
fn cli_overrides_input_output_and_max_segments() {
    let dir = tmp();
    sample_subset(dir.path(), "subset.parquet", 100);
    let input = read_input(&dir.path().join("subset.parquet"));
    // The file points elsewhere; the pipeline lives in a subfolder so a
    // relative override resolved against it (not the working directory) fails.
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let file_output = dir.path().join("from-file");
    let pipeline = Pipeline::new(dir.path().join("missing.parquet"), &file_output);
    let file = pipeline.write(&conf.join("pipeline.toml"));
    let out = dir.path().join("from-cli");
    let run = run_command(
        Command::new(bin())
            .current_dir(dir.path())
            .arg("run")
            .arg(&file)
            .args(["--input", "subset.parquet", "--output", "from-cli"])
            .args(["--max-segments", "128"]),
        &out,
    );
    run.expect_code(0);
    assert!(
        !file_output.exists(),
        "the file's output directory was used"
    );
    assert!(out.join("_SUCCESS").is_file());
    let output = read_output(&out);
    let rejects = read_rejects(&out);
    assert_each_id_once(input.iter().map(|r| r.id.as_str()), &output, &rejects);
    assert!(rejects.is_empty());
    assert_same_predictions_as_baseline(&output);
    for row in &output {
        assert!(row.source_file.ends_with("subset.parquet"), "{row:?}");
    }
    let report = read_report(&out);
    assert_eq!(report_u64(&report, "max_segments"), 128);
    for record in read_batch_records(&out) {
        if record["flush_reason"] != "oversized" {
            assert!(
                record["padded_segments"].as_u64().unwrap() <= 128,
                "{record}"
            );
        }
    }
}

#[test]
fn nchw_weights_predict_the_same_labels() {
    let dir = tmp();
    let input_path = sample_subset(dir.path(), "subset.parquet", 300);
    let input = read_input(&input_path);
    let mut pipeline = Pipeline::new(&input_path, dir.path().join("out"));
    pipeline.model_extra.push("channels_last = false".into());
    let output = run_clean(&pipeline, &ids_of(&input));
    assert_same_predictions_as_baseline(&output);
}
