//! Each failure: exit code 1 and one line on stderr naming its cause, no panic.

use crate::util::*;

#[test]
fn missing_input_file_is_one_line_naming_the_path() {
    let dir = tmp();
    let missing = dir.path().join("no-such-input.parquet");
    let run = Pipeline::new(&missing, dir.path().join("out")).run(&[]);
    let line = expect_one_line_error(&run);
    assert!(line.contains(&missing.display().to_string()), "{line}");
    assert!(!dir.path().join("out").join("_SUCCESS").exists());
}

#[test]
fn missing_model_file_is_one_line_naming_the_path() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "subset.parquet", 10);
    let mut pipeline = Pipeline::new(&input, dir.path().join("out"));
    pipeline.model = dir.path().join("no-such-model.pt");
    let run = pipeline.run(&[]);
    let line = expect_one_line_error(&run);
    assert!(
        line.contains(&pipeline.model.display().to_string()),
        "{line}"
    );
}

#[test]
fn misspelt_pipeline_key_is_one_line_naming_the_key() {
    let dir = tmp();
    let pipeline = Pipeline::new(sample(), dir.path().join("out"));
    let text = pipeline
        .toml()
        .replace("max_rows = 1024", "max_segmnets = 10\nmax_rows = 1024");
    assert!(text.contains("max_segmnets"));
    let file = dir.path().join("typo.toml");
    std::fs::write(&file, text).unwrap();
    let run = run_file(&file, &[], &dir.path().join("out"));
    let line = expect_one_line_error(&run);
    assert!(line.contains("max_segmnets"), "{line}");
    assert!(line.contains("typo.toml"), "{line}");
}

#[test]
fn column_missing_from_the_file_is_one_line_naming_column_and_file() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "subset.parquet", 10);
    let mut pipeline = Pipeline::new(&input, dir.path().join("out"));
    pipeline.segments_column = "pixels".into();
    let run = pipeline.run(&[]);
    let line = expect_one_line_error(&run);
    assert!(line.contains("pixels"), "{line}");
    assert!(line.contains(&input.display().to_string()), "{line}");
}

#[test]
fn output_directory_under_a_regular_file_is_one_line_naming_it() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "subset.parquet", 10);
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let out = blocker.join("out");
    let run = Pipeline::new(&input, &out).run(&[]);
    let line = expect_one_line_error(&run);
    assert!(line.contains(&out.display().to_string()), "{line}");
    assert_eq!(
        std::fs::read_to_string(&blocker).unwrap(),
        "not a directory"
    );
}

#[test]
fn input_directory_without_parquet_files_is_one_line_naming_it() {
    let dir = tmp();
    let empty = dir.path().join("empty-input");
    std::fs::create_dir(&empty).unwrap();
    // Files a reader must skip: not Parquet by name, or markers.
    std::fs::write(empty.join("README.txt"), "nothing here").unwrap();
    std::fs::write(empty.join("_SUCCESS"), "").unwrap();
    let run = Pipeline::new(&empty, dir.path().join("out")).run(&[]);
    let line = expect_one_line_error(&run);
    assert!(line.contains(&empty.display().to_string()), "{line}");
}

#[test]
fn earlier_output_of_another_run_without_overwrite_is_one_line_and_left_intact() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "subset.parquet", 20);
    let other_input = sample_subset(dir.path(), "other.parquet", 10);
    let out = dir.path().join("out");
    let pipeline = Pipeline::new(&input, &out);
    pipeline.run(&[]).expect_code(0);
    let before = read_output(&out);
    assert_eq!(before.len(), 20);

    let other = Pipeline::new(&other_input, &out);
    let run = other.run(&[]);
    let line = expect_one_line_error(&run);
    assert!(line.contains("overwrite"), "{line}");
    assert!(line.contains(&out.display().to_string()), "{line}");
    assert!(line.contains("other.parquet is new"), "{line}");
    // The earlier run's output is untouched.
    assert!(out.join("_SUCCESS").is_file());
    assert_eq!(read_output(&out), before);

    // --overwrite replaces it.
    other.run(&["--overwrite"]).expect_code(0);
    assert!(out.join("_SUCCESS").is_file());
    assert_eq!(read_output(&out).len(), 10);
}

/// A model that fails its start-up check (a labels file one line short)
/// while the readers already read a many-row-group input: exit 2 in one
/// line, and the output directory is left as a new one (no `_run.json`, no
/// attempt marker, nothing committed), so the rerun with the labels fixed
/// is a new run, not another run's output refused without `--overwrite`.
#[test]
fn a_model_failing_at_start_up_leaves_no_run_behind_and_the_fixed_rerun_runs() {
    let dir = tmp();
    let input = rowgroups_input(dir.path(), 400, 20);
    let labels = short_labels(dir.path());
    let out = dir.path().join("out");
    let mut pipeline = Pipeline::new(&input, &out);
    pipeline.labels = labels;
    let failed = pipeline.run(&[]);
    let line = expect_one_line_error(&failed);
    assert!(line.contains("(9 labels)"), "{line}");
    assert_eq!(failed.code, 2, "{}", failed.describe());
    let left: Vec<String> = list_dir(&out).iter().map(|p| file_name(p)).collect();
    assert!(left.is_empty(), "the failed start left {left:?}");
    pipeline.labels = crate::util::labels();
    let fixed = pipeline.run(&[]);
    fixed.expect_code(0);
    assert_eq!(read_output(&out).len(), 400);
}
