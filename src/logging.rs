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
        // `spans`: the shard, attempt and stage thread (`reader`,
        // `bucketing`, `worker`, `writer`) a line came from, outermost first.
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(false)
            .with_span_list(true)
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
pub fn error(error: &segpredict_core::exit::Error) {
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

/// The command's result on stdout: `text` for a person; for a log pipeline
/// (`--log-format json`) one JSON object shaped like the log lines on
/// stderr (`level`, `target`, `fields` with the `message`), carrying
/// `fields`, so that a container's merged stdout and stderr hold only
/// JSON. The person-readable text is then in `fields.summary`.
pub fn result(text: &str, message: &str, fields: serde_json::Value) {
    match format() {
        LogFormat::Text => println!("{text}"),
        LogFormat::Json => println!("{}", result_line(text, message, fields)),
    }
}

fn result_line(text: &str, message: &str, fields: serde_json::Value) -> String {
    let mut all = serde_json::Map::new();
    all.insert("message".into(), message.into());
    all.insert("summary".into(), text.into());
    if let serde_json::Value::Object(extra) = fields {
        all.extend(extra);
    }
    serde_json::json!({
        "level": "INFO",
        "target": "segpredict::result",
        "fields": all,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_one_json_line_with_the_text_inside() {
        let line = result_line(
            "rows: 3\npredicted: 3",
            "run finished",
            serde_json::json!({ "report": { "rows_in": 3 } }),
        );
        assert!(!line.contains('\n'), "{line}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["fields"]["message"], "run finished");
        assert_eq!(value["fields"]["report"]["rows_in"], 3);
        assert_eq!(value["fields"]["summary"], "rows: 3\npredicted: 3");
    }
}
