//! The progress display: a bar for a person at a terminal, a log line every
//! half minute for a batch job's log.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(200);
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Shows `rows_written` of `total_rows` until `done` or `cancel` is set.
pub fn show_progress(
    total_rows: u64,
    rows_written: &AtomicU64,
    done: &AtomicBool,
    cancel: &AtomicBool,
) {
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| terminal_bar(total_rows));
    let mut last_log = Instant::now();
    while !done.load(Ordering::Relaxed) && !cancel.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let rows = rows_written.load(Ordering::Relaxed);
        match &bar {
            Some(bar) => bar.set_position(rows),
            None if last_log.elapsed() >= LOG_EVERY => {
                tracing::info!(rows, total_rows, "progress");
                last_log = Instant::now();
            }
            None => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
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
