//! Splitting a batch that failed (out of memory, over the package's bound,
//! a row the model fails on): halves of about equal
//! segments, or a lone row without its padding.

use crossbeam_channel::Sender;

use segpredict_core::message::{Batch, BatchExtra, FlushReason, Reject, RejectKind, WriterMsg};

/// A batch split for out-of-memory recovery.
pub enum Split {
    /// Two batches of about equal segments, the rows in their order.
    Halves(Batch, Batch),
    /// One row cannot be split.
    Lone(Batch),
}

/// The batch without its padding segments.
pub fn unpadded(mut batch: Batch) -> Batch {
    let segment_bytes = batch.segments.len() / batch.padded_segments.max(1);
    batch.segments.truncate(batch.n_segments * segment_bytes);
    batch.padded_segments = batch.n_segments;
    batch.flush_reason = FlushReason::OomUnpadded;
    batch
}

/// Rejects every row of a batch that failed alone, with one reason; false
/// when the writers have gone.
pub fn reject_rows(lone: Batch, kind: RejectKind, reason: &str, out: &Sender<WriterMsg>) -> bool {
    let rejects = lone
        .rows
        .into_iter()
        .map(|meta| Reject {
            id: Some(meta.id),
            origin: meta.origin,
            kind,
            reason: reason.to_string(),
        })
        .collect();
    out.send(WriterMsg::Rejects(rejects)).is_ok()
}

/// Splits a batch into two halves of about equal segments (unpadded: this is
/// the rare recovery path).
pub fn split_in_half(batch: Batch) -> Split {
    if batch.rows.len() < 2 {
        return Split::Lone(batch);
    }
    let cut = half_point(&batch.segment_counts);
    let segment_bytes = batch.segments.len() / batch.padded_segments.max(1);
    let first_segments: usize = batch.segment_counts[..cut]
        .iter()
        .map(|&c| c as usize)
        .sum();
    let second_segments = batch.n_segments - first_segments;
    let (first_extras, second_extras): (Vec<_>, Vec<_>) = batch
        .extras
        .into_iter()
        .map(|e| split_extra(e, cut))
        .unzip();
    let mut rows = batch.rows;
    let second_rows = rows.split_off(cut);
    let mut counts = batch.segment_counts;
    let second_counts = counts.split_off(cut);
    let mut segments = batch.segments;
    segments.truncate(batch.n_segments * segment_bytes);
    let second_bytes = segments.split_off(first_segments * segment_bytes);
    let first = Batch {
        seq: batch.seq,
        rows,
        segment_counts: counts,
        n_segments: first_segments,
        padded_segments: first_segments,
        segments,
        extras: first_extras,
        flush_reason: FlushReason::OomSplit,
    };
    let second = Batch {
        seq: batch.seq,
        rows: second_rows,
        segment_counts: second_counts,
        n_segments: second_segments,
        padded_segments: second_segments,
        segments: second_bytes,
        extras: second_extras,
        flush_reason: FlushReason::OomSplit,
    };
    Split::Halves(first, second)
}

/// The row index where the running segment total first reaches half, kept
/// inside 1..len so both halves hold rows.
fn half_point(counts: &[i64]) -> usize {
    let total: i64 = counts.iter().sum();
    let mut running = 0;
    for (i, c) in counts.iter().enumerate() {
        running += c;
        if running * 2 >= total {
            return (i + 1).clamp(1, counts.len() - 1);
        }
    }
    counts.len() / 2
}

fn split_extra(extra: BatchExtra, cut: usize) -> (BatchExtra, BatchExtra) {
    match extra {
        BatchExtra::Ragged {
            mut values,
            mut counts,
        } => {
            let second_counts = counts.split_off(cut);
            let first_len: i64 = counts.iter().sum();
            let second_values = values.split_off(first_len as usize);
            (
                BatchExtra::Ragged { values, counts },
                BatchExtra::Ragged {
                    values: second_values,
                    counts: second_counts,
                },
            )
        }
        BatchExtra::Vectors { mut values, width } => {
            let second = values.split_off(cut * width);
            (
                BatchExtra::Vectors { values, width },
                BatchExtra::Vectors {
                    values: second,
                    width,
                },
            )
        }
        BatchExtra::Floats(mut v) => {
            let second = v.split_off(cut);
            (BatchExtra::Floats(v), BatchExtra::Floats(second))
        }
        BatchExtra::Ints(mut v) => {
            let second = v.split_off(cut);
            (BatchExtra::Ints(v), BatchExtra::Ints(second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use segpredict_core::message::{RowId, RowMeta};

    const SEGMENT_BYTES: usize = 2;

    /// Rows of the given segment counts, each segment's bytes `[row, k]`,
    /// padded with zero segments up to `padded`; one ragged and one float
    /// extra per row.
    fn batch(counts: &[usize], padded: usize) -> Batch {
        let rows = (0..counts.len())
            .map(|i| RowMeta::numbered(i as u64))
            .collect();
        let mut segments = Vec::new();
        for (row, &n) in counts.iter().enumerate() {
            for k in 0..n {
                segments.extend_from_slice(&[row as u8, k as u8]);
            }
        }
        let n_segments: usize = counts.iter().sum();
        segments.resize(padded * SEGMENT_BYTES, 0);
        let ragged_counts: Vec<i64> = (0..counts.len() as i64).collect();
        let ragged_values = ragged_counts
            .iter()
            .flat_map(|&c| vec![c; c as usize])
            .collect();
        Batch {
            seq: 7,
            rows,
            segment_counts: counts.iter().map(|&c| c as i64).collect(),
            n_segments,
            padded_segments: padded,
            segments,
            extras: vec![
                BatchExtra::Ragged {
                    values: ragged_values,
                    counts: ragged_counts,
                },
                BatchExtra::Floats((0..counts.len()).map(|i| i as f32).collect()),
            ],
            flush_reason: FlushReason::BudgetReached,
        }
    }

    fn ids(batch: &Batch) -> Vec<RowId> {
        batch.rows.iter().map(|r| r.id.clone()).collect()
    }

    #[test]
    fn halves_hold_about_equal_segments_and_drop_the_padding() {
        let Split::Halves(first, second) = split_in_half(batch(&[3, 1, 4], 16)) else {
            panic!("three rows split in halves");
        };
        assert_eq!(ids(&first), [RowId::Int(0), RowId::Int(1)]);
        assert_eq!(ids(&second), [RowId::Int(2)]);
        assert_eq!((first.n_segments, first.padded_segments), (4, 4));
        assert_eq!((second.n_segments, second.padded_segments), (4, 4));
        assert_eq!(first.segment_counts, [3, 1]);
        assert_eq!(second.segment_counts, [4]);
        assert_eq!(first.segments, [0, 0, 0, 1, 0, 2, 1, 0]);
        assert_eq!(second.segments, [2, 0, 2, 1, 2, 2, 2, 3]);
        assert_eq!((first.seq, first.flush_reason), (7, FlushReason::OomSplit));
        assert_eq!(second.flush_reason, FlushReason::OomSplit);
    }

    #[test]
    fn extras_are_cut_at_the_same_row() {
        let Split::Halves(first, second) = split_in_half(batch(&[3, 1, 4], 8)) else {
            panic!("three rows split in halves");
        };
        assert_eq!(
            first.extras,
            [
                BatchExtra::Ragged {
                    values: vec![1],
                    counts: vec![0, 1]
                },
                BatchExtra::Floats(vec![0.0, 1.0]),
            ]
        );
        assert_eq!(
            second.extras,
            [
                BatchExtra::Ragged {
                    values: vec![2, 2],
                    counts: vec![2]
                },
                BatchExtra::Floats(vec![2.0]),
            ]
        );
    }

    #[test]
    fn both_halves_hold_a_row_even_when_one_row_dominates() {
        let Split::Halves(first, second) = split_in_half(batch(&[100, 1], 128)) else {
            panic!("two rows split in halves");
        };
        assert_eq!(first.segment_counts, [100]);
        assert_eq!(second.segment_counts, [1]);
        let Split::Halves(first, second) = split_in_half(batch(&[1, 100], 128)) else {
            panic!("two rows split in halves");
        };
        assert_eq!(first.segment_counts, [1]);
        assert_eq!(second.segment_counts, [100]);
    }

    #[test]
    fn a_lone_row_is_not_split_and_can_drop_its_padding() {
        let Split::Lone(lone) = split_in_half(batch(&[5], 8)) else {
            panic!("one row cannot be split");
        };
        assert_eq!(lone.padded_segments, 8);
        let lone = unpadded(lone);
        assert_eq!((lone.n_segments, lone.padded_segments), (5, 5));
        assert_eq!(lone.segments.len(), 5 * SEGMENT_BYTES);
        assert_eq!(lone.flush_reason, FlushReason::OomUnpadded);
    }
}
