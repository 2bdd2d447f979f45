//! Every name a run gives its output, built and parsed here and nowhere
//! else. Names are store keys, relative to the output location:
//!
//! ```text
//! _run.json                              what the run is (manifest.rs)
//! part-[S-]aAAA-WW-NNNNN.parquet         committed predictions
//! _progress/rejects-[S-]aAAA-WW-NNNNN.parquet   committed rejects
//! _progress/batches-[S-]aAAA-WW-NNNNN.parquet   committed batch records
//! _progress/attempt-S-aAAA.json          one per attempt of a shard
//! _progress/log/S/NNNNNNNNNNNNNNNNNNNN.json   the shard's commit log (log.rs)
//! _progress/report-S.svg                 a sharded run's per-shard plot
//! _progress/lock-S                       held by the shard's one writer
//! _rejects/rejects.parquet, _segpredict/batches.parquet, _report.json,
//!     _report.svg, _SUCCESS              the commit
//! [folder/].NAME.S-PID-N.inprogress      any of these while being written
//! ```
//!
//! `S` is the shard tag (`s001of004`; `s000of001` unsharded, where part
//! names leave it out); `A` the attempt; `WW` the writer thread; `NNNNN`
//! its file sequence. A temporary name carries the tag of the process
//! writing it, so a shard removes only its own killed attempts' leftovers.
//! Every `*.parquet` at the top is a part file of one schema, so
//! `out/*.parquet` is one table in DuckDB, Polars and a shell glob; the
//! run's other Parquet files live in folders starting with `_`, which
//! Spark, Hive, pyarrow and pandas dataset readers skip, as they skip
//! `_SUCCESS`. Manifest format 3 and earlier wrote `_rejects.parquet` and
//! `_batches.parquet` at the top: still parsed as ours ([`LEGACY_RUN_FILES`])
//! so `--overwrite` replaces such an output.

use segpredict_core::shard::ShardSpec;
pub use segpredict_store::temp::temp_key;
use segpredict_store::temp::{file_name, has_temporary_shape};

/// Every rejected row and skipped file of the run (the run's commit).
pub const REJECTS: &str = "_rejects/rejects.parquet";
/// Every forward pass of the run (the run's commit).
pub const BATCHES: &str = "_segpredict/batches.parquet";
/// Where manifest format 3 and earlier put `REJECTS` and `BATCHES`.
pub const LEGACY_RUN_FILES: [&str; 2] = ["_rejects.parquet", "_batches.parquet"];
/// The folders of `REJECTS` and `BATCHES`, with their slash.
const RUN_FOLDERS: [&str; 2] = ["_rejects/", "_segpredict/"];
pub const REPORT_JSON: &str = "_report.json";
pub const REPORT_SVG: &str = "_report.svg";
pub const SUCCESS: &str = "_SUCCESS";
pub const MANIFEST: &str = "_run.json";
pub const PROGRESS: &str = "_progress";
/// The tag of temporary files written by `segpredict commit` by hand.
pub const COMMIT_TAG: &str = "commit";

/// The shard and attempt whose files these are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptNames {
    pub shard: ShardSpec,
    pub attempt: u32,
}

impl AttemptNames {
    /// `s001of003-a002` sharded, `a002` not.
    fn stem(self) -> String {
        match self.shard.is_sharded() {
            true => format!("{}-a{:03}", self.shard.tag(), self.attempt),
            false => format!("a{:03}", self.attempt),
        }
    }
}

/// What a committed data file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Part,
    Rejects,
    Batches,
}

impl DataKind {
    fn prefix(self) -> &'static str {
        match self {
            DataKind::Part => "part-",
            DataKind::Rejects => "_progress/rejects-",
            DataKind::Batches => "_progress/batches-",
        }
    }
}

/// A key this program writes, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    Data {
        kind: DataKind,
        names: AttemptNames,
        writer: usize,
        seq: usize,
    },
    AttemptMarker(AttemptNames),
    /// Record `seq` (from 1) of a shard's commit log.
    LogRecord(ShardSpec, u64),
    /// The log's state up to record `seq`, written beside it so that a
    /// reader starts there (Delta Lake's checkpoints).
    LogCheckpoint(ShardSpec, u64),
    ShardSvg(ShardSpec),
    Lock(ShardSpec),
    /// A file being written (or left by a killed writer), with the tag of
    /// the process writing it.
    Temporary,
    /// `_run.json`, `_rejects/rejects.parquet`,
    /// `_segpredict/batches.parquet`, `_report.*`, `_SUCCESS` (and the
    /// [`LEGACY_RUN_FILES`]).
    RunFile,
}

impl Name {
    /// The key, if this program could have written it.
    pub fn parse(key: &str) -> Option<Name> {
        if is_temporary(key) {
            return Some(Name::Temporary);
        }
        let run_files = [MANIFEST, REJECTS, BATCHES, REPORT_JSON, REPORT_SVG, SUCCESS];
        if run_files.contains(&key) || LEGACY_RUN_FILES.contains(&key) {
            return Some(Name::RunFile);
        }
        for kind in [DataKind::Part, DataKind::Rejects, DataKind::Batches] {
            if let Some(rest) = key.strip_prefix(kind.prefix()) {
                return parse_data(kind, rest.strip_suffix(".parquet")?);
            }
        }
        let rest = key.strip_prefix("_progress/")?;
        if let Some(rest) = rest.strip_prefix("attempt-") {
            let (tag, attempt) = rest.strip_suffix(".json")?.rsplit_once("-a")?;
            return Some(Name::AttemptMarker(AttemptNames {
                shard: parse_tag(tag)?,
                attempt: parse_number(attempt)?,
            }));
        }
        if let Some(rest) = rest.strip_prefix("log/") {
            let (tag, stem) = rest.strip_suffix(".json")?.split_once('/')?;
            let (seq, checkpoint) = match stem.strip_suffix(".checkpoint") {
                Some(seq) => (seq, true),
                None => (stem, false),
            };
            let (shard, seq) = (
                parse_tag(tag)?,
                parse_number(seq).filter(|_| seq.len() == LOG_DIGITS)?,
            );
            return Some(match checkpoint {
                true => Name::LogCheckpoint(shard, seq),
                false => Name::LogRecord(shard, seq),
            });
        }
        if let Some(tag) = rest.strip_prefix("report-") {
            return Some(Name::ShardSvg(parse_tag(tag.strip_suffix(".svg")?)?));
        }
        Some(Name::Lock(parse_tag(rest.strip_prefix("lock-")?)?))
    }
}

/// `[S-]aAAA-WW-NNNNN`.
fn parse_data(kind: DataKind, stem: &str) -> Option<Name> {
    let mut fields: Vec<&str> = stem.split('-').collect();
    let seq = parse_number(fields.pop()?)?;
    let writer = parse_number(fields.pop()?)?;
    let attempt = parse_number(fields.pop()?.strip_prefix('a')?)?;
    let shard = match fields.as_slice() {
        [] => ShardSpec::WHOLE,
        [tag] => parse_tag(tag)?,
        _ => return None,
    };
    Some(Name::Data {
        kind,
        names: AttemptNames { shard, attempt },
        writer,
        seq,
    })
}

/// `sIIIofCCC`, as [`ShardSpec::tag`] writes it.
fn parse_tag(tag: &str) -> Option<ShardSpec> {
    let (index, count) = tag.strip_prefix('s')?.split_once("of")?;
    let shard = ShardSpec::new(parse_number(index)?, parse_number(count)?).ok()?;
    (shard.tag() == tag).then_some(shard)
}

fn parse_number<T: std::str::FromStr>(digits: &str) -> Option<T> {
    match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        true => digits.parse().ok(),
        false => None,
    }
}

/// Digits of a log record's number, as Delta Lake's log writes them.
const LOG_DIGITS: usize = 20;

/// `_progress/log/S/`, the folder of a shard's log.
fn is_log_folder(folder: &str) -> bool {
    folder
        .strip_prefix("_progress/log/")
        .and_then(|rest| rest.strip_suffix('/'))
        .is_some_and(|tag| parse_tag(tag).is_some())
}

/// A temporary file of ours: only where this program writes (the top,
/// `_progress/` and the commit logs in it, the run files' folders), so a
/// dot-file of that shape elsewhere is not ours.
fn is_temporary(key: &str) -> bool {
    let name = file_name(key);
    let folder = &key[..key.len() - name.len()];
    let ours = folder.is_empty()
        || folder == "_progress/"
        || RUN_FOLDERS.contains(&folder)
        || is_log_folder(folder);
    ours && has_temporary_shape(key)
}

/// Whether `key` is a temporary file written by a process tagged `tag`.
pub fn is_temporary_of(key: &str, tag: &str) -> bool {
    is_temporary(key) && file_name(key).contains(&format!(".{tag}-"))
}

/// The names of one attempt of one shard, and the run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLayout {
    names: AttemptNames,
}

impl OutputLayout {
    /// The layout of attempt 1 of an unsharded run.
    pub fn new() -> Self {
        Self::for_attempt(AttemptNames {
            shard: ShardSpec::WHOLE,
            attempt: 1,
        })
    }

    pub fn for_attempt(names: AttemptNames) -> Self {
        Self { names }
    }

    pub fn names(&self) -> AttemptNames {
        self.names
    }

    /// Part file `seq` (from 1) of writer thread `writer_idx`.
    pub fn part(&self, writer_idx: usize, seq: usize) -> String {
        self.data(DataKind::Part, writer_idx, seq)
    }

    /// Rejects file `seq` (from 1) of writer thread `writer_idx`.
    pub fn rejects_part(&self, writer_idx: usize, seq: usize) -> String {
        self.data(DataKind::Rejects, writer_idx, seq)
    }

    /// Batch-records file `seq` (from 1) of writer thread `writer_idx`.
    pub fn batches_part(&self, writer_idx: usize, seq: usize) -> String {
        self.data(DataKind::Batches, writer_idx, seq)
    }

    fn data(&self, kind: DataKind, writer_idx: usize, seq: usize) -> String {
        let stem = self.names.stem();
        format!("{}{stem}-{writer_idx:02}-{seq:05}.parquet", kind.prefix())
    }

    /// Written when this attempt starts; counting them counts attempts.
    pub fn attempt_marker(&self) -> String {
        let (tag, attempt) = (self.names.shard.tag(), self.names.attempt);
        format!("{PROGRESS}/attempt-{tag}-a{attempt:03}.json")
    }

    /// Held while this shard's one writer runs.
    pub fn lock(&self) -> String {
        Self::lock_of(self.names.shard)
    }

    /// Held while `shard`'s one writer runs.
    pub fn lock_of(shard: ShardSpec) -> String {
        format!("{PROGRESS}/lock-{}", shard.tag())
    }

    /// Record `seq` (from 1) of `shard`'s commit log.
    pub fn log_record(shard: ShardSpec, seq: u64) -> String {
        format!("{}{seq:020}.json", Self::log_folder(shard))
    }

    /// The log's state up to record `seq`.
    pub fn log_checkpoint(shard: ShardSpec, seq: u64) -> String {
        format!("{}{seq:020}.checkpoint.json", Self::log_folder(shard))
    }

    /// The folder of a shard's log records and checkpoints.
    pub fn log_folder(shard: ShardSpec) -> String {
        format!("{PROGRESS}/log/{}/", shard.tag())
    }

    /// This shard's plot, where a sharded run keeps it.
    pub fn shard_svg(&self) -> String {
        match self.names.shard.is_sharded() {
            true => format!("{PROGRESS}/report-{}.svg", self.names.shard.tag()),
            false => REPORT_SVG.to_string(),
        }
    }

    /// Whether `key` is a temporary file a killed process of this shard
    /// left (a killed commit's among them).
    pub fn is_leftover(&self, key: &str) -> bool {
        is_temporary_of(key, &self.names.shard.tag())
    }
}

impl Default for OutputLayout {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether this program writes `key`, and so may remove it (`--overwrite`).
pub fn is_ours(key: &str) -> bool {
    Name::parse(key).is_some()
}

/// The highest attempt of `shard` that a marker or a committed file among
/// `keys` names (0: none).
pub fn last_attempt(keys: &[String], shard: ShardSpec) -> u32 {
    keys.iter()
        .filter_map(|key| match Name::parse(key) {
            Some(Name::AttemptMarker(names)) | Some(Name::Data { names, .. })
                if names.shard == shard =>
            {
                Some(names.attempt)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sharded(index: u32, count: u32, attempt: u32) -> OutputLayout {
        OutputLayout::for_attempt(AttemptNames {
            shard: ShardSpec::new(index, count).unwrap(),
            attempt,
        })
    }

    #[test]
    fn names_carry_the_attempt_and_the_shard() {
        let layout = OutputLayout::new();
        assert_eq!(layout.part(3, 12), "part-a001-03-00012.parquet");
        assert_eq!(
            layout.rejects_part(0, 1),
            "_progress/rejects-a001-00-00001.parquet"
        );
        assert_eq!(
            layout.batches_part(1, 2),
            "_progress/batches-a001-01-00002.parquet"
        );
        let shard = sharded(2, 3, 4);
        assert_eq!(shard.part(0, 1), "part-s002of003-a004-00-00001.parquet");
        assert_eq!(
            shard.attempt_marker(),
            "_progress/attempt-s002of003-a004.json"
        );
        assert_eq!(shard.lock(), "_progress/lock-s002of003");
    }

    #[test]
    fn every_name_built_parses_back_to_what_built_it() {
        for layout in [OutputLayout::new(), sharded(2, 3, 4), sharded(11, 1500, 7)] {
            let names = layout.names();
            for (key, kind) in [
                (layout.part(3, 12), DataKind::Part),
                (layout.rejects_part(3, 12), DataKind::Rejects),
                (layout.batches_part(3, 12), DataKind::Batches),
            ] {
                let parsed = Name::parse(&key);
                let expected = Name::Data {
                    kind,
                    names,
                    writer: 3,
                    seq: 12,
                };
                assert_eq!(parsed, Some(expected), "{key}");
            }
            assert_eq!(
                Name::parse(&layout.attempt_marker()),
                Some(Name::AttemptMarker(names))
            );
            let record = OutputLayout::log_record(names.shard, 17);
            assert_eq!(Name::parse(&record), Some(Name::LogRecord(names.shard, 17)));
            let checkpoint = OutputLayout::log_checkpoint(names.shard, 100);
            assert_eq!(
                Name::parse(&checkpoint),
                Some(Name::LogCheckpoint(names.shard, 100))
            );
            let temp = temp_key(&record, &format!("{}-1-0", names.shard.tag()));
            assert_eq!(Name::parse(&temp), Some(Name::Temporary));
            assert_eq!(Name::parse(&layout.lock()), Some(Name::Lock(names.shard)));
        }
    }

    #[test]
    fn temporary_names_carry_the_writers_tag() {
        let temp = temp_key("_progress/attempt-s001of003-a001.json", "s002of003-77-0");
        assert_eq!(
            temp,
            "_progress/.attempt-s001of003-a001.json.s002of003-77-0.inprogress"
        );
        assert_eq!(Name::parse(&temp), Some(Name::Temporary));
        assert!(sharded(2, 3, 1).is_leftover(&temp));
        assert!(!sharded(1, 3, 1).is_leftover(&temp));
        let commit = temp_key(SUCCESS, "s000of001-5-9");
        assert!(OutputLayout::new().is_leftover(&commit));
    }

    #[test]
    fn the_run_files_and_their_temporaries_are_ours_and_no_other_parquet_sits_beside_the_parts() {
        for key in [REJECTS, BATCHES] {
            assert_eq!(Name::parse(key), Some(Name::RunFile), "{key}");
            // One table at the top: only part files end in .parquet there.
            assert!(key.starts_with('_') && key.contains('/'), "{key}");
            let temp = temp_key(key, "s000of001-5-9");
            assert_eq!(Name::parse(&temp), Some(Name::Temporary), "{temp}");
            assert!(OutputLayout::new().is_leftover(&temp), "{temp}");
        }
        for key in LEGACY_RUN_FILES {
            assert_eq!(Name::parse(key), Some(Name::RunFile), "{key}");
        }
        assert!(!is_ours("_rejects/notes.parquet"));
        assert!(!is_ours(
            "_segpredict/.x.parquet.s000of001-1-0.inprogress.bak"
        ));
    }

    #[test]
    fn other_programs_names_are_not_ours() {
        for key in [
            "part-00000-5f1c-4a2e.snappy.parquet",
            "part-00-00001.parquet",
            "part-a001-00-00001.csv",
            "part-x001-00-00001.parquet",
            "part-s1of3-a001-00-00001.parquet",
            "data.parquet",
            "_metadata",
            "_common_metadata",
            ".hidden",
            "_progress/notes.txt",
            "_SUCCESS.bak",
            // Our temporary names' shape, but where we never write.
            "year=2026/.part-00000.parquet.s000of001-7-0.inprogress",
            "_progress/old/.done-s000of001.json.s000of001-7-0.inprogress",
            "_progress/log/s000of001/1.json",
            "_progress/log/notatag/00000000000000000001.json",
        ] {
            assert!(!is_ours(key), "{key}");
        }
    }

    #[test]
    fn the_last_attempt_is_found_by_markers_and_data_files() {
        let keys: Vec<String> = [
            "part-s000of002-a001-00-00001.parquet",
            "part-s001of002-a001-00-00001.parquet",
            "_progress/rejects-s001of002-a002-00-00001.parquet",
            "_progress/attempt-s001of002-a002.json",
            "_progress/attempt-s001of002-a001.json",
            "part-s000of002-a004-00-00001.parquet",
        ]
        .map(String::from)
        .to_vec();
        let one = ShardSpec::new(1, 2).unwrap();
        assert_eq!(last_attempt(&keys, one), 2);
        // A committed part whose marker is gone still counts its attempt.
        assert_eq!(last_attempt(&keys, ShardSpec::new(0, 2).unwrap()), 4);
    }
}
