//! Shared helpers: pipeline files, running the real binary, reading its
//! Parquet output, and input variants made by `tests/fixtures.py`.

#![allow(dead_code)] // each test module uses a different subset

mod reference;
pub use reference::*;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float32Type, Int32Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tempfile::TempDir;

mod interrupt;
pub use interrupt::*;

mod http;
pub use http::*;

mod process;

mod bucket;
pub use bucket::*;

mod s3;
pub use s3::*;

mod gcs;
pub use gcs::*;

mod azure;
pub use azure::*;

pub const SAMPLE_ROWS: usize = 2000;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn sample() -> PathBuf {
    repo().join("sample_data/digits.parquet")
}

pub fn model() -> PathBuf {
    repo().join("models/digits-small.pt")
}

pub fn labels() -> PathBuf {
    repo().join("models/digits-small.labels.txt")
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_segpredict")
}

/// The venv's Python: `$VIRTUAL_ENV/bin/python`, else the repo's `.venv`.
pub fn python() -> PathBuf {
    let from_env = std::env::var_os("VIRTUAL_ENV")
        .map(|v| PathBuf::from(v).join("bin/python"))
        .filter(|p| p.is_file());
    from_env.unwrap_or_else(|| repo().join(".venv/bin/python"))
}

pub fn tmp() -> TempDir {
    tempfile::Builder::new()
        .prefix("segpredict-it-")
        .tempdir()
        .expect("creating a temporary directory")
}

/// Runs `tests/fixtures.py COMMAND input out [args]`; panics with its stderr on failure.
/// Returns its stdout.
pub fn fixture(command: &str, input: &Path, out: &Path, args: &[&str]) -> String {
    let output = Command::new(python())
        .arg(repo().join("tests/fixtures.py"))
        .arg(command)
        .arg(input)
        .arg(out)
        .args(args)
        .output()
        .expect("running tests/fixtures.py");
    assert!(
        output.status.success(),
        "fixtures.py {command} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The model's labels file less its last line, in `dir`: one label short
/// of the model's outputs, which the start-up check catches.
pub fn short_labels(dir: &Path) -> PathBuf {
    let path = dir.join("short.labels.txt");
    let all = std::fs::read_to_string(labels()).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    std::fs::write(&path, lines[..lines.len() - 1].join("\n")).unwrap();
    path
}

/// The first `rows` rows of the sample, written by pyarrow to `dir/name`.
pub fn sample_subset(dir: &Path, name: &str, rows: usize) -> PathBuf {
    let out = dir.join(name);
    fixture("subset", &sample(), &out, &["--rows", &rows.to_string()]);
    out
}

/// The sample's first `rows` rows in row groups of `group_rows`, written to
/// `dir/in.parquet`: shards are dealt (file, row group) units, so sharded
/// tests need several.
pub fn rowgroups_input(dir: &Path, rows: usize, group_rows: usize) -> PathBuf {
    let input = dir.join("in.parquet");
    fixture(
        "rowgroups",
        &sample(),
        &input,
        &[
            "--rows",
            &rows.to_string(),
            "--row-group-size",
            &group_rows.to_string(),
        ],
    );
    input
}

/// A pipeline file's parameters; `toml()` renders it with the sample's columns.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub input: PathBuf,
    pub output: PathBuf,
    pub model: PathBuf,
    pub labels: PathBuf,
    pub id_column: String,
    pub segments_column: String,
    /// `[readers.columns] segments.dtype`: `u8` (the sample's), `f16` or `f32`.
    pub segments_dtype: String,
    /// `[readers.columns] extras`, each an inline table, e.g.
    /// `{ name = "tags", kind = "ragged" }` (the sample's only extra).
    pub extras: Vec<String>,
    pub reader_threads: usize,
    pub batch_rows: usize,
    pub max_segments: usize,
    pub max_rows: usize,
    pub writer_threads: usize,
    pub rows_per_file: Option<usize>,
    pub overwrite: bool,
    /// Raw lines added to `[model]`, e.g. `fault_oom_above_segments = 1000`.
    pub model_extra: Vec<String>,
    /// Raw lines added to `[bucketing]`.
    pub bucketing_extra: Vec<String>,
    /// Raw lines added to `[writers]`, e.g. `commit_every_s = 0.2`.
    pub writers_extra: Vec<String>,
    /// Raw lines of a `[storage]` section, e.g. `max_retries = 2`.
    pub storage_extra: Vec<String>,
}

impl Pipeline {
    /// The sample's settings (pipelines/sample.toml) on CPU, reading `input`
    /// and writing into `output`.
    pub fn new(input: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Self {
        Self {
            input: input.into(),
            output: output.into(),
            model: model(),
            labels: labels(),
            id_column: "id".into(),
            segments_column: "segments".into(),
            segments_dtype: "u8".into(),
            extras: vec![r#"{ name = "tags", kind = "ragged" }"#.into()],
            reader_threads: 0,
            batch_rows: 1024,
            max_segments: 4096,
            max_rows: 1024,
            writer_threads: 2,
            rows_per_file: None,
            overwrite: false,
            model_extra: Vec::new(),
            bucketing_extra: Vec::new(),
            writers_extra: Vec::new(),
            storage_extra: Vec::new(),
        }
    }

    pub fn toml(&self) -> String {
        let q = |p: &Path| toml_string(&p.display().to_string());
        let mut t = String::new();
        t += "[readers]\n";
        t += &format!("path = {}\n", q(&self.input));
        t += &format!("threads = {}\n", self.reader_threads);
        t += &format!("batch_rows = {}\n\n", self.batch_rows);
        t += "[readers.columns]\n";
        t += &format!("id = {}\n", toml_string(&self.id_column));
        t += &format!(
            "segments = {{ name = {}, dtype = {}, shape = [1, 8, 8] }}\n",
            toml_string(&self.segments_column),
            toml_string(&self.segments_dtype)
        );
        t += &format!("extras = [{}]\n\n", self.extras.join(", "));
        t += "[bucketing]\n";
        t += &format!("max_segments = {}\n", self.max_segments);
        t += &format!("max_rows = {}\n", self.max_rows);
        t += "max_held_rows = 16384\npad_to_size_classes = true\n";
        for line in &self.bucketing_extra {
            t += line;
            t += "\n";
        }
        t += "\n[model]\n";
        t += &format!("path = {}\n", q(&self.model));
        t += &format!("labels = {}\n", q(&self.labels));
        t += "device = \"cpu\"\ndtype = \"f32\"\n";
        for line in &self.model_extra {
            t += line;
            t += "\n";
        }
        t += "\n[writers]\n";
        t += &format!("dir = {}\n", q(&self.output));
        t += &format!("threads = {}\n", self.writer_threads);
        if let Some(n) = self.rows_per_file {
            t += &format!("rows_per_file = {n}\n");
        }
        t += &format!("overwrite = {}\n", self.overwrite);
        for line in &self.writers_extra {
            t += line;
            t += "\n";
        }
        if !self.storage_extra.is_empty() {
            t += "\n[storage]\n";
            t += &self.storage_extra.join("\n");
            t += "\n";
        }
        t
    }

    /// Writes the pipeline file to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.toml()).expect("writing the pipeline file");
        path.to_path_buf()
    }

    /// Writes `pipeline.toml` beside the output directory and runs
    /// `segpredict run` on it with `args` appended.
    pub fn run(&self, args: &[&str]) -> RunResult {
        // Beside the output directory, or the nearest folder above it.
        let parent = self
            .output
            .ancestors()
            .skip(1)
            .find(|p| p.is_dir())
            .expect("the output is under some folder");
        let file = self.write(&parent.join(format!(
            "pipeline-{}.toml",
            self.output.file_name().unwrap_or_default().to_string_lossy()
        )));
        run_file(&file, args, &self.output)
    }
}

/// A TOML basic string.
pub fn toml_string(s: &str) -> String {
    let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

#[derive(Debug)]
pub struct RunResult {
    /// The exit code; -1 when the process died of a signal.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Where the output is expected (the pipeline's `[writers] dir`).
    pub out_dir: PathBuf,
}

impl RunResult {
    pub fn describe(&self) -> String {
        format!(
            "exit code {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Panics with the run's output unless it exited with `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code: {}", self.describe());
        self
    }
}

pub fn run_file(pipeline: &Path, args: &[&str], out_dir: &Path) -> RunResult {
    run_command(
        Command::new(bin()).arg("run").arg(pipeline).args(args),
        out_dir,
    )
}

/// Tests run two at a time on a small machine: one intra-op thread per run
/// keeps libtorch's threads from spinning against each other (a value the
/// user exported wins).
pub fn quiet_env(command: &mut Command) -> &mut Command {
    if std::env::var_os("OMP_NUM_THREADS").is_none() {
        command.env("OMP_NUM_THREADS", "1");
    }
    command
        .env_remove("SEGPREDICT_LOG")
        .env_remove("RUST_BACKTRACE")
}

pub fn run_command(command: &mut Command, out_dir: &Path) -> RunResult {
    let output: Output = quiet_env(command).output().expect("starting segpredict");
    RunResult {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        out_dir: out_dir.to_path_buf(),
    }
}

/// One row of the output part files.
#[derive(Debug, Clone, PartialEq)]
pub struct OutRow {
    pub id: String,
    pub label: String,
    pub label_id: i32,
    pub score: f32,
    pub source_file: String,
    pub source_row: i64,
}

/// One row of [`REJECTS_FILE`].
#[derive(Debug, Clone, PartialEq)]
pub struct RejectRow {
    pub id: Option<String>,
    pub source_file: String,
    pub source_row: i64,
    pub kind: String,
    pub reason: String,
}

/// All record batches of a Parquet file.
pub fn read_batches(path: &Path) -> Result<Vec<RecordBatch>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn column(batch: &RecordBatch, name: &str) -> ArrayRef {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("column `{name}` missing from {:?}", batch.schema()))
        .clone()
}

/// A column of any string-like or integer type, as strings.
fn strings(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let utf8 = cast(&column(batch, name), &DataType::Utf8).expect("casting to utf8");
    let a = utf8.as_string::<i32>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect()
}

fn ints64(batch: &RecordBatch, name: &str) -> Vec<i64> {
    let a = cast(&column(batch, name), &DataType::Int64).expect("casting to int64");
    a.as_primitive::<Int64Type>().values().to_vec()
}

/// The final-named part files (`part-*.parquet`) of an output directory, sorted.
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = list_dir(dir)
        .into_iter()
        .filter(|p| {
            let name = file_name(p);
            name.starts_with("part-") && name.ends_with(".parquet")
        })
        .collect();
    parts.sort();
    parts
}

pub fn list_dir(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Every file under `dir`, by its path relative to `dir`, sorted.
pub fn list_tree(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(folder) = todo.pop() {
        for path in list_dir(&folder) {
            match path.is_dir() {
                true => todo.push(path),
                false => files.push(path.strip_prefix(dir).unwrap().display().to_string()),
            }
        }
    }
    files.sort();
    files
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every row of every output part file.
pub fn read_output(dir: &Path) -> Vec<OutRow> {
    let mut rows = Vec::new();
    for part in part_files(dir) {
        for batch in read_batches(&part).unwrap_or_else(|e| panic!("{e}")) {
            let ids = strings(&batch, "id");
            let labels = strings(&batch, "label");
            let label_ids = column(&batch, "label_id");
            let label_ids = label_ids.as_primitive::<Int32Type>();
            let scores = column(&batch, "score");
            let scores = scores.as_primitive::<Float32Type>();
            let files = strings(&batch, "source_file");
            let source_rows = ints64(&batch, "source_row");
            for i in 0..batch.num_rows() {
                rows.push(OutRow {
                    id: ids[i].clone().expect("output id is null"),
                    label: labels[i].clone().expect("output label is null"),
                    label_id: label_ids.value(i),
                    score: scores.value(i),
                    source_file: files[i].clone().expect("source_file is null"),
                    source_row: source_rows[i],
                });
            }
        }
    }
    rows
}

/// Where a finished run keeps its rejected rows and skipped files, as
/// docs/src/output.md documents it: in a `_` folder, so `out/*.parquet`
/// holds only part files.
pub const REJECTS_FILE: &str = "_rejects/rejects.parquet";
/// Where a finished run keeps one record per forward pass.
pub const BATCHES_FILE: &str = "_segpredict/batches.parquet";

/// A `bad_file` row of the rejects file: a skipped input file.
#[derive(Debug, Clone, PartialEq)]
pub struct BadFileRow {
    pub id: Option<String>,
    pub source_file: String,
    pub reason: String,
}

/// [`REJECTS_FILE`] (which every completed run writes): its rejected
/// input rows, and its `bad_file` rows (which alone have no source_row).
fn read_rejects_file(dir: &Path) -> (Vec<RejectRow>, Vec<BadFileRow>) {
    let path = dir.join(REJECTS_FILE);
    let (mut rows, mut bad_files) = (Vec::new(), Vec::new());
    for batch in read_batches(&path).unwrap_or_else(|e| panic!("{e}")) {
        let ids = strings(&batch, "id");
        let files = strings(&batch, "source_file");
        let source_rows = column(&batch, "source_row");
        let source_rows = source_rows.as_primitive::<Int64Type>();
        let kinds = strings(&batch, "kind");
        let reasons = strings(&batch, "reason");
        for i in 0..batch.num_rows() {
            let kind = kinds[i].clone().expect("reject kind is null");
            let source_file = files[i].clone().expect("reject source_file is null");
            let reason = reasons[i].clone().expect("reject reason is null");
            assert_eq!(
                source_rows.is_null(i),
                kind == "bad_file",
                "only a bad_file reject has no source_row: {kind} {source_file}"
            );
            if kind == "bad_file" {
                let id = ids[i].clone();
                bad_files.push(BadFileRow {
                    id,
                    source_file,
                    reason,
                });
                continue;
            }
            rows.push(RejectRow {
                id: ids[i].clone(),
                source_file,
                source_row: source_rows.value(i),
                kind,
                reason,
            });
        }
    }
    (rows, bad_files)
}

/// The output's rows by id, their source named by its row alone (the
/// file is a path in one run, a URL in the other).
pub fn sorted_rows(dir: &Path) -> Vec<OutRow> {
    let mut rows = read_output(dir);
    rows.iter_mut().for_each(|r| r.source_file.clear());
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

/// The rejected input rows of [`REJECTS_FILE`].
pub fn read_rejects(dir: &Path) -> Vec<RejectRow> {
    read_rejects_file(dir).0
}

/// The skipped files of [`REJECTS_FILE`] (`bad_file` rows).
pub fn read_bad_files(dir: &Path) -> Vec<BadFileRow> {
    read_rejects_file(dir).1
}

/// The rows of [`BATCHES_FILE`], each as a JSON object with the record's
/// fields (null ones left out, `memory` nested), as the report's
/// `batch_records` listed them before they were streamed to a file.
pub fn read_batch_records(dir: &Path) -> Vec<serde_json::Value> {
    let path = dir.join(BATCHES_FILE);
    let mut records = Vec::new();
    for batch in read_batches(&path).unwrap_or_else(|e| panic!("{e}")) {
        for i in 0..batch.num_rows() {
            let mut record = serde_json::Map::new();
            for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
                if let Some(value) = json_value(array, i) {
                    record.insert(field.name().clone(), value);
                }
            }
            records.push(serde_json::Value::Object(record));
        }
    }
    records
}

/// One cell as JSON; `None` when null.
fn json_value(array: &ArrayRef, i: usize) -> Option<serde_json::Value> {
    use arrow::datatypes::{Float64Type, UInt32Type, UInt64Type};
    if array.is_null(i) {
        return None;
    }
    Some(match array.data_type() {
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(i).into(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(i).into(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(i).into(),
        DataType::Float64 => array.as_primitive::<Float64Type>().value(i).into(),
        DataType::Utf8 => array.as_string::<i32>().value(i).into(),
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut object = serde_json::Map::new();
            for (field, child) in fields.iter().zip(s.columns()) {
                if let Some(value) = json_value(child, i) {
                    object.insert(field.name().clone(), value);
                }
            }
            serde_json::Value::Object(object)
        }
        other => panic!("{BATCHES_FILE} has a column of type {other}"),
    })
}

pub fn read_report(dir: &Path) -> serde_json::Value {
    let path = dir.join("_report.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

pub fn report_u64(report: &serde_json::Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("_report.json has no integer `{key}`: {report}"))
}

/// One input row as the tests need it.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    pub id: String,
    /// None for a null segments list.
    pub n_segments: Option<usize>,
    pub true_label: Option<String>,
}

/// The rows of an input Parquet file, in file order.
pub fn read_input(path: &Path) -> Vec<InputRow> {
    let mut rows = Vec::new();
    for batch in read_batches(path).unwrap_or_else(|e| panic!("{e}")) {
        let ids = strings(&batch, "id");
        let segments = column(&batch, "segments");
        let counts: Vec<Option<usize>> = match segments.data_type() {
            DataType::List(_) => {
                let l = segments.as_list::<i32>();
                (0..l.len())
                    .map(|i| l.is_valid(i).then(|| l.value_length(i) as usize))
                    .collect()
            }
            DataType::LargeList(_) => {
                let l = segments.as_list::<i64>();
                (0..l.len())
                    .map(|i| l.is_valid(i).then(|| l.value_length(i) as usize))
                    .collect()
            }
            other => panic!("segments column of type {other}"),
        };
        let truth = batch
            .schema()
            .index_of("true_label")
            .ok()
            .map(|_| strings(&batch, "true_label"));
        for i in 0..batch.num_rows() {
            rows.push(InputRow {
                id: ids[i].clone().expect("input id is null"),
                n_segments: counts[i],
                true_label: truth.as_ref().and_then(|t| t[i].clone()),
            });
        }
    }
    rows
}

/// The output rows by id; panics on an id that appears twice.
pub fn by_id(rows: &[OutRow]) -> HashMap<&str, &OutRow> {
    let mut map = HashMap::with_capacity(rows.len());
    for row in rows {
        assert!(
            map.insert(row.id.as_str(), row).is_none(),
            "id {} appears more than once in the output",
            row.id
        );
    }
    map
}

/// Every input id appears exactly once across output and rejects, and nothing else does.
pub fn assert_each_id_once<'a>(
    input_ids: impl IntoIterator<Item = &'a str>,
    output: &[OutRow],
    rejects: &[RejectRow],
) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for id in output.iter().map(|r| r.id.as_str()).chain(
        rejects
            .iter()
            .map(|r| r.id.as_deref().expect("a reject without an id")),
    ) {
        *seen.entry(id).or_default() += 1;
    }
    let mut expected: Vec<&str> = input_ids.into_iter().collect();
    expected.sort_unstable();
    let mut duplicated: Vec<(&str, usize)> = seen
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&id, &n)| (id, n))
        .collect();
    duplicated.sort_unstable();
    assert!(
        duplicated.is_empty(),
        "ids seen more than once: {duplicated:?}"
    );
    let mut got: Vec<&str> = seen.keys().copied().collect();
    got.sort_unstable();
    let missing: Vec<&&str> = expected
        .iter()
        .filter(|id| !seen.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} input ids missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(
        got, expected,
        "output + rejects hold ids that are not in the input"
    );
}

/// The lines of stderr that are not tracing log lines.
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !is_log_line(l))
        .collect()
}

fn is_log_line(line: &str) -> bool {
    // tracing-subscriber's fmt: "<timestamp>  WARN target: message", maybe with ANSI colours.
    let plain: String = strip_ansi(line);
    let mut words = plain.split_whitespace();
    let _timestamp = words.next();
    matches!(words.next(), Some("WARN" | "INFO" | "DEBUG" | "TRACE"))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Checks a run that failed for good (settings, inputs, model, output
/// directory): exit code 2, which a scheduler does not retry, one error line
/// on stderr (log lines aside), no panic; returns that line.
pub fn expect_one_line_error(run: &RunResult) -> String {
    assert_eq!(run.code, 2, "expected exit code 2: {}", run.describe());
    for needle in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !run.stderr.contains(needle),
            "stderr shows a panic ({needle}): {}",
            run.describe()
        );
    }
    let lines = error_lines(&run.stderr);
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one error line on stderr: {}",
        run.describe()
    );
    lines[0].to_string()
}

/// A normal run of the whole sample, shared by the tests that compare
/// against it: the outputs are read into memory and the directory removed.
pub struct Baseline {
    pub run: RunResult,
    pub output: Vec<OutRow>,
    pub rejects: Vec<RejectRow>,
    pub report: serde_json::Value,
    /// [`BATCHES_FILE`]'s rows, as [`read_batch_records`] gives them.
    pub batch_records: Vec<serde_json::Value>,
    pub success_marker: bool,
    /// Every file in the output, by its path relative to it.
    pub files: Vec<String>,
}

impl Baseline {
    /// (label_id, score) by id.
    pub fn predictions(&self) -> HashMap<&str, (i32, f32)> {
        self.output
            .iter()
            .map(|r| (r.id.as_str(), (r.label_id, r.score)))
            .collect()
    }
}

pub fn baseline() -> &'static Baseline {
    static BASELINE: OnceLock<Baseline> = OnceLock::new();
    BASELINE.get_or_init(|| {
        let dir = tmp();
        let out = dir.path().join("out");
        let run = Pipeline::new(sample(), &out).run(&[]);
        let success_marker = out.join("_SUCCESS").is_file();
        let files = list_tree(&out);
        let (output, rejects, report, batch_records) = if run.code == 0 {
            let report = read_report(&out);
            (
                read_output(&out),
                read_rejects(&out),
                report,
                read_batch_records(&out),
            )
        } else {
            (Vec::new(), Vec::new(), serde_json::Value::Null, Vec::new())
        };
        Baseline {
            run,
            output,
            rejects,
            report,
            batch_records,
            success_marker,
            files,
        }
    })
}

/// The baseline, checked to be a clean run of the whole sample.
pub fn good_baseline() -> &'static Baseline {
    let b = baseline();
    assert_eq!(
        b.run.code,
        0,
        "the baseline run failed: {}",
        b.run.describe()
    );
    assert_eq!(b.output.len(), SAMPLE_ROWS, "baseline output rows");
    b
}

/// Asserts each output row has the baseline's label id (and a score within
/// `1e-4`) for its id.
pub fn assert_same_predictions_as_baseline(output: &[OutRow]) {
    let baseline = good_baseline().predictions();
    let mut differ = Vec::new();
    for row in output {
        let &(label_id, score) = baseline
            .get(row.id.as_str())
            .unwrap_or_else(|| panic!("id {} is not in the sample", row.id));
        if row.label_id != label_id || (row.score - score).abs() > 1e-4 {
            differ.push(format!(
                "{}: label_id {} score {} (baseline {label_id} {score})",
                row.id, row.label_id, row.score
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} row(s) differ from the baseline run, e.g. {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
}

/// Runs `pipeline` expecting success with no rejects; returns the output rows
/// after checking each input id appears exactly once.
pub fn run_clean(pipeline: &Pipeline, input_ids: &[String]) -> Vec<OutRow> {
    let run = pipeline.run(&[]);
    run.expect_code(0);
    let output = read_output(&run.out_dir);
    let rejects = read_rejects(&run.out_dir);
    assert!(rejects.is_empty(), "unexpected rejects: {rejects:?}");
    assert_each_id_once(input_ids.iter().map(String::as_str), &output, &rejects);
    assert!(run.out_dir.join("_SUCCESS").is_file(), "no _SUCCESS");
    output
}

pub fn ids_of(rows: &[InputRow]) -> Vec<String> {
    rows.iter().map(|r| r.id.clone()).collect()
}

pub fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// What a run that completes with rejected rows left behind.
pub struct RejectingRun {
    pub run: RunResult,
    pub out: PathBuf,
    pub output: Vec<OutRow>,
    pub rejects: Vec<RejectRow>,
}

/// Runs `pipeline`, expecting it to complete with rejects: exit code 3,
/// `_SUCCESS` written, and every input id exactly once across the output and
/// the rejects.
pub fn run_with_rejects(pipeline: &Pipeline, input: &[InputRow]) -> RejectingRun {
    let run = pipeline.run(&[]);
    run.expect_code(3);
    let out = run.out_dir.clone();
    assert!(
        out.join("_SUCCESS").is_file(),
        "a run with rejects is complete"
    );
    let output = read_output(&out);
    let rejects = read_rejects(&out);
    assert_each_id_once(input.iter().map(|r| r.id.as_str()), &output, &rejects);
    RejectingRun {
        run,
        out,
        output,
        rejects,
    }
}
