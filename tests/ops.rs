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
    // stdout too: a container's two streams land in one log pipeline.
    let summary = assert_json_lines(&result.stdout);
    assert_eq!(summary.len(), 1, "{}", result.stdout);
    assert_eq!(summary[0]["fields"]["message"], "run finished");
    assert_eq!(summary[0]["fields"]["report"]["rows_out"], 300);
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
fn json_log_lines_name_their_shard_attempt_and_stage_thread() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 300);
    let pipeline = Pipeline::new(input, dir.path().join("out")).write(&dir.path().join("p.toml"));
    let mut command = Command::new(bin());
    quiet_env(&mut command)
        .env("SEGPREDICT_LOG", "debug")
        .args(["--log-format", "json", "run"])
        .arg(&pipeline)
        .args(["--shard", "0/2"]);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let events = assert_json_lines(&stderr);
    let spans = |e: &serde_json::Value| -> Vec<(String, String)> {
        let list = e["spans"].as_array().cloned().unwrap_or_default();
        list.iter()
            .flat_map(|s| s.as_object().cloned().unwrap_or_default())
            .filter(|(k, _)| k != "name")
            .map(|(k, v)| (k, v.to_string().trim_matches('"').to_string()))
            .collect()
    };
    let committed: Vec<_> = events
        .iter()
        .filter(|e| e["fields"]["message"] == "appended a commit record")
        .collect();
    assert!(!committed.is_empty(), "no commit record logged: {stderr}");
    for event in &committed {
        let named = spans(event);
        assert_eq!(named[0], ("shard".into(), "0/2".into()), "{event}");
        assert_eq!(named[1], ("attempt".into(), "1".into()), "{event}");
        assert_eq!(named[2].0, "writer", "{event}");
    }
    // Every line logged once the attempt began names the shard.
    let progress = events
        .iter()
        .filter(|e| e["fields"]["message"] == "progress")
        .collect::<Vec<_>>();
    assert!(!progress.is_empty(), "{stderr}");
    for event in progress {
        let want = [
            ("shard".into(), "0/2".into()),
            ("attempt".into(), "1".into()),
        ];
        assert_eq!(spans(event)[..2], want, "{event}");
    }
    // At the default level (warnings and progress) too.
    let mut command = Command::new(bin());
    quiet_env(&mut command)
        .args(["--log-format", "json", "run"])
        .arg(&pipeline)
        .args(["--shard", "1/2"]);
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let events = assert_json_lines(&stderr);
    let line = events.iter().find(|e| e["fields"]["message"] == "progress");
    let line = line.unwrap_or_else(|| panic!("no progress line: {stderr}"));
    assert_eq!(spans(line)[0], ("shard".into(), "1/2".into()), "{line}");
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
    let labels = short_labels(dir.path());
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

#[test]
fn check_gives_the_runs_verdict_on_a_finished_run_and_on_another_model() {
    let dir = tmp();
    let out = dir.path().join("out");
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let pipeline = Pipeline::new(&input, &out);
    let file = pipeline.write(&dir.path().join("p.toml"));
    run_file(&file, &[], &out).expect_code(0);

    let finished = check(&file);
    finished.expect_code(0);
    assert!(
        finished.stdout.contains("(already complete)"),
        "{}",
        finished.describe()
    );

    // The same labels in another order: another label map for the same model.
    let labels = dir.path().join("reordered.labels.txt");
    let mut lines: Vec<String> = std::fs::read_to_string(crate::util::labels())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.reverse();
    std::fs::write(&labels, lines.join("\n") + "\n").unwrap();
    let other = Pipeline { labels, ..pipeline }.write(&dir.path().join("other.toml"));
    let before = std::fs::read_dir(&out).unwrap().count();
    let checked = check(&other);
    let ran = run_file(&other, &[], &out);
    checked.expect_code(2);
    assert_eq!(ran.code, 2, "{}", ran.describe());
    assert!(
        checked.stderr.contains("label map differs"),
        "{}",
        checked.describe()
    );
    assert_eq!(checked.stderr, ran.stderr);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), before);
}

/// Parses Prometheus text with the reference parser (Python's
/// `prometheus_client`); returns `name{labels} -> value` for every sample.
fn parse_prometheus(text: &str) -> std::collections::BTreeMap<String, f64> {
    const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        print(json.dumps([s.name + ("{" + labels + "}" if labels else ""), s.value]))
"#;
    use std::io::Write;
    let mut child = Command::new(python())
        .args(["-c", PARSE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting Python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "not Prometheus text ({}):\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<(String, f64)>(line).unwrap())
        .collect()
}

#[test]
fn metrics_file_parses_as_prometheus_text_with_the_run_totals() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 300);
    let file = dir.path().join("segpredict.prom");
    let pipeline = Pipeline::new(input, dir.path().join("out"));
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    pipeline
        .run(&["--metrics-file", file.to_str().unwrap()])
        .expect_code(0);
    let text = std::fs::read_to_string(&file).unwrap();
    let samples = parse_prometheus(&text);
    let value = |name: &str| {
        *samples
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    assert_eq!(value("segpredict_rows_in"), 300.0);
    assert_eq!(value("segpredict_rows_predicted_total"), 300.0);
    assert_eq!(value("segpredict_rows_rejected_total"), 0.0);
    assert_eq!(value("segpredict_last_run_success"), 1.0);
    assert_eq!(value("segpredict_run_in_progress"), 0.0);
    assert!(value("segpredict_batches_total") >= 1.0);
    assert!(value("segpredict_segments_total") > 300.0);
    assert!(value("segpredict_last_success_timestamp_seconds") >= before.floor());
    for stage in ["readers", "bucketing", "model", "writers"] {
        value(&format!(
            "segpredict_stage_busy_seconds_total{{stage=\"{stage}\"}}"
        ));
    }
    // The report's numbers, not others.
    let report = read_report(&dir.path().join("out"));
    assert_eq!(
        value("segpredict_batches_total"),
        report_u64(&report, "batches") as f64
    );
    assert_eq!(
        value("segpredict_segments_total"),
        report_u64(&report, "segments") as f64
    );
    // Written atomically: no temporary file is left beside it.
    let names: Vec<String> = list_dir(dir.path()).iter().map(|p| file_name(p)).collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn a_failed_run_marks_the_metrics_file_and_keeps_the_last_success_time() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 100);
    let file = dir.path().join("segpredict.prom");
    let metrics = ["--metrics-file", file.to_str().unwrap()];
    let mut pipeline = Pipeline::new(input, dir.path().join("out"));
    pipeline.run(&metrics).expect_code(0);
    let succeeded = parse_prometheus(&std::fs::read_to_string(&file).unwrap());
    let last_success = succeeded["segpredict_last_success_timestamp_seconds"];
    pipeline.model = dir.path().join("no-such-model.pt");
    pipeline.overwrite = true;
    let failed = pipeline.run(&metrics);
    assert_ne!(failed.code, 0, "{}", failed.describe());
    let text = std::fs::read_to_string(&file).unwrap();
    let samples = parse_prometheus(&text);
    assert_eq!(samples["segpredict_last_run_success"], 0.0, "{text}");
    assert_eq!(
        samples["segpredict_last_success_timestamp_seconds"], last_success,
        "{text}"
    );
}

/// Debian's `prometheus-pushgateway` (installed by `just test-deps`, which
/// `just test` runs first), listening on a free loopback port until dropped.
struct Pushgateway {
    child: std::process::Child,
    url: String,
}

impl Pushgateway {
    fn start() -> Self {
        let binary =
            std::env::var("PUSHGATEWAY_BIN").unwrap_or_else(|_| "prometheus-pushgateway".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("finding a free port")
            .port();
        let child = Command::new(&binary)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--persistence.file=")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {binary} ({e}): install it with `just test-deps` (apt-get install prometheus-pushgateway)")
            });
        let gateway = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        // Ready within 10 s, polled every 100 ms.
        for _ in 0..100 {
            if direct()
                .get(format!("{}/-/ready", gateway.url))
                .call()
                .is_ok()
            {
                return gateway;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the Pushgateway on {} did not become ready", gateway.url);
    }

    fn metrics(&self) -> String {
        direct()
            .get(format!("{}/metrics", self.url))
            .call()
            .expect("reading the Pushgateway's metrics")
            .body_mut()
            .read_to_string()
            .unwrap()
    }
}

/// Straight to the loopback gateway, whatever proxy the environment names.
fn direct() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .build()
        .new_agent()
}

impl Drop for Pushgateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn metrics_pushed_to_a_real_pushgateway_read_back() {
    let gateway = Pushgateway::start();
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 200);
    let pipeline = Pipeline::new(input, dir.path().join("nightly"));
    let file = pipeline.write(&dir.path().join("nightly.toml"));
    let mut command = Command::new(bin());
    command
        .arg("run")
        .arg(&file)
        .args(["--pushgateway", &gateway.url])
        .env("NO_PROXY", "127.0.0.1")
        .env("no_proxy", "127.0.0.1");
    let result = run_command(&mut command, &dir.path().join("nightly"));
    result.expect_code(0);
    assert!(!result.stderr.contains("metrics:"), "{}", result.describe());
    let samples = parse_prometheus(&gateway.metrics());
    let grouped = |name: &str| {
        let key = format!("{name}{{instance=\"\",job=\"segpredict\",pipeline=\"nightly\"}}");
        *samples
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in {samples:#?}"))
    };
    assert_eq!(grouped("segpredict_rows_predicted_total"), 200.0);
    assert_eq!(grouped("segpredict_rows_in"), 200.0);
    assert_eq!(grouped("segpredict_last_run_success"), 1.0);
    assert!(grouped("segpredict_last_success_timestamp_seconds") > 0.0);
}

/// The Arrow type of column `name` in a Parquet file.
fn column_type(path: &std::path::Path, name: &str) -> arrow::datatypes::DataType {
    let file = std::fs::File::open(path).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    builder
        .schema()
        .field_with_name(name)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .data_type()
        .clone()
}

/// Rejects' `id` has the input's id type, so they join back on it.
fn rejects_keep_the_id_type(int_ids: bool) {
    use arrow::datatypes::DataType;
    let dir = tmp();
    let bad = dir.path().join("bad.parquet");
    fixture("bad-values", &sample(), &bad, &["--rows", "300"]);
    let input = if int_ids {
        let ints = dir.path().join("bad-int.parquet");
        fixture("int-ids", &bad, &ints, &[]);
        ints
    } else {
        bad
    };
    let expected = if int_ids {
        DataType::Int64
    } else {
        DataType::Utf8
    };
    assert_eq!(column_type(&input, "id"), expected);
    let out = dir.path().join("out");
    Pipeline::new(&input, &out).run(&[]).expect_code(3);
    let rejects = out.join(REJECTS_FILE);
    assert_eq!(column_type(&rejects, "id"), expected);
    assert_eq!(column_type(&part_files(&out)[0], "id"), expected);
    // The values too: row 40's id, read back as text either way.
    let ids: Vec<(Option<String>, i64)> = read_rejects(&out)
        .into_iter()
        .map(|r| (r.id, r.source_row))
        .collect();
    let row_40 = if int_ids {
        "1280".to_string()
    } else {
        read_input(&input)[40].id.clone()
    };
    assert!(ids.contains(&(Some(row_40), 40)), "{ids:?}");
}

#[test]
fn rejects_keep_integer_ids_as_integers() {
    rejects_keep_the_id_type(true);
}

#[test]
fn rejects_keep_string_ids_as_strings() {
    rejects_keep_the_id_type(false);
}

/// The container image's run stage holds the binary and the wheel's
/// `torch/lib` at the path it was built against, and no `LD_LIBRARY_PATH`:
/// the binary must find libtorch by its runpath alone.
#[test]
fn the_binary_finds_libtorch_without_ld_library_path() {
    let output = Command::new(bin())
        .arg("--version")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("segpredict "));
}

/// During a run the metrics file already says how far it got: batches,
/// segments and rows, under the names the final export uses.
#[test]
fn metrics_file_shows_batches_and_rows_while_the_run_goes_on() {
    let dir = tmp();
    let file = dir.path().join("segpredict.prom");
    let out = dir.path().join("out");
    let pipeline = slowed(&sample(), &out).write(&dir.path().join("p.toml"));
    let mut child = spawn(
        &pipeline,
        &[
            "--metrics-file",
            file.to_str().unwrap(),
            "--metrics-every",
            "0.1",
        ],
    );
    let live_with_batches = || {
        std::fs::read_to_string(&file).is_ok_and(|text| {
            text.contains("segpredict_run_in_progress 1")
                && text
                    .lines()
                    .any(|l| l.starts_with("segpredict_batches_total ") && !l.ends_with(" 0"))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let running = wait_until(&mut child, deadline, live_with_batches);
    assert!(running, "the run ended before a live export with batches");
    let samples = parse_prometheus(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(samples["segpredict_rows_in"], SAMPLE_ROWS as f64);
    assert!(samples["segpredict_batches_total"] >= 1.0);
    assert!(samples["segpredict_segments_total"] >= 1.0);
    assert!(samples["segpredict_rows_predicted_total"] < SAMPLE_ROWS as f64);
    assert!(!samples.contains_key("segpredict_gpu_memory_reserved_peak_bytes"));
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let done = parse_prometheus(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(done["segpredict_run_in_progress"], 0.0);
    assert_eq!(done["segpredict_rows_predicted_total"], SAMPLE_ROWS as f64);
}

/// `inspect` reads the segments column too: a corrupt page there is the
/// file's and row group's error, exit 2, as in a run; and `inspect` with
/// nothing to inspect is a usage error (2), not one a retry may fix.
#[test]
fn inspect_a_corrupt_page_is_one_line_naming_file_and_row_group_and_no_path_is_usage() {
    let dir = tmp();
    let input = dir.path().join("corrupt-dict.parquet");
    fixture("corrupt-dict", &sample(), &input, &["--rows", "300"]);
    let run = segpredict(&["inspect", input.to_str().unwrap()]);
    let line = expect_one_line_error(&run);
    assert!(line.contains("corrupt-dict.parquet"), "{line}");
    assert!(line.contains("row group 0"), "{line}");

    let json = segpredict(&["--log-format", "json", "inspect", input.to_str().unwrap()]);
    assert_eq!(json.code, 2, "{}", json.describe());
    for line in json.stderr.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }

    let usage = segpredict(&["inspect"]);
    expect_one_line_error(&usage);
}

/// A rerun that finds the run complete is a success that predicted
/// nothing, not a run left "in progress"; a pipeline file that does not
/// parse is a failed run.
#[test]
fn metrics_file_after_a_rerun_of_a_finished_run_and_after_a_bad_pipeline_file() {
    let dir = tmp();
    let input = sample_subset(dir.path(), "in.parquet", 40);
    let file = dir.path().join("m.prom");
    let pipeline = Pipeline::new(&input, dir.path().join("out"));
    let metrics = ["--metrics-file", file.to_str().unwrap()];
    pipeline.run(&metrics).expect_code(0);
    pipeline.run(&metrics).expect_code(0);
    let again = parse_prometheus(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(again["segpredict_run_in_progress"], 0.0);
    assert_eq!(again["segpredict_last_run_success"], 1.0);
    assert_eq!(again["segpredict_rows_predicted_total"], 0.0);

    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[readers\n").unwrap();
    let run = run_file(&broken, &metrics, &dir.path().join("out"));
    assert_eq!(run.code, 2, "{}", run.describe());
    let failed = parse_prometheus(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(failed["segpredict_run_in_progress"], 0.0);
    assert_eq!(failed["segpredict_last_run_success"], 0.0);
    assert!(failed.contains_key("segpredict_last_success_timestamp_seconds"));
}

/// `check` takes `run`'s flags for what it checks: a truncated file passes
/// with `--on-bad-file skip` (as `run` would predict the rest), and a shard
/// count of 0 is refused as `run` refuses it.
#[test]
fn check_takes_on_bad_file_and_refuses_zero_shards() {
    let dir = tmp();
    let inputs = dir.path().join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    sample_subset(&inputs, "good.parquet", 20);
    fixture(
        "truncated",
        &sample(),
        &inputs.join("bad.parquet"),
        &["--rows", "20"],
    );
    let file = Pipeline::new(&inputs, dir.path().join("out")).write(&dir.path().join("p.toml"));
    let path = file.to_str().unwrap();
    let failing = check(&file);
    assert_eq!(failing.code, 2, "{}", failing.describe());
    segpredict(&["check", path, "--on-bad-file", "skip"]).expect_code(0);
    let zero = segpredict(&["check", path, "--shards", "0"]);
    assert_eq!(zero.code, 2, "{}", zero.describe());
}

/// `speed` times the real model alone through the run's own loader, for
/// both formats: by default at the pipeline's budget, the batches asked, a
/// rate that is the batches' segments over the time.
#[test]
fn speed_times_the_model_alone_in_either_format() {
    let dir = tmp();
    let models = [
        ("torchscript", model()),
        ("aoti", repo().join("models/digits-small.pt2")),
    ];
    for (format, path) in models {
        let mut pipeline = Pipeline::new(sample(), dir.path().join("out"));
        pipeline.model = path;
        pipeline.max_segments = 1024;
        let file = pipeline.write(&dir.path().join(format!("{format}.toml")));
        let json = dir.path().join(format!("{format}.json"));
        let file_arg = file.to_str().unwrap();
        let json_arg = json.to_str().unwrap();
        let timed = segpredict(&["speed", file_arg, "--batches", "4", "--json", json_arg]);
        timed.expect_code(0);
        assert!(
            timed.stdout.contains(&format!(
                "model alone on cpu ({format}, f32): 4 batches of 1024 segments"
            )),
            "{}",
            timed.describe()
        );
        let measured: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let speed = &measured["speed"];
        assert_eq!(measured["format"], format);
        assert_eq!(speed["segments"], 1024);
        assert_eq!(speed["rows"], 57);
        assert_eq!(speed["streams"], 1);
        let seconds = speed["seconds"].as_f64().unwrap();
        let rate = speed["segments_per_s"].as_f64().unwrap();
        assert!(
            (rate * seconds - 4.0 * 1024.0).abs() < 1e-6 * rate * seconds,
            "{measured}"
        );
        let (median, p90) = (
            speed["batch_ms_median"].as_f64().unwrap(),
            speed["batch_ms_p90"].as_f64().unwrap(),
        );
        assert!(
            median > 0.0 && median <= p90 && p90 <= seconds * 1e3,
            "{measured}"
        );
    }
    assert!(
        !dir.path().join("out").exists(),
        "speed touched the output directory"
    );
    let file = Pipeline::new(sample(), dir.path().join("out")).write(&dir.path().join("p.toml"));
    let refused = segpredict(&["speed", file.to_str().unwrap(), "--batches", "0"]);
    assert_eq!(refused.code, 2, "{}", refused.describe());
    assert!(
        refused.stderr.contains("--batches"),
        "{}",
        refused.describe()
    );
    // Streams are CUDA's: on the CPU a second one is refused, saying why.
    let on_cpu = segpredict(&["speed", file.to_str().unwrap(), "--streams", "2"]);
    assert_eq!(on_cpu.code, 2, "{}", on_cpu.describe());
    assert!(
        on_cpu.stderr.contains("--streams 2 needs a CUDA device"),
        "{}",
        on_cpu.describe()
    );
}

/// `speed --input` times the model on the input's own segments and says so;
/// an input it cannot read is an error naming the file.
#[test]
fn speed_on_the_inputs_segments() {
    let dir = tmp();
    let mut pipeline = Pipeline::new(dir.path().join("elsewhere.parquet"), dir.path().join("out"));
    pipeline.max_segments = 512;
    let file = pipeline.write(&dir.path().join("p.toml"));
    let json = dir.path().join("speed.json");
    let sample_arg = sample();
    let args = [
        "speed",
        file.to_str().unwrap(),
        "--batches",
        "2",
        "--input",
        sample_arg.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    let timed = segpredict(&args);
    timed.expect_code(0);
    assert!(
        timed.stdout.contains("rows of ") && timed.stdout.contains("digits.parquet's segments"),
        "{}",
        timed.describe()
    );
    let measured: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(measured["data"], "input", "{measured}");
    assert_eq!(measured["speed"]["segments"], 512, "{measured}");

    let missing = dir.path().join("missing.parquet");
    let refused = segpredict(&[
        "speed",
        file.to_str().unwrap(),
        "--input",
        missing.to_str().unwrap(),
    ]);
    assert_ne!(refused.code, 0, "{}", refused.describe());
    assert!(
        refused.stderr.contains("missing.parquet"),
        "{}",
        refused.describe()
    );
}
