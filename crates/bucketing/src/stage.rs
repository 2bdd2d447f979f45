//! The bucketing stage: rows in, contiguous padded batches out.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::{Bucketer, BucketingConfig, BucketingError, PlannedBatch};
use segpredict_core::message::{
    Batch, BatchExtra, BucketingReport, ExtraValue, Row, RowChunk, WriterMsg,
};

/// Runs until the readers are done (their channel closes), then drains the
/// buckets. Rejects found by the readers go straight on to the writers.
/// `budget` may be lowered by the model worker after an out-of-memory.
pub fn run_bucketing(
    config: &BucketingConfig,
    segment_bytes: usize,
    chunks: Receiver<RowChunk>,
    batches: Sender<Batch>,
    rejects: Sender<WriterMsg>,
    budget: &AtomicUsize,
    cancel: &AtomicBool,
) -> Result<BucketingReport, BucketingError> {
    segpredict_core::cpu::lower_this_thread();
    let mut bucketer = Bucketer::new(config)?;
    let mut stage = Stage {
        segment_bytes,
        batches,
        blocked: Duration::ZERO,
        report: BucketingReport {
            size_classes: bucketer.size_classes().to_vec(),
            ..BucketingReport::default()
        },
    };
    for chunk in chunks {
        if cancel.load(Ordering::Relaxed) {
            return Ok(stage.report);
        }
        let started = Instant::now();
        let blocked_before = stage.blocked;
        follow_budget(&mut bucketer, budget)?;
        stage.report.rejects += chunk.rejects.len() as u64;
        if !chunk.rejects.is_empty() && rejects.send(WriterMsg::Rejects(chunk.rejects)).is_err() {
            return Ok(stage.report);
        }
        stage.report.rows += chunk.rows.len() as u64;
        for row in chunk.rows {
            for planned in bucketer.push(row) {
                if !stage.send(planned) {
                    return Ok(stage.report);
                }
            }
        }
        stage.report.busy += started
            .elapsed()
            .saturating_sub(stage.blocked - blocked_before);
    }
    if !cancel.load(Ordering::Relaxed) {
        follow_budget(&mut bucketer, budget)?;
        tracing::debug!(
            held_rows = bucketer.held_rows(),
            "input ended; draining the buckets"
        );
        for planned in bucketer.finish() {
            if !stage.send(planned) {
                break;
            }
        }
    }
    Ok(stage.report)
}

/// Applies a budget the model worker lowered after an out-of-memory.
fn follow_budget<T: super::Segmented>(
    bucketer: &mut Bucketer<T>,
    budget: &AtomicUsize,
) -> Result<(), BucketingError> {
    let wanted = budget.load(Ordering::Relaxed);
    if wanted < bucketer.max_segments() {
        tracing::warn!(
            budget = wanted,
            "segment budget lowered for the rest of the run"
        );
        bucketer.lower_budget(wanted)?;
    }
    Ok(())
}

struct Stage {
    segment_bytes: usize,
    batches: Sender<Batch>,
    /// Time blocked sending to the model worker: backpressure, not work.
    blocked: Duration,
    report: BucketingReport,
}

impl Stage {
    /// False when the model worker has gone.
    fn send(&mut self, planned: PlannedBatch<Row>) -> bool {
        let report = &mut self.report;
        report.segments += planned.n_segments as u64;
        report.padded_segments += planned.padded_segments as u64;
        report.oversized_batches += u64::from(planned.is_oversized());
        if planned.is_oversized() {
            tracing::info!(
                segments = planned.n_segments,
                "a row over the segment budget runs alone"
            );
        }
        let batch = assemble(report.batches, planned, self.segment_bytes);
        report.batches += 1;
        let sending = Instant::now();
        let sent = self.batches.send(batch).is_ok();
        self.blocked += sending.elapsed();
        sent
    }
}

/// Lays a planned batch out as the model takes it: segments concatenated in
/// row order, zero-filled up to the padded total; extras gathered per input.
pub fn assemble(seq: u64, planned: PlannedBatch<Row>, segment_bytes: usize) -> Batch {
    let mut segments = vec![0u8; planned.padded_segments * segment_bytes];
    let mut at = 0;
    for row in &planned.rows {
        let bytes = &row.segments[..];
        segments[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    }
    let n_extras = planned.rows.first().map_or(0, |r| r.extras.len());
    let extras = (0..n_extras)
        .map(|k| gather_extra(&planned.rows, k))
        .collect();
    Batch {
        seq,
        segment_counts: planned.rows.iter().map(|r| r.n_segments as i64).collect(),
        rows: planned.rows.into_iter().map(|r| r.meta).collect(),
        n_segments: planned.n_segments,
        padded_segments: planned.padded_segments,
        segments,
        extras,
        flush_reason: planned.reason,
    }
}

/// Extra input `k` of every row, in row order. Readers decode every row of a
/// pipeline with the same kinds, so the first row's kind is every row's.
fn gather_extra(rows: &[Row], k: usize) -> BatchExtra {
    let values = rows.iter().filter_map(|r| r.extras.get(k));
    match rows.first().and_then(|r| r.extras.get(k)) {
        Some(ExtraValue::Ragged(_)) => {
            let mut all = Vec::new();
            let mut counts = Vec::with_capacity(rows.len());
            for v in values {
                if let ExtraValue::Ragged(items) = v {
                    all.extend_from_slice(items);
                    counts.push(items.len() as i64);
                }
            }
            BatchExtra::Ragged {
                values: all,
                counts,
            }
        }
        Some(ExtraValue::Vector(first)) => {
            let width = first.len();
            let mut all = Vec::with_capacity(rows.len() * width);
            for v in values {
                if let ExtraValue::Vector(items) = v {
                    all.extend_from_slice(items);
                }
            }
            BatchExtra::Vectors { values: all, width }
        }
        Some(ExtraValue::Float(_)) => BatchExtra::Floats(
            values
                .filter_map(|v| match v {
                    ExtraValue::Float(x) => Some(*x),
                    _ => None,
                })
                .collect(),
        ),
        Some(ExtraValue::Int(_)) | None => BatchExtra::Ints(
            values
                .filter_map(|v| match v {
                    ExtraValue::Int(x) => Some(*x),
                    _ => None,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segpredict_core::message::{FlushReason, RowId, RowMeta};

    const SEGMENT_BYTES: usize = 3;

    /// A row of `n` segments whose bytes all equal `fill`, with a ragged
    /// extra of `n` values and a vector extra `[fill, fill]`.
    fn row(id: i64, n: usize, fill: u8) -> Row {
        Row {
            meta: RowMeta::numbered(id as u64),
            n_segments: n,
            segments: vec![fill; n * SEGMENT_BYTES].into_boxed_slice(),
            extras: vec![
                ExtraValue::Ragged(vec![id; n]),
                ExtraValue::Vector(vec![fill as f32; 2]),
            ],
        }
    }

    #[test]
    fn a_batch_is_laid_out_contiguously_in_row_order_and_zero_padded() {
        let planned = PlannedBatch {
            rows: vec![row(10, 2, 7), row(11, 1, 9)],
            n_segments: 3,
            padded_segments: 5,
            reason: FlushReason::EndOfInput,
        };
        let batch = assemble(4, planned, SEGMENT_BYTES);
        assert_eq!(batch.seq, 4);
        assert_eq!(batch.segment_counts, [2, 1]);
        assert_eq!((batch.n_segments, batch.padded_segments), (3, 5));
        let mut expected = vec![7u8; 6];
        expected.extend([9; 3]);
        expected.extend([0; 6]);
        assert_eq!(batch.segments, expected);
        let ids: Vec<_> = batch.rows.iter().map(|r| r.id.clone()).collect();
        assert_eq!(ids, [RowId::Int(10), RowId::Int(11)]);
        assert_eq!(batch.flush_reason, FlushReason::EndOfInput);
        assert_eq!(
            batch.extras,
            [
                BatchExtra::Ragged {
                    values: vec![10, 10, 11],
                    counts: vec![2, 1],
                },
                BatchExtra::Vectors {
                    values: vec![7.0, 7.0, 9.0, 9.0],
                    width: 2,
                },
            ]
        );
    }

    #[test]
    fn scalar_extras_are_gathered_per_row() {
        let mut rows = vec![row(1, 1, 1), row(2, 1, 2)];
        for (k, r) in rows.iter_mut().enumerate() {
            r.extras = vec![ExtraValue::Float(k as f32 + 0.5), ExtraValue::Int(k as i64)];
        }
        let planned = PlannedBatch {
            rows,
            n_segments: 2,
            padded_segments: 2,
            reason: FlushReason::BudgetReached,
        };
        let batch = assemble(0, planned, SEGMENT_BYTES);
        assert_eq!(
            batch.extras,
            [
                BatchExtra::Floats(vec![0.5, 1.5]),
                BatchExtra::Ints(vec![0, 1])
            ]
        );
        assert_eq!(batch.segments, [1, 1, 1, 2, 2, 2]);
    }
}
