//! A row group that stops decoding mid-run under `on_bad_file = "skip"`:
//! its rows not yet sent become rejects, so every input row still ends in
//! the output or in `_rejects.parquet` exactly once, and the run goes on.
//! The rows' ids are unknown (they could not be decoded): each reject names
//! its file and row, which is what resuming marks finished rows by.

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;

use super::{ReadPlan, ReaderError, Unit};
use segpredict_core::message::{Origin, ReaderStats, Reject, RejectKind, RowChunk};

/// The rows of one unit from `first_row` on, with why they cannot be read.
#[derive(Debug)]
pub(crate) struct BadUnit {
    file_idx: u32,
    first_row: u64,
    end_row: u64,
    reason: String,
}

impl BadUnit {
    /// The rows of `unit` from `next_row` (the first not sent) to its end.
    pub(crate) fn new(unit: Unit, next_row: u64, error: &ReaderError) -> Self {
        let reason = one_line(error);
        tracing::warn!(
            file_idx = unit.file_idx,
            row_group = unit.row_group,
            rows = unit.first_row + unit.rows - next_row,
            %reason,
            "rejecting the rows of a row group that cannot be decoded"
        );
        Self {
            file_idx: unit.file_idx,
            first_row: next_row,
            end_row: unit.first_row + unit.rows,
            reason,
        }
    }

    /// Sends the rejects in chunks of `chunk_rows` (rows an earlier attempt
    /// finished left out), so a large row group never sits in memory as
    /// rejects. Returns false when the run is ending (cancelled, or the
    /// downstream stage has gone).
    pub(crate) fn send(
        &self,
        plan: &ReadPlan,
        chunk_rows: usize,
        out: &Sender<RowChunk>,
        cancel: &AtomicBool,
        stats: &mut ReaderStats,
    ) -> bool {
        let mut row_idx = self.first_row;
        while row_idx < self.end_row {
            if cancel.load(Ordering::Relaxed) {
                return false;
            }
            let end = self.end_row.min(row_idx + chunk_rows.max(1) as u64);
            let rejects: Vec<Reject> = (row_idx..end)
                .map(|row_idx| Origin {
                    file_idx: self.file_idx,
                    row_idx,
                })
                .filter(|origin| !plan.is_done(origin))
                .map(|origin| self.reject(origin))
                .collect();
            row_idx = end;
            if rejects.is_empty() {
                continue;
            }
            stats.rows += rejects.len() as u64;
            stats.rejects += rejects.len() as u64;
            let chunk = RowChunk {
                rows: Vec::new(),
                rejects,
            };
            if out.send(chunk).is_err() {
                return false;
            }
        }
        true
    }

    fn reject(&self, origin: Origin) -> Reject {
        Reject {
            id: None,
            origin,
            kind: RejectKind::BadRowGroup,
            reason: self.reason.clone(),
        }
    }
}

/// The error and its causes, in one line.
pub(crate) fn one_line(error: &ReaderError) -> String {
    let mut line = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        line += &format!(": {c}");
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> ReadPlan {
        let sample = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("sample_data/digits.parquet");
        let text = format!(
            "path = {:?}\n[columns]\nid = \"id\"\n\
             segments = {{ name = \"segments\", dtype = \"u8\", shape = [1, 8, 8] }}\n",
            sample.display().to_string()
        );
        let config: super::super::ReaderConfig = toml::from_str(&text).unwrap();
        config.plan().unwrap()
    }

    #[test]
    fn the_rows_not_yet_sent_are_rejected_once_each_in_bounded_chunks() {
        let unit = Unit {
            file_idx: 0,
            row_group: 2,
            first_row: 100,
            rows: 50,
        };
        let error = ReaderError::Config("a corrupt page".into());
        let bad = BadUnit::new(unit, 110, &error);
        let (tx, rx) = crossbeam_channel::bounded(16);
        let mut stats = ReaderStats::default();
        assert!(bad.send(&plan(), 16, &tx, &AtomicBool::new(false), &mut stats));
        drop(tx);
        let chunks: Vec<RowChunk> = rx.iter().collect();
        let sizes: Vec<usize> = chunks.iter().map(|c| c.rejects.len()).collect();
        assert_eq!(sizes, [16, 16, 8]);
        let rejects: Vec<&Reject> = chunks.iter().flat_map(|c| &c.rejects).collect();
        let rows: Vec<u64> = rejects.iter().map(|r| r.origin.row_idx).collect();
        assert_eq!(rows, (110..150).collect::<Vec<_>>());
        assert!(rejects.iter().all(|r| r.id.is_none()
            && r.kind == RejectKind::BadRowGroup
            && r.reason == "invalid [readers] section: a corrupt page"));
        assert_eq!((stats.rows, stats.rejects), (40, 40));
    }
}
