//! Logs on stderr: text for a person, or one JSON object per line for a log
//! pipeline (`--log-format json`). Everything segpredict itself writes to
//! stderr goes through here, so a JSON log holds nothing but JSON lines.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// How stderr lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for a person; a progress bar on a terminal.
    #[default]
    Text,
    /// One JSON object per line (tracing's JSON format); no colour, no bar.
    Json,
}

/// The target of progress events, so the default filter can let them
/// through while other info events stay quiet.
pub const PROGRESS_TARGET: &str = "segpredict::progress";

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the subscriber; `SEGPREDICT_LOG` (an `EnvFilter`) picks the
/// levels, by default warnings and progress.
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_env("SEGPREDICT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour codes help a person at a terminal and garble a job's log file.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(false)
            .init(),
    }
}

fn default_filter() -> String {
    format!("warn,{PROGRESS_TARGET}=info")
}

pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// A progress bar is drawn only for a person: text logs on a terminal.
pub fn draws_progress_bar() -> bool {
    format() == LogFormat::Text && std::io::stderr().is_terminal()
}

/// The error that ends the command: one line, `segpredict: error: ...` in
/// text, an ERROR event in JSON.
pub fn error(error: &anyhow::Error) {
    match format() {
        LogFormat::Text => eprintln!("segpredict: error: {error:#}"),
        LogFormat::Json => tracing::error!(error = %format!("{error:#}"), "segpredict failed"),
    }
}

/// A notice for the person or the log, such as rows rejected or an interrupt.
pub fn notice(message: &str) {
    match format() {
        LogFormat::Text => eprintln!("segpredict: {message}"),
        LogFormat::Json => tracing::warn!("{message}"),
    }
}
