//! The progress display: a bar for a person at a terminal, a log line every
//! half minute for a batch job's log (and for `--log-format json`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use segpredict_core::message::LiveCounters;

const TICK: Duration = Duration::from_millis(200);
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Shows the rows finished (predicted or rejected) of `total_rows` until
/// `stages_done` closes (its sender dropped) or `cancel` is set, and hands
/// what the run has done to the live metrics. Waiting on the channel rather
/// than sleeping a tick lets the run end as soon as its stages have: a
/// sleeping display added half a tick (0.1 s) to every run.
pub fn show_progress(
    total_rows: u64,
    live: &LiveCounters,
    stages_done: &Receiver<()>,
    cancel: &AtomicBool,
) {
    let bar = crate::logging::draws_progress_bar().then(|| terminal_bar(total_rows));
    let mut last_log = Instant::now();
    while !cancel.load(Ordering::Relaxed) {
        if stages_done.recv_timeout(TICK) != Err(RecvTimeoutError::Timeout) {
            break;
        }
        let snapshot = live.snapshot();
        let rows = snapshot.rows_written + snapshot.rows_rejected;
        crate::metrics::note_progress(snapshot, total_rows);
        match &bar {
            Some(bar) => bar.set_position(rows),
            None if last_log.elapsed() >= LOG_EVERY => {
                log_progress(rows, total_rows);
                last_log = Instant::now();
            }
            None => {}
        }
    }
    match bar {
        Some(bar) => bar.finish_and_clear(),
        // The log's last progress line says where the stages ended.
        None => log_progress(live.rows_finished(), total_rows),
    }
}

/// Under its own target, which the default filter lets through.
fn log_progress(rows: u64, total_rows: u64) {
    tracing::info!(target: crate::logging::PROGRESS_TARGET, rows, total_rows, "progress");
}

fn terminal_bar(total_rows: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total_rows);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} rows ({per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}
