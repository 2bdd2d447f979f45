//! Prometheus metrics for the systems that watch a nightly job: a text file
//! for node_exporter's textfile collector (`--metrics-file`) and pushes to a
//! Pushgateway (`--pushgateway`), both in the text exposition format 0.0.4.
//!
//! During a run an exporter thread rewrites the file every few seconds and
//! pushes every minute with what is known live (rows predicted so far,
//! throughput); at the end the full set from the run report is written and
//! pushed once more. A metrics failure is logged, never fails the run: the
//! predictions matter more than their telemetry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{Counter, CounterVec, Encoder, Gauge, Opts, Registry, TextEncoder};

use segpredict_core::message::LiveSnapshot;
use segpredict_core::shard::ShardSpec;
use segpredict_report::RunReport;

/// How often the Pushgateway is pushed to during a run.
const PUSH_EVERY: Duration = Duration::from_secs(60);
/// A push that takes longer is abandoned (and retried at the next one).
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// The exporter thread's tick: how soon it notices the run ended.
const TICK: Duration = Duration::from_millis(250);
const LAST_SUCCESS: &str = "segpredict_last_success_timestamp_seconds";

/// Where metrics go.
#[derive(Debug, Clone, Default)]
pub struct MetricsTargets {
    pub file: Option<PathBuf>,
    /// How often the file is rewritten during a run.
    pub file_every: Duration,
    /// The Pushgateway's base URL, e.g. `http://pushgateway:9091`.
    pub pushgateway: Option<String>,
    /// The `job` grouping label of pushes.
    pub job: String,
    /// The `pipeline` grouping label of pushes: the pipeline file's stem, so
    /// two nightly pipelines do not replace each other's metrics.
    pub pipeline: String,
    /// A sharded run's shard: a `shard` label on every metric (and a
    /// grouping label of pushes), so the shards of one night, on one host
    /// or one Pushgateway, do not overwrite each other.
    pub shard: Option<ShardSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("building the metrics")]
    Build(#[from] prometheus::Error),
    #[error("writing metrics file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pushing metrics to {url}")]
    Push {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
}

/// What the run has done so far and its rows in; the progress display
/// keeps it current.
static LIVE: Mutex<(LiveSnapshot, u64)> = Mutex::new((
    LiveSnapshot {
        rows_written: 0,
        rows_rejected: 0,
        batches: 0,
        segments: 0,
        padded_segments: 0,
        split_batches: 0,
        allocated_peak: None,
        reserved_peak: None,
    },
    0,
));

/// Called by the progress display on every tick.
pub fn note_progress(done: LiveSnapshot, rows_in: u64) {
    if let Ok(mut live) = LIVE.lock() {
        *live = (done, rows_in);
    }
}

fn live_progress() -> (LiveSnapshot, u64) {
    LIVE.lock().map_or_else(|e| *e.into_inner(), |live| *live)
}

/// The exporter thread of one run.
pub struct Exporter {
    targets: Arc<MetricsTargets>,
    /// The earlier file's last-success lines, kept until this run succeeds.
    last_success: Option<String>,
    started: SystemTime,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    /// Starts exporting live metrics; `None` when no target is set.
    pub fn start(targets: MetricsTargets) -> Option<Self> {
        if targets.file.is_none() && targets.pushgateway.is_none() {
            return None;
        }
        // Read before the first live write replaces the file.
        let last_success = targets.file.as_deref().and_then(previous_last_success);
        let targets = Arc::new(targets);
        let started = SystemTime::now();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (targets, stop) = (targets.clone(), stop.clone());
            let last_success = last_success.clone();
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || export_live(&targets, last_success.as_deref(), started, &stop))
                .ok()
        };
        Some(Self {
            targets,
            last_success,
            started,
            stop,
            thread,
        })
    }

    /// Stops the live exports and exports a success that predicted
    /// nothing: for a run that found its work already done.
    pub fn finish_nothing_to_do(mut self) {
        self.stop_live();
        match live_metrics(&self.targets, self.started, Stage::NothingToDo) {
            Ok(text) => export(&self.targets, &text, None, true),
            Err(e) => warn(&e),
        }
    }

    fn stop_live(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Stops the live exports and exports the run's outcome: the full set
    /// from `report` on success, the live set marked failed otherwise.
    pub fn finish(mut self, report: Option<&RunReport>) {
        self.stop_live();
        let text = match report {
            Some(report) => final_metrics(&self.targets, report, self.started, SystemTime::now()),
            None => live_metrics(&self.targets, self.started, Stage::Failed),
        };
        let keep = report
            .is_none()
            .then_some(self.last_success.as_deref())
            .flatten();
        match text {
            Ok(text) => export(&self.targets, &text, keep, report.is_some()),
            Err(e) => warn(&e),
        }
    }
}

fn export_live(
    targets: &MetricsTargets,
    last_success: Option<&str>,
    started: SystemTime,
    stop: &AtomicBool,
) {
    let mut last_file: Option<Instant> = None;
    let mut last_push: Option<Instant> = None;
    let due = |last: Option<Instant>, every: Duration| last.is_none_or(|t| t.elapsed() >= every);
    while !stop.load(Ordering::Relaxed) {
        let file_due = targets.file.is_some() && due(last_file, targets.file_every);
        let push_due = targets.pushgateway.is_some() && due(last_push, PUSH_EVERY);
        if file_due || push_due {
            let text = match live_metrics(targets, started, Stage::Running) {
                Ok(text) => text,
                Err(e) => return warn(&e),
            };
            if let (true, Some(path)) = (file_due, &targets.file) {
                report_failure(write_file(path, &text, last_success));
                last_file = Some(Instant::now());
            }
            if let (true, Some(url)) = (push_due, &targets.pushgateway) {
                report_failure(push(url, targets, &text, false));
                last_push = Some(Instant::now());
            }
        }
        std::thread::sleep(TICK);
    }
}

/// The end of the run: a success replaces the pushed group whole; a failure
/// only updates its own metrics, so the last success time survives it.
fn export(targets: &MetricsTargets, text: &str, keep: Option<&str>, success: bool) {
    if let Some(path) = &targets.file {
        report_failure(write_file(path, text, keep));
    }
    if let Some(url) = &targets.pushgateway {
        report_failure(push(url, targets, text, success));
    }
}

fn report_failure(result: Result<(), MetricsError>) {
    if let Err(e) = result {
        warn(&e);
    }
}

fn warn(e: &MetricsError) {
    crate::logging::notice(&format!("metrics: {e}{}", source_chain(e)));
}

/// The error's sources as `: a: b`, for a one-line notice.
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut text = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        text += ": ";
        text += &s.to_string();
        source = s.source();
    }
    text
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The metrics of one export, on their own registry. Counters hold the
/// run's totals: each run starts from zero, which Prometheus' counter
/// semantics take as a reset.
struct Metrics {
    registry: Registry,
}

impl Metrics {
    fn new(targets: &MetricsTargets) -> Result<Self, prometheus::Error> {
        let labels = targets
            .shard
            .map(|shard| HashMap::from([("shard".to_string(), shard.index.to_string())]));
        Ok(Self {
            registry: Registry::new_custom(None, labels)?,
        })
    }

    /// A `*_total` name is a counter (the run's total), anything else a gauge.
    fn set(&self, name: &str, help: &str, value: f64) -> Result<(), prometheus::Error> {
        let opts = Opts::new(name, help);
        if name.ends_with("_total") {
            let counter = Counter::with_opts(opts)?;
            counter.inc_by(value.max(0.0));
            return self.registry.register(Box::new(counter));
        }
        let gauge = Gauge::with_opts(opts)?;
        gauge.set(value);
        self.registry.register(Box::new(gauge))
    }

    /// Counters of one name told apart by `label`.
    fn set_labelled(
        &self,
        name: &str,
        help: &str,
        label: &str,
        values: &[(&str, f64)],
    ) -> Result<(), prometheus::Error> {
        let counters = CounterVec::new(Opts::new(name, help), &[label])?;
        for (key, value) in values {
            counters.with_label_values(&[*key]).inc_by(value.max(0.0));
        }
        self.registry.register(Box::new(counters))
    }

    fn text(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

fn common(metrics: &Metrics, started: SystemTime, running: bool) -> Result<(), prometheus::Error> {
    metrics.set(
        "segpredict_run_start_timestamp_seconds",
        "When the run started (Unix time).",
        unix_seconds(started),
    )?;
    metrics.set(
        "segpredict_run_in_progress",
        "1 while the run goes on, 0 once it ended.",
        if running { 1.0 } else { 0.0 },
    )
}

/// Where a run stands when its live metrics are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    Failed,
    /// It found its work already done (`_SUCCESS`, or its shard's marker):
    /// a success that predicted nothing.
    NothingToDo,
}

/// What is known during the run, after a failed one, or after one that
/// found nothing to do.
fn live_metrics(
    targets: &MetricsTargets,
    started: SystemTime,
    stage: Stage,
) -> Result<String, MetricsError> {
    let metrics = Metrics::new(targets)?;
    common(&metrics, started, stage == Stage::Running)?;
    let elapsed = started.elapsed().map_or(0.0, |d| d.as_secs_f64());
    let (done, rows_in) = live_progress();
    for (name, help, value) in live_values(&done, rows_in, elapsed) {
        metrics.set(name, help, value)?;
    }
    store_metrics(&metrics, Some(segpredict_storage::requests()))?;
    if stage != Stage::Running {
        let success = stage == Stage::NothingToDo;
        metrics.set(
            "segpredict_last_run_success",
            "1 if the last run completed, 0 if it failed.",
            if success { 1.0 } else { 0.0 },
        )?;
        if success {
            metrics.set(
                LAST_SUCCESS,
                "When a run last completed (Unix time).",
                unix_seconds(SystemTime::now()),
            )?;
        }
    }
    Ok(metrics.text()?)
}

/// What is known during a run: the writers' counts, the rows in, the time.
struct Live {
    done: LiveSnapshot,
    rows_in: u64,
    elapsed_s: f64,
}

type FromLive = fn(&Live) -> Option<f64>;

/// Name, help and value of what is known during a run, under the names a
/// completed run exports them by, so a dashboard reads one series; `None`
/// leaves it out (no device memory on CPU).
const FROM_LIVE: &[(&str, &str, FromLive)] = &[
    ("segpredict_rows_in", "Rows in the run's input.", |l| {
        Some(l.rows_in as f64)
    }),
    (
        "segpredict_rows_predicted_total",
        "Rows predicted and written.",
        |l| Some(l.done.rows_written as f64),
    ),
    (
        "segpredict_rows_rejected_total",
        "Rows rejected (see _rejects/rejects.parquet).",
        |l| Some(l.done.rows_rejected as f64),
    ),
    ("segpredict_segments_total", "Segments predicted.", |l| {
        Some(l.done.segments as f64)
    }),
    (
        "segpredict_padding_segments_total",
        "Zero segments added to pad batches to size classes.",
        |l| Some(l.done.padded_segments.saturating_sub(l.done.segments) as f64),
    ),
    ("segpredict_batches_total", "Forward passes.", |l| {
        Some(l.done.batches as f64)
    }),
    (
        "segpredict_split_batches_total",
        "Forward passes of pieces split after an out-of-memory.",
        |l| Some(l.done.split_batches as f64),
    ),
    (
        "segpredict_gpu_memory_allocated_peak_bytes",
        "Peak device memory allocated by tensors.",
        |l| l.done.allocated_peak.map(|b| b as f64),
    ),
    (
        "segpredict_gpu_memory_reserved_peak_bytes",
        "Peak device memory reserved by the caching allocator.",
        |l| l.done.reserved_peak.map(|b| b as f64),
    ),
    (
        "segpredict_run_duration_seconds",
        "Wall time of the run so far.",
        |l| Some(l.elapsed_s),
    ),
    (
        "segpredict_rows_per_second",
        "Rows predicted per second of wall time.",
        |l| Some(l.done.rows_written as f64 / l.elapsed_s.max(1e-9)),
    ),
    (
        "segpredict_segments_per_second",
        "Segments predicted per second of wall time.",
        |l| Some(l.done.segments as f64 / l.elapsed_s.max(1e-9)),
    ),
];

fn live_values(
    done: &LiveSnapshot,
    rows_in: u64,
    elapsed_s: f64,
) -> Vec<(&'static str, &'static str, f64)> {
    let live = Live {
        done: *done,
        rows_in,
        elapsed_s,
    };
    FROM_LIVE
        .iter()
        .filter_map(|(name, help, value)| value(&live).map(|v| (*name, *help, v)))
        .collect()
}

/// Object storage's requests, when the run made any: a flaky network shows
/// as failures (each retried) before it shows as a failed run.
fn store_metrics(
    metrics: &Metrics,
    requests: Option<segpredict_core::requests::StoreRequests>,
) -> Result<(), prometheus::Error> {
    let Some(r) = requests.filter(|r| r.requests > 0) else {
        return Ok(());
    };
    let values = [
        ("segpredict_store_requests_total", "HTTP requests to object storage, retries included.", r.requests),
        ("segpredict_store_request_failures_total", "Requests to object storage that failed (5xx, 429, reset, timeout, cut-short body); each was retried unless retries ran out.", r.failed),
        ("segpredict_store_read_bytes_total", "Bytes received from object storage.", r.bytes_read),
        ("segpredict_store_written_bytes_total", "Bytes sent to object storage.", r.bytes_written),
    ];
    for (name, help, value) in values {
        metrics.set(name, help, value as f64)?;
    }
    Ok(())
}

/// A metric read from a completed run's report; `None` leaves it out (no
/// device memory on CPU, no budget for the `rows` strategy).
type FromReport = fn(&RunReport) -> Option<f64>;

/// Name, help and value of every metric a completed run exports, besides
/// the stage busy times and the timestamps.
const FROM_REPORT: &[(&str, &str, FromReport)] = &[
    ("segpredict_rows_in", "Rows in the run's input.", |r| {
        Some(r.rows.rows_in as f64)
    }),
    (
        "segpredict_rows_predicted_total",
        "Rows predicted and written.",
        |r| Some(r.rows.rows_out as f64),
    ),
    (
        "segpredict_rows_rejected_total",
        "Rows rejected (see _rejects/rejects.parquet).",
        |r| Some(r.rows.rows_rejected as f64),
    ),
    ("segpredict_segments_total", "Segments predicted.", |r| {
        Some(r.segments as f64)
    }),
    (
        "segpredict_padding_segments_total",
        "Zero segments added to pad batches to size classes.",
        |r| Some(r.padded_segments.saturating_sub(r.segments) as f64),
    ),
    ("segpredict_batches_total", "Forward passes.", |r| {
        Some(r.batches as f64)
    }),
    (
        "segpredict_oversized_batches_total",
        "Rows over the budget that ran alone.",
        |r| Some(r.oversized_batches as f64),
    ),
    (
        "segpredict_oom_retries_total",
        "Out-of-memory events recovered by splitting a batch.",
        |r| Some(r.oom_events as f64),
    ),
    (
        "segpredict_budget_segments",
        "The segment budget at the end of the run.",
        |r| r.final_max_segments.map(|b| b as f64),
    ),
    (
        "segpredict_gpu_memory_allocated_peak_bytes",
        "Peak device memory allocated by tensors.",
        |r| r.memory.as_ref().map(|m| m.peak_allocated_bytes as f64),
    ),
    (
        "segpredict_gpu_memory_reserved_peak_bytes",
        "Peak device memory reserved by the caching allocator.",
        |r| r.memory.as_ref().map(|m| m.peak_reserved_bytes as f64),
    ),
    (
        "segpredict_gpu_memory_growth_events_total",
        "Batches after warm-up whose reserved peak passed every earlier one.",
        |r| {
            r.memory
                .as_ref()
                .map(|m| m.reserved_growth_events_after_warmup as f64)
        },
    ),
    (
        "segpredict_run_duration_seconds",
        "Wall time of the run.",
        |r| Some(r.wall_s),
    ),
    (
        "segpredict_rows_per_second",
        "Rows predicted per second of wall time.",
        |r| Some(r.rows_per_s),
    ),
    (
        "segpredict_segments_per_second",
        "Segments predicted per second of wall time.",
        |r| Some(r.segments_per_s),
    ),
];

/// The full set, from a completed run's report.
fn final_metrics(
    targets: &MetricsTargets,
    report: &RunReport,
    started: SystemTime,
    now: SystemTime,
) -> Result<String, MetricsError> {
    let metrics = Metrics::new(targets)?;
    common(&metrics, started, false)?;
    for (name, help, value) in FROM_REPORT {
        if let Some(value) = value(report) {
            metrics.set(name, help, value)?;
        }
    }
    store_metrics(&metrics, report.store_requests)?;
    let busy = &report.busy_s;
    metrics.set_labelled(
        "segpredict_stage_busy_seconds_total",
        "Seconds each stage spent working, summed over its threads.",
        "stage",
        &[
            ("readers", busy.readers),
            ("bucketing", busy.bucketing),
            ("model", busy.model),
            ("writers", busy.writers),
        ],
    )?;
    metrics.set(
        "segpredict_last_run_success",
        "1 if the last run completed, 0 if it failed.",
        1.0,
    )?;
    metrics.set(
        LAST_SUCCESS,
        "When a run last completed (Unix time).",
        unix_seconds(now),
    )?;
    Ok(metrics.text()?)
}

/// The last-success lines of an earlier file, so a failed run does not erase
/// when the job last succeeded.
fn previous_last_success(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with(LAST_SUCCESS)
                || l.starts_with(&format!("# HELP {LAST_SUCCESS} "))
                || l.starts_with(&format!("# TYPE {LAST_SUCCESS} "))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n") + "\n")
}

/// Written under a temporary name in the same folder, then renamed, so the
/// collector never reads half a file. Its name does not end in `.prom`, so
/// the collector ignores it meanwhile.
fn write_file(path: &Path, text: &str, extra: Option<&str>) -> Result<(), MetricsError> {
    let file_error = |source| MetricsError::File {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let body = format!("{text}{}", extra.unwrap_or(""));
    std::fs::write(&temp, body).map_err(file_error)?;
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        file_error(e)
    })
}

/// `PUT` replaces the group's metrics; `POST` replaces only those pushed.
fn push(
    base: &str,
    targets: &MetricsTargets,
    text: &str,
    replace: bool,
) -> Result<(), MetricsError> {
    let mut url = format!(
        "{}/metrics/job/{}/pipeline/{}",
        base.trim_end_matches('/'),
        path_segment(&targets.job),
        path_segment(&targets.pipeline)
    );
    if let Some(shard) = targets.shard {
        url.push_str(&format!("/shard/{}", shard.index));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(PUSH_TIMEOUT))
        .build()
        .into();
    let request = if replace {
        agent.put(&url)
    } else {
        agent.post(&url)
    };
    request
        .content_type(TextEncoder::new().format_type())
        .send(text)
        .map(|_| ())
        .map_err(|source| MetricsError::Push {
            url,
            source: Box::new(source),
        })
}

/// Grouping label values go in the URL path: keep them to safe characters.
fn path_segment(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_values_carry_what_the_writers_counted_under_the_final_names() {
        let done = LiveSnapshot {
            rows_written: 90,
            rows_rejected: 10,
            batches: 3,
            segments: 1000,
            padded_segments: 1200,
            split_batches: 1,
            allocated_peak: Some(5 << 20),
            reserved_peak: Some(6 << 20),
        };
        let values: std::collections::HashMap<&str, f64> = live_values(&done, 100, 2.0)
            .into_iter()
            .map(|(name, _, value)| (name, value))
            .collect();
        assert_eq!(values["segpredict_rows_in"], 100.0);
        assert_eq!(values["segpredict_rows_rejected_total"], 10.0);
        assert_eq!(values["segpredict_padding_segments_total"], 200.0);
        assert_eq!(values["segpredict_segments_per_second"], 500.0);
        assert_eq!(
            values["segpredict_gpu_memory_reserved_peak_bytes"],
            6.0 * 1048576.0
        );
        let final_names: Vec<&str> = FROM_REPORT.iter().map(|(name, _, _)| *name).collect();
        for name in values
            .keys()
            .filter(|n| **n != "segpredict_split_batches_total")
        {
            assert!(final_names.contains(name), "{name} is not a final metric");
        }
        let on_cpu = LiveSnapshot {
            allocated_peak: None,
            reserved_peak: None,
            ..done
        };
        assert!(live_values(&on_cpu, 100, 2.0)
            .iter()
            .all(|(name, _, _)| !name.contains("gpu_memory")));
    }

    #[test]
    fn a_sharded_run_labels_every_metric_with_its_shard() {
        let targets = MetricsTargets {
            shard: Some(ShardSpec::new(2, 4).unwrap()),
            ..MetricsTargets::default()
        };
        let text = live_metrics(&targets, SystemTime::now(), Stage::Running).unwrap();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(!samples.is_empty());
        for sample in samples {
            assert!(sample.contains("shard=\"2\""), "{sample}");
        }
        let whole = live_metrics(
            &MetricsTargets::default(),
            SystemTime::now(),
            Stage::Running,
        )
        .unwrap();
        assert!(!whole.contains("shard="), "{whole}");
    }
}
