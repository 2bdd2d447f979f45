//! Runs interrupted on purpose and run again: a pipeline slowed so that a
//! kill lands mid-run after some commits, spawning and killing it, what
//! it committed, and the checks every completed rerun must pass against an
//! uninterrupted run.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// A run slowed to a few seconds on CPU (tiny batches, so thousands of
/// forward passes) that commits every 0.2 s.
pub fn slowed(input: &Path, out: &Path) -> Pipeline {
    let mut p = Pipeline::new(input, out);
    p.max_segments = 64;
    p.max_rows = 16;
    p.batch_rows = 16;
    p.rows_per_file = Some(60);
    p.writers_extra.push("commit_every_s = 0.2".into());
    p
}

/// Starts `segpredict run FILE ARGS` in the background.
pub fn spawn(pipeline_file: &Path, args: &[&str]) -> Child {
    quiet_env(Command::new(bin()).arg("run").arg(pipeline_file).args(args))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting segpredict")
}

/// Waits until `ready` holds, `deadline` passes or `child` exits; returns
/// whether it is still running.
pub fn wait_until(child: &mut Child, deadline: Instant, ready: impl Fn() -> bool) -> bool {
    while Instant::now() < deadline && !ready() {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.try_wait().unwrap().is_none()
}

/// SIGKILLs `child` once `ready` holds or `deadline` passes, whichever is
/// first; returns whether it was still running when killed.
pub fn kill_when(child: &mut Child, deadline: Instant, ready: impl Fn() -> bool) -> bool {
    let running = wait_until(child, deadline, ready);
    child.kill().ok();
    child.wait().unwrap();
    running
}

/// Sends `signal` to `child` (SIGSTOP, SIGCONT), which must take it.
pub fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on a child this test started and has not reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({}, {signal})", child.id());
}

/// Polls `ready` until it holds; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `child`'s exit code and stderr, once it ends.
pub fn finished(child: Child) -> (Option<i32>, String) {
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

/// Every record of every shard's commit log in a local output.
fn log_records(out: &Path) -> Vec<serde_json::Value> {
    let mut records = Vec::new();
    for shard in list_dir(&out.join("_progress/log")) {
        for record in list_dir(&shard) {
            if file_name(&record).starts_with('.') {
                continue;
            }
            if let Ok(bytes) = std::fs::read(&record) {
                records.extend(serde_json::from_slice::<serde_json::Value>(&bytes).ok());
            }
        }
    }
    records
}

/// The files commit records name, with their kind and rows.
pub fn recorded_files(records: &[serde_json::Value]) -> Vec<(String, String, u64)> {
    records
        .iter()
        .filter(|r| r["kind"] == "commit")
        .flat_map(|r| r["files"].as_array().cloned().unwrap_or_default())
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (text("key"), text("kind"), f["rows"].as_u64().unwrap_or(0))
        })
        .collect()
}

/// Whether a commit record of a local output names a part whose name
/// starts with `prefix` (`part-` for any; `part-s001of003-` for shard 1 of
/// 3): the part is committed, not merely uploaded.
pub fn has_part(out: &Path, prefix: &str) -> bool {
    recorded_files(&log_records(out))
        .iter()
        .any(|(key, _, _)| key.starts_with(prefix))
}

/// Rows in the part and rejects files the commit records name.
pub fn committed_rows(out: &Path) -> usize {
    recorded_files(&log_records(out))
        .iter()
        .filter(|(_, kind, _)| kind == "part" || kind == "rejects")
        .map(|(_, _, rows)| *rows as usize)
        .sum()
}

/// Temporary files anywhere under `out`.
pub fn temporary_files(out: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for folder in [out.to_path_buf(), out.join("_progress")] {
        for p in list_dir(&folder) {
            if file_name(&p).ends_with(".inprogress") {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

/// An uninterrupted run's ids and predictions, which every interrupted
/// and rerun output must equal.
pub struct Reference {
    pub ids: Vec<String>,
    pub predictions: HashMap<String, (i32, f32)>,
}

impl Reference {
    /// Runs `pipeline` over `input` to completion.
    pub fn of(pipeline: &Pipeline, input: &Path) -> Self {
        let ids = ids_of(&read_input(input));
        pipeline.run(&[]).expect_code(0);
        let predictions = predictions(&read_output(&pipeline.output));
        assert_eq!(predictions.len(), ids.len());
        Self { ids, predictions }
    }

    /// The checks every completed run of the input must pass: exit 0, each
    /// id once, the reference's predictions, `_SUCCESS`, no temporary file,
    /// and `_segpredict/batches.parquet` holding every batch the report counts, of
    /// the attempts it counts.
    pub fn assert_complete(&self, run: &RunResult) {
        run.expect_code(0);
        let out = &run.out_dir;
        let output = read_output(out);
        let ids = self.ids.iter().map(String::as_str);
        assert_each_id_once(ids, &output, &read_rejects(out));
        assert_same_predictions(&output, &self.predictions);
        assert!(
            out.join("_SUCCESS").is_file(),
            "no _SUCCESS: {}",
            run.describe()
        );
        let temporary = temporary_files(out);
        assert!(temporary.is_empty(), "{temporary:?}");
        let report = read_report(out);
        let records = read_batch_records(out);
        assert_eq!(records.len() as u64, report_u64(&report, "batches"));
        let attempts = record_attempts(&records);
        let most = report_u64(&report, "attempts");
        assert!(
            attempts.iter().all(|&a| a >= 1 && a <= most),
            "{attempts:?}"
        );
    }
}

/// The attempts that ran the batches of `_segpredict/batches.parquet`.
pub fn record_attempts(records: &[serde_json::Value]) -> BTreeSet<u64> {
    records
        .iter()
        .map(|r| r["attempt"].as_u64().expect("a batch record's attempt"))
        .collect()
}

/// Label ids and scores of an output, by id.
pub fn predictions(output: &[OutRow]) -> HashMap<String, (i32, f32)> {
    by_id(output)
        .into_iter()
        .map(|(id, r)| (id.to_string(), (r.label_id, r.score)))
        .collect()
}

fn assert_same_predictions(output: &[OutRow], reference: &HashMap<String, (i32, f32)>) {
    let got = predictions(output);
    assert_eq!(got.len(), reference.len(), "row counts differ");
    for (id, (label_id, score)) in reference {
        let (l, s) = got[id];
        assert!(
            l == *label_id && (s - score).abs() <= 1e-4,
            "id {id}: label_id {l} score {s}, uninterrupted {label_id} {score}"
        );
    }
}

/// A deterministic pseudo-random sequence (SplitMix64), seeded per test run.
pub struct Moments(u64);

impl Moments {
    pub fn seeded() -> Self {
        let seed = std::env::var("SEGPREDICT_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("kill moments: SEGPREDICT_TEST_SEED={seed}");
        Self(seed)
    }

    /// Uniform in [0, 1).
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
    }
}
