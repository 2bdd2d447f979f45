//! The operator's view: `inspect` before a run, `check`, JSON logs and
//! Prometheus metrics during one.

use std::process::Command;

use crate::util::*;

fn segpredict(args: &[&str]) -> RunResult {
    let dir = std::env::temp_dir();
    run_command(Command::new(bin()).args(args), &dir)
}

/// The block between `[readers.columns]` and the next blank line.
fn suggested_columns(inspect_stdout: &str) -> String {
    let start = inspect_stdout
        .find("[readers.columns]")
        .unwrap_or_else(|| panic!("no columns block in:\n{inspect_stdout}"));
    let block = &inspect_stdout[start..];
    let end = block.find("\n\n").unwrap_or(block.len());
    block[..end].to_string()
}

#[test]
fn inspect_prints_the_histogram_and_the_batch_plan() {
    let dir = tmp();
    let pipeline =
        Pipeline::new(sample(), dir.path().join("out")).write(&dir.path().join("p.toml"));
    let sample = sample();
    let result = segpredict(&[
        "inspect",
        sample.to_str().unwrap(),
        "--pipeline",
        pipeline.to_str().unwrap(),
    ]);
    result.expect_code(0);
    let out = &result.stdout;
    assert!(out.contains("1 file(s), 2000 rows, 4 row groups"), "{out}");
    // Log2 bins of segments per row, every row in one of them.
    assert!(out.contains("segments per row (`segments`)"), "{out}");
    let binned: u64 = out
        .lines()
        .filter(|l| l.trim_end().ends_with('#'))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(binned, 2000, "{out}");
    assert!(out.contains("        16-31 "), "{out}");
    // The plan at the pipeline's budget: every row batched, padded shapes named.
    assert!(
        out.contains("batch plan (segment_budget, budget 4096 segments"),
        "{out}"
    );
    assert!(out.contains(" 2000 rows, 95266 segments + "), "{out}");
    assert!(
        out.contains("padded shapes (segments x batches): 4096 x"),
        "{out}"
    );
    assert!(out.contains("no row is over the budget"), "{out}");
    // Nothing was written.
    assert!(!dir.path().join("out").exists());
}

#[test]
fn inspect_names_rows_over_a_small_budget() {
    let dir = tmp();
    let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
    pipeline.max_segments = 1024;
    let file = pipeline.write(&dir.path().join("p.toml"));
    let result = segpredict(&["inspect", "--pipeline", file.to_str().unwrap()]);
    result.expect_code(0);
    // The sample has 4 rows of 1024 or more segments, the largest 2500.
    assert!(
        result
            .stdout
            .contains("row(s) over the budget run alone, the largest 2500 segments"),
        "{}",
        result.stdout
    );
}

#[test]
fn inspect_suggested_columns_pasted_into_a_pipeline_run() {
    let sample = sample();
    let inspected = segpredict(&["inspect", sample.to_str().unwrap()]);
    inspected.expect_code(0);
    let columns = suggested_columns(&inspected.stdout);
    assert!(columns.contains("shape = [1, 8, 8]"), "{columns}");
    let dir = tmp();
    let out = dir.path().join("out");
    let q = |p: &std::path::Path| toml_string(&p.display().to_string());
    let text = format!(
        "[readers]\npath = {}\n\n{columns}\n\n[model]\npath = {}\nlabels = {}\ndevice = \"cpu\"\n\n[writers]\ndir = {}\n",
        q(&sample),
        q(&model()),
        q(&labels()),
        q(&out)
    );
    let file = dir.path().join("pasted.toml");
    std::fs::write(&file, &text).unwrap();
    run_file(&file, &[], &out).expect_code(0);
    assert_eq!(read_output(&out).len(), SAMPLE_ROWS, "{text}");
}

/// Every stderr line is one JSON object: no colour codes, no redraws.
fn assert_json_lines(stderr: &str) -> Vec<serde_json::Value> {
    assert!(!stderr.contains('\u{1b}'), "escape codes in:\n{stderr}");
    assert!(!stderr.contains('\r'), "carriage returns in:\n{stderr}");
    stderr
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nall of stderr:\n{stderr}"))
        })
        .collect()
}

#[test]
fn json_logs_are_json_lines_progress_included() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 300);
    let result = Pipeline::new(input, dir.path().join("out")).run(&["--log-format", "json"]);
    result.expect_code(0);
    let events = assert_json_lines(&result.stderr);
    let progress: Vec<_> = events
        .iter()
        .filter(|e| e["fields"]["message"] == "progress")
        .collect();
    let last = progress
        .last()
        .unwrap_or_else(|| panic!("no progress line: {}", result.stderr));
    assert_eq!(last["fields"]["rows"], 300, "{last}");
    assert_eq!(last["fields"]["total_rows"], 300, "{last}");
    assert_eq!(last["level"], "INFO");
}

#[test]
fn json_logs_carry_the_error_that_ends_the_run() {
    let dir = tmp();
    let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
    pipeline.segments_column = "no_such_column".into();
    let result = pipeline.run(&["--log-format", "json"]);
    assert_ne!(result.code, 0, "{}", result.describe());
    let events = assert_json_lines(&result.stderr);
    let error = events
        .iter()
        .find(|e| e["level"] == "ERROR")
        .unwrap_or_else(|| panic!("no ERROR event: {}", result.stderr));
    let text = error["fields"]["error"].as_str().unwrap();
    assert!(text.contains("no_such_column"), "{error}");
}

#[test]
fn completions_and_man_page_come_from_the_command_line_definitions() {
    let bash = segpredict(&["completions", "bash"]);
    bash.expect_code(0);
    assert!(bash.stdout.contains("_segpredict()"), "{}", bash.stdout);
    assert!(bash.stdout.contains("inspect"), "{}", bash.stdout);
    for shell in ["zsh", "fish"] {
        let out = segpredict(&["completions", shell]);
        out.expect_code(0);
        assert!(out.stdout.contains("log-format"), "{shell}: {}", out.stdout);
    }
    let man = segpredict(&["man"]);
    man.expect_code(0);
    assert!(man.stdout.contains(".TH segpredict 1"), "{}", man.stdout);
    assert!(man.stdout.contains("calibrate"), "{}", man.stdout);
}

fn check(pipeline: &std::path::Path) -> RunResult {
    segpredict(&["check", pipeline.to_str().unwrap()])
}

#[test]
fn check_passes_a_good_pipeline_and_touches_nothing() {
    let dir = tmp();
    let out = dir.path().join("out");
    let file = Pipeline::new(sample(), &out).write(&dir.path().join("p.toml"));
    let result = check(&file);
    result.expect_code(0);
    assert!(
        result
            .stdout
            .contains("2000 rows in 4 row groups; model answers 10 labels on cpu"),
        "{}",
        result.describe()
    );
    assert!(!out.exists(), "check created the output directory");
}

/// A labels file one line short of the model's 10 outputs: `check` fails as
/// `run` does, with the same code and the same line, before any output.
#[test]
fn check_catches_labels_fewer_than_the_model_outputs() {
    let dir = tmp();
    let labels = dir.path().join("short.labels.txt");
    let nine: Vec<String> = std::fs::read_to_string(crate::util::labels())
        .unwrap()
        .lines()
        .take(9)
        .map(str::to_string)
        .collect();
    std::fs::write(&labels, nine.join("\n")).unwrap();
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(sample(), &out);
    pipeline.labels = labels;
    let file = pipeline.write(&dir.path().join("p.toml"));
    let checked = check(&file);
    assert!(
        checked.stderr.contains("expected [1, 9] (9 labels)"),
        "{}",
        checked.describe()
    );
    assert!(!out.exists(), "check created the output directory");
    let ran = run_file(&file, &[], &out);
    assert_ne!(checked.code, 0, "{}", checked.describe());
    assert_eq!(
        checked.code,
        ran.code,
        "check:\n{}\nrun:\n{}",
        checked.describe(),
        ran.describe()
    );
    assert_eq!(checked.stderr, ran.stderr);
    // run found it before its first row: nothing was written.
    assert!(part_files(&out).is_empty());
}

#[test]
fn check_refuses_earlier_output_as_run_does_and_leaves_it() {
    let dir = tmp();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("_SUCCESS"), "").unwrap();
    let file = Pipeline::new(sample(), &out).write(&dir.path().join("p.toml"));
    let checked = check(&file);
    let ran = run_file(&file, &[], &out);
    assert_ne!(checked.code, 0, "{}", checked.describe());
    assert_eq!(checked.code, ran.code);
    assert_eq!(checked.stderr, ran.stderr);
    assert!(out.join("_SUCCESS").exists());
}
