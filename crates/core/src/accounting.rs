//! The run's row accounting, in one type: the shard marker, the commit and
//! the report all count rows with it, so the invariant every input row is
//! predicted or rejected exactly once is stated once ([`RowCounts::balances`]).

use serde::{Deserialize, Serialize};

/// Rows of a shard, an attempt or a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RowCounts {
    /// Rows of the input (of a shard's units, for a shard).
    pub rows_in: u64,
    /// Rows predicted, over every attempt.
    pub rows_out: u64,
    /// Rows rejected, over every attempt.
    pub rows_rejected: u64,
    /// Rows earlier attempts had committed, which the last one skipped.
    pub rows_resumed: u64,
}

impl RowCounts {
    /// Every input row predicted or rejected, none twice.
    pub fn balances(&self) -> bool {
        self.rows_out + self.rows_rejected == self.rows_in
    }

    /// The counts of two disjoint parts of the input (two shards).
    pub fn add(&mut self, other: RowCounts) {
        self.rows_in += other.rows_in;
        self.rows_out += other.rows_out;
        self.rows_rejected += other.rows_rejected;
        self.rows_resumed += other.rows_resumed;
    }
}

impl std::fmt::Display for RowCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} predicted + {} rejected of {} rows ({} resumed)",
            self.rows_out, self.rows_rejected, self.rows_in, self.rows_resumed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_balance_only_when_every_row_is_once() {
        let mut run = RowCounts::default();
        let shard = RowCounts {
            rows_in: 10,
            rows_out: 7,
            rows_rejected: 3,
            rows_resumed: 4,
        };
        run.add(shard);
        run.add(shard);
        assert!(run.balances());
        assert_eq!(run.rows_in, 20);
        assert_eq!(run.rows_resumed, 8);
        run.rows_out += 1;
        assert!(!run.balances(), "a row counted twice");
        let json = serde_json::to_string(&shard).unwrap();
        assert_eq!(serde_json::from_str::<RowCounts>(&json).unwrap(), shard);
    }
}
