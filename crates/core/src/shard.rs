//! Which part of a run's input one process predicts: shard `I` of `N`.
//!
//! The reader deals the frozen list of units (file, row group) to shards and
//! keeps its own; the writer tags file names with the shard. Both see only
//! this type, so it lives with the other shared vocabulary.

use crate::exit::{Classify, Failure};
use std::fmt;
use std::str::FromStr;

/// Shard `index` of `count` (0-based index, as Kubernetes' Indexed Jobs
/// number their pods). A run without shards is shard 0 of 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ShardSpec {
    /// This process's shard, from 0; always below `count`.
    pub index: u32,
    /// How many shards the run's input is dealt to; at least 1.
    pub count: u32,
}

/// The environment variable a Kubernetes Indexed Job sets to the pod's index.
pub const COMPLETION_INDEX_VAR: &str = "JOB_COMPLETION_INDEX";

/// A `--shard`/`--shards` setting that names no shard; found before any
/// input is read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// `--shard` is not `I/N` with `I` below `N`; holds the text given.
    #[error("--shard takes I/N with 0 <= I < N (e.g. 2/8), not `{0}`")]
    BadSpec(String),
    /// `--shards 0`.
    #[error("--shards must be at least 1")]
    NoShards,
    /// `--shards` without the Job's index variable: not run as an Indexed
    /// Job pod.
    #[error("--shards {count} needs the shard index in {COMPLETION_INDEX_VAR} (as a Kubernetes Indexed Job sets it), and it is not set")]
    NoIndex {
        /// The `--shards` count given.
        count: u32,
    },
    /// The index variable is not a number below the shard count.
    #[error("{COMPLETION_INDEX_VAR}=`{value}` is not a shard index below --shards {count}")]
    BadIndex {
        /// The variable's value, as set.
        value: String,
        /// The `--shards` count given.
        count: u32,
    },
}

/// Every variant is the command line or the Job's environment.
impl Classify for ShardError {
    fn failure(&self) -> Failure {
        Failure::Permanent
    }
}

impl ShardSpec {
    /// The whole input in one process.
    pub const WHOLE: ShardSpec = ShardSpec { index: 0, count: 1 };

    /// Shard `index` of `count` (`--shard I/N`); an index not below the
    /// count, or a count of 0, is [`ShardError::BadSpec`].
    pub fn new(index: u32, count: u32) -> Result<Self, ShardError> {
        if count == 0 || index >= count {
            return Err(ShardError::BadSpec(format!("{index}/{count}")));
        }
        Ok(Self { index, count })
    }

    /// `--shards N` with the index from `JOB_COMPLETION_INDEX`; `index_var`
    /// is that variable's value when set.
    pub fn from_completion_index(count: u32, index_var: Option<&str>) -> Result<Self, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards);
        }
        let value = index_var.ok_or(ShardError::NoIndex { count })?;
        let bad = || ShardError::BadIndex {
            value: value.to_string(),
            count,
        };
        let index: u32 = value.trim().parse().map_err(|_| bad())?;
        Self::new(index, count).map_err(|_| bad())
    }

    /// Whether the input is split between processes (more than one shard),
    /// so names and logs must say which shard this is.
    pub fn is_sharded(self) -> bool {
        self.count > 1
    }

    /// A fixed-width tag for file names, e.g. `s002of008`, so names sort by
    /// shard and never collide between shards.
    pub fn tag(self) -> String {
        let width = digits(self.count.saturating_sub(1)).max(3);
        format!(
            "s{:0width$}of{:0width$}",
            self.index,
            self.count,
            width = width
        )
    }
}

fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for ShardSpec {
    type Err = ShardError;

    /// `I/N`, e.g. `0/4`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ShardError::BadSpec(s.to_string());
        let (index, count) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = index.trim().parse().map_err(|_| bad())?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        Self::new(index, count).map_err(|_| bad())
    }
}

/// Deals units to `count` shards: each unit's shard, in unit order.
///
/// Every shard computes the same answer from the same frozen unit list (the
/// run manifest guarantees the list is the same), so no shard needs to talk
/// to another. Units are dealt largest first to the shard with the fewest
/// rows so far (ties to the lower shard, then the lower unit), which keeps
/// shards within one unit's rows of each other even when row groups differ
/// in size; round-robin would not.
pub fn deal_units(unit_rows: &[u64], count: u32) -> Vec<u32> {
    let count = count.max(1);
    let mut order: Vec<usize> = (0..unit_rows.len()).collect();
    order.sort_by(|&a, &b| unit_rows[b].cmp(&unit_rows[a]).then(a.cmp(&b)));
    let mut load = vec![0u64; count as usize];
    let mut shard_of = vec![0u32; unit_rows.len()];
    for unit in order {
        let (lightest, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(shard, rows)| (*rows, shard))
            .unwrap_or((0, &0));
        load[lightest] += unit_rows[unit];
        shard_of[unit] = lightest as u32;
    }
    shard_of
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_i_of_n_and_refuses_everything_else() {
        assert_eq!(
            "2/8".parse::<ShardSpec>(),
            Ok(ShardSpec::new(2, 8).unwrap())
        );
        assert_eq!("0/1".parse::<ShardSpec>(), Ok(ShardSpec::WHOLE));
        for bad in ["8/8", "1/0", "-1/4", "a/4", "2", "2/", "/2", "1/2/3", ""] {
            assert!(bad.parse::<ShardSpec>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn completion_index_gives_the_index_and_is_checked() {
        assert_eq!(
            ShardSpec::from_completion_index(3, Some("2")),
            Ok(ShardSpec { index: 2, count: 3 })
        );
        assert_eq!(
            ShardSpec::from_completion_index(3, None),
            Err(ShardError::NoIndex { count: 3 })
        );
        assert!(matches!(
            ShardSpec::from_completion_index(3, Some("3")),
            Err(ShardError::BadIndex { .. })
        ));
        assert!(matches!(
            ShardSpec::from_completion_index(3, Some("x")),
            Err(ShardError::BadIndex { .. })
        ));
        assert_eq!(
            ShardSpec::from_completion_index(0, Some("0")),
            Err(ShardError::NoShards)
        );
    }

    #[test]
    fn tags_sort_by_shard_and_differ() {
        assert_eq!(ShardSpec::new(2, 8).unwrap().tag(), "s002of008");
        assert_eq!(ShardSpec::new(12, 1500).unwrap().tag(), "s0012of1500");
    }

    #[test]
    fn every_unit_goes_to_exactly_one_shard_and_shards_are_balanced() {
        let rows: Vec<u64> = (0..37).map(|i| 100 + (i * 7919 % 13) * 50).collect();
        for count in 1..=6u32 {
            let shards = deal_units(&rows, count);
            assert_eq!(shards.len(), rows.len());
            assert!(shards.iter().all(|&s| s < count));
            let mut load = vec![0u64; count as usize];
            for (unit, &s) in shards.iter().enumerate() {
                load[s as usize] += rows[unit];
            }
            let (min, max) = (load.iter().min().unwrap(), load.iter().max().unwrap());
            let biggest_unit = rows.iter().max().unwrap();
            assert!(max - min <= *biggest_unit, "{count} shards: {load:?}");
        }
    }

    #[test]
    fn dealing_is_deterministic() {
        let rows = [5u64, 5, 5, 9, 1, 0, 5];
        assert_eq!(deal_units(&rows, 3), deal_units(&rows, 3));
        assert_eq!(deal_units(&rows, 1), vec![0; rows.len()]);
        assert!(deal_units(&[], 4).is_empty());
    }
}
