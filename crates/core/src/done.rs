//! The rows an earlier attempt already finished: built by the writer from
//! the committed parts and rejects in the output directory, used by the
//! reader to skip them. The output directory is the checkpoint; this is its
//! index in memory, one bit per input row (125 MB for a billion rows).

/// Finished rows per input file, by the file's index in the run's frozen
/// input list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoneSet {
    files: Vec<RowBitmap>,
    predicted: u64,
    rejected: u64,
}

/// How a row was finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Written to a committed part with its prediction.
    Predicted,
    /// Written to a committed rejects file with its reason.
    Rejected,
}

/// A row that is in the committed output twice: the directory was written
/// by something other than this program's protocol, and resuming from it
/// would count that row twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("row {row_idx} of input file {file_idx} is in the output twice")]
pub struct Duplicate {
    /// The input file's index in the run's frozen input list.
    pub file_idx: u32,
    /// The row's index within that file, from 0.
    pub row_idx: u64,
}

/// A row outside the file's row count: the committed output does not
/// belong to these inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the output holds row {row_idx} of input file {file_idx}, which has only {rows} rows")]
pub struct OutOfRange {
    /// The input file's index in the run's frozen input list (possibly
    /// past its end).
    pub file_idx: u32,
    /// The row's index within that file, from 0.
    pub row_idx: u64,
    /// The rows the file has (0 for a file index past the list).
    pub rows: u64,
}

/// Why a committed row cannot go into the done set: the output is not a
/// checkpoint of these inputs, so resuming from it would be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DoneError {
    /// The row was already marked.
    #[error(transparent)]
    Duplicate(#[from] Duplicate),
    /// The row is past its file's end.
    #[error(transparent)]
    OutOfRange(#[from] OutOfRange),
}

impl DoneSet {
    /// Nothing done yet, for files of these row counts (in input order).
    pub fn new(rows_per_file: &[u64]) -> Self {
        Self {
            files: rows_per_file.iter().map(|&n| RowBitmap::new(n)).collect(),
            predicted: 0,
            rejected: 0,
        }
    }

    /// Marks one row finished; a row marked twice or out of its file's range
    /// is an error, never silently counted.
    pub fn insert(&mut self, file_idx: u32, row_idx: u64, how: Finished) -> Result<(), DoneError> {
        let rows = self.rows_in_file(file_idx);
        let bitmap = self
            .files
            .get_mut(file_idx as usize)
            .filter(|_| row_idx < rows)
            .ok_or(OutOfRange {
                file_idx,
                row_idx,
                rows,
            })?;
        if !bitmap.set(row_idx) {
            return Err(Duplicate { file_idx, row_idx }.into());
        }
        match how {
            Finished::Predicted => self.predicted += 1,
            Finished::Rejected => self.rejected += 1,
        }
        Ok(())
    }

    /// Whether this row is finished (predicted or rejected); false for a
    /// file or row outside the set.
    pub fn contains(&self, file_idx: u32, row_idx: u64) -> bool {
        self.files
            .get(file_idx as usize)
            .is_some_and(|b| b.get(row_idx))
    }

    /// Whether every row of `first_row .. first_row + n_rows` of a file is
    /// done: such a row group is not read at all.
    pub fn all_done(&self, file_idx: u32, first_row: u64, n_rows: u64) -> bool {
        self.files
            .get(file_idx as usize)
            .is_some_and(|b| b.all_set(first_row, first_row + n_rows))
    }

    /// Rows finished in `first_row .. first_row + n_rows` of a file.
    pub fn count_done(&self, file_idx: u32, first_row: u64, n_rows: u64) -> u64 {
        self.files
            .get(file_idx as usize)
            .map_or(0, |b| b.count_set(first_row, first_row + n_rows))
    }

    /// Rows already predicted (in committed parts).
    pub fn predicted(&self) -> u64 {
        self.predicted
    }

    /// Rows already rejected (in committed rejects).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Rows finished either way: predicted plus rejected.
    pub fn len(&self) -> u64 {
        self.predicted + self.rejected
    }

    /// Whether no row is finished yet (a fresh run, not a resume).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn rows_in_file(&self, file_idx: u32) -> u64 {
        self.files.get(file_idx as usize).map_or(0, |b| b.rows)
    }
}

/// One bit per row of a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RowBitmap {
    rows: u64,
    words: Vec<u64>,
}

impl RowBitmap {
    fn new(rows: u64) -> Self {
        Self {
            rows,
            words: Vec::new(),
        }
    }

    /// Sets the bit; false when it was already set. Words are allocated on
    /// first use, so a fresh run costs nothing per row.
    fn set(&mut self, row: u64) -> bool {
        if self.words.is_empty() {
            self.words = vec![0; self.rows.div_ceil(64) as usize];
        }
        let (word, bit) = ((row / 64) as usize, 1u64 << (row % 64));
        let was_set = self.words[word] & bit != 0;
        self.words[word] |= bit;
        !was_set
    }

    fn get(&self, row: u64) -> bool {
        self.words
            .get((row / 64) as usize)
            .is_some_and(|w| w & (1u64 << (row % 64)) != 0)
    }

    /// Set bits in `start..end`, a word at a time.
    fn count_set(&self, start: u64, end: u64) -> u64 {
        let end = end.min(self.rows);
        if start >= end || self.words.is_empty() {
            return 0;
        }
        let mut count = 0u64;
        let mut row = start;
        while row < end {
            let word = self.words[(row / 64) as usize];
            let lo = row % 64;
            let hi = (end - (row - lo)).min(64);
            let mask = range_mask(lo, hi);
            count += u64::from((word & mask).count_ones());
            row += hi - lo;
        }
        count
    }

    fn all_set(&self, start: u64, end: u64) -> bool {
        end <= self.rows && self.count_set(start, end) == end.saturating_sub(start)
    }
}

/// Bits `lo..hi` of a word (`hi` at most 64).
fn range_mask(lo: u64, hi: u64) -> u64 {
    let upper = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_whole_ranges_across_word_boundaries() {
        let mut done = DoneSet::new(&[200, 10]);
        for row in 60..140 {
            done.insert(0, row, Finished::Predicted).unwrap();
        }
        done.insert(1, 3, Finished::Rejected).unwrap();
        assert_eq!((done.predicted(), done.rejected(), done.len()), (80, 1, 81));
        assert!(done.all_done(0, 60, 80));
        assert!(done.all_done(0, 64, 64));
        assert!(!done.all_done(0, 59, 80));
        assert!(!done.all_done(0, 60, 81));
        assert_eq!(done.count_done(0, 0, 200), 80);
        assert_eq!(done.count_done(0, 100, 100), 40);
        assert_eq!(done.count_done(0, 139, 1), 1);
        assert!(done.contains(1, 3) && !done.contains(1, 4) && !done.contains(2, 0));
        assert!(!done.all_done(1, 0, 10));
        assert!(done.all_done(1, 3, 1));
        // An empty range is trivially done; a range past the file is not.
        assert!(done.all_done(1, 5, 0));
        assert!(!done.all_done(1, 5, 6));
    }

    #[test]
    fn a_row_twice_or_past_the_file_is_an_error() {
        let mut done = DoneSet::new(&[5]);
        done.insert(0, 4, Finished::Predicted).unwrap();
        assert_eq!(
            done.insert(0, 4, Finished::Rejected),
            Err(DoneError::Duplicate(Duplicate {
                file_idx: 0,
                row_idx: 4
            }))
        );
        assert!(matches!(
            done.insert(0, 5, Finished::Predicted),
            Err(DoneError::OutOfRange(_))
        ));
        assert!(matches!(
            done.insert(1, 0, Finished::Predicted),
            Err(DoneError::OutOfRange(_))
        ));
        assert_eq!(done.len(), 1);
    }

    #[test]
    fn a_fresh_set_allocates_no_bitmap() {
        let done = DoneSet::new(&[1_000_000_000]);
        assert!(done.files[0].words.is_empty());
        assert!(!done.all_done(0, 0, 1));
        assert_eq!(done.count_done(0, 0, 1_000_000_000), 0);
    }

    #[test]
    fn full_words_count() {
        let mut done = DoneSet::new(&[256]);
        for row in 0..256 {
            done.insert(0, row, Finished::Predicted).unwrap();
        }
        assert!(done.all_done(0, 0, 256));
        assert_eq!(done.count_done(0, 1, 254), 254);
        assert_eq!(range_mask(0, 64), u64::MAX);
        assert_eq!(range_mask(63, 64), 1 << 63);
        assert_eq!(range_mask(2, 4), 0b1100);
    }
}
