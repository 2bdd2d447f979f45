//! Each shard's commit log: what is visible in the output is what the log
//! says, never what a listing shows. As in Delta Lake's `_delta_log`, a
//! record is a put-if-absent of the next number
//! (`_progress/log/S/00000000000000000007.json`), so two writers can never
//! both write record 7, and a data file no counted record names does not
//! exist for resume, `check` or the commit (the final commit removes it).
//!
//! Fencing: an attempt begins by appending a `begin` record with its epoch
//! (its attempt number). A `commit` or `done` record counts only if its
//! epoch is the epoch of the last `begin` before it in the log. A writer
//! that was stalled, killed with a PUT in flight, or whose lock file was
//! deleted under it may still land data files, but its next record either
//! lands before the newer `begin` (and counts: the newer attempt read the
//! log after its own `begin` landed) or finds the newer `begin` in its
//! place and stops ([`LogError::Fenced`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use segpredict_core::done::{DoneError, DoneSet, Finished};
use segpredict_core::exit::{Classify, Failure};
use segpredict_core::message::Origin;
use segpredict_core::shard::ShardSpec;
use segpredict_core::stats::BatchTotals;
use serde::{Deserialize, Serialize};

use crate::checkpoint::ShardDone;
use crate::layout::{Name, OutputLayout};
use crate::store::{Store, StoreError};

/// What kind of rows a data file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Predictions (`part-*.parquet`).
    Part,
    /// Rejected rows, merged into the run's rejects file at the commit.
    Rejects,
    /// The model worker's batch records.
    Batches,
}

/// Input rows a data file holds: rows of input file `file` (its index in
/// `_run.json`'s inputs), as `[start, end)` pairs laid flat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Covered {
    /// The input file's index in the manifest's inputs.
    pub file: u32,
    /// Row indices within that file, as sorted, disjoint `[start, end)`
    /// pairs laid flat (`[0, 10, 20, 25]` is rows 0-9 and 20-24).
    pub ranges: Vec<u64>,
}

/// A data file a record makes visible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file's key, relative to the output location.
    pub key: String,
    /// What the file holds.
    pub kind: FileKind,
    /// The file's size in bytes, checked whenever it is read back.
    pub bytes: u64,
    /// Data rows in the file, which the commit sums against the shards'
    /// accounting.
    pub rows: u64,
    /// Of the whole file, checked whenever the file is read back.
    pub sha256: String,
    /// The input rows the file finished, which a resume skips (empty for
    /// batch records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub covers: Vec<Covered>,
    /// A batch-record file's totals, so a resume adds the earlier
    /// attempts' batches to its report from the log alone, without reading
    /// each file back (absent for other kinds, and in records written
    /// before they were carried: such a file is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_totals: Option<BatchTotals>,
}

/// One record of a shard's log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The attempt that wrote it.
    pub epoch: u32,
    /// What the record says.
    #[serde(flatten)]
    pub entry: Entry,
}

/// What a log record says, tagged by `kind` in its JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    /// An attempt began: every record of an earlier epoch after this one
    /// does not count.
    Begin {
        /// The process that began it (`pid N on HOST, since TIME`).
        holder: String,
        /// RFC 3339, UTC.
        started: String,
    },
    /// These files are visible, whole.
    Commit {
        /// The files, each with its size, checksum and the rows it holds.
        files: Vec<FileEntry>,
    },
    /// The shard is done, with its accounting and report.
    Done(Box<ShardDone>),
}

/// Why a shard's commit log could not be read or appended to.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record (or log checkpoint) that does not parse: the log is
    /// damaged, and a retry reads the same.
    #[error("{location} is not a commit-log record")]
    Malformed {
        /// The record's location.
        location: String,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
    /// A newer attempt of the shard began after this one (its lease was
    /// taken over): this attempt must stop appending.
    #[error("shard {shard}: attempt {epoch} was superseded by attempt {newer} ({holder}, started {started}); this process stops, and what it did not commit is redone by the newer attempt")]
    Fenced {
        /// The shard.
        shard: ShardSpec,
        /// This process's attempt.
        epoch: u32,
        /// The attempt that superseded it.
        newer: u32,
        /// The newer attempt's process, as its `begin` record says
        /// (`unknown` when the record found is not its `begin`).
        holder: String,
        /// When the newer attempt began, RFC 3339 (or `unknown`).
        started: String,
    },
    /// A counted file's rows do not fit the inputs or overlap another
    /// counted file's: the log and the inputs disagree.
    #[error("{location}: {source}")]
    Rows {
        /// The log's location and the file's key.
        location: String,
        /// Which row, and why.
        #[source]
        source: DoneError,
    },
}

impl Classify for LogError {
    /// Fenced: the newer attempt goes on, and a rerun after it resumes.
    fn failure(&self) -> Failure {
        match self {
            LogError::Store(e) => e.failure(),
            LogError::Fenced { .. } => Failure::Retryable,
            LogError::Malformed { .. } | LogError::Rows { .. } => Failure::Permanent,
        }
    }
}

/// A shard's log as read: the records that count, in order. Also what a
/// log checkpoint holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogState {
    /// The number the next record takes.
    pub next: u64,
    /// The epoch of the last `begin` (0: none yet).
    pub epoch: u32,
    /// Files of the counted `commit` records.
    pub files: Vec<FileEntry>,
    /// The counted `done` record.
    pub done: Option<ShardDone>,
    /// The last `begin`'s holder and start.
    pub begun_by: Option<(String, String)>,
}

impl LogState {
    fn apply(&mut self, record: Record) {
        match record.entry {
            Entry::Begin { holder, started } => {
                self.epoch = record.epoch;
                self.begun_by = Some((holder, started));
            }
            Entry::Commit { files } if record.epoch == self.epoch => self.files.extend(files),
            Entry::Done(done) if record.epoch == self.epoch => self.done = Some(*done),
            // A superseded epoch's record: it never counts.
            Entry::Commit { .. } | Entry::Done(_) => {
                tracing::debug!(
                    epoch = record.epoch,
                    current = self.epoch,
                    "a fenced record"
                );
            }
        }
        self.next += 1;
    }

    /// The counted files of `kind`.
    pub fn files_of(&self, kind: FileKind) -> impl Iterator<Item = &FileEntry> {
        self.files.iter().filter(move |f| f.kind == kind)
    }

    /// The rows the counted files finished, for inputs of these row counts.
    pub fn done_set(&self, rows_per_file: &[u64], location: &str) -> Result<DoneSet, LogError> {
        let mut done = DoneSet::new(rows_per_file);
        for file in &self.files {
            let how = match file.kind {
                FileKind::Part => Finished::Predicted,
                FileKind::Rejects => Finished::Rejected,
                FileKind::Batches => continue,
            };
            for covered in &file.covers {
                for pair in covered.ranges.chunks_exact(2) {
                    for row in pair[0]..pair[1] {
                        done.insert(covered.file, row, how)
                            .map_err(|source| LogError::Rows {
                                location: format!("{location} ({})", file.key),
                                source,
                            })?;
                    }
                }
            }
        }
        Ok(done)
    }
}

impl LogState {
    /// The state before the first record.
    pub fn empty() -> Self {
        Self {
            next: 1,
            ..Self::default()
        }
    }
}

/// A log checkpoint is written after every this many records: a reader
/// reads at most this many records after the newest checkpoint (plus one
/// listing of the log's folder and the checkpoint), not the whole log.
pub const CHECKPOINT_EVERY: u64 = 50;

/// A shard's log from its first record up to the first number missing:
/// from its newest checkpoint on, when there is one that reads.
pub fn read_log(store: &dyn Store, shard: ShardSpec) -> Result<LogState, LogError> {
    let mut state = newest_checkpoint(store, shard)?.unwrap_or_else(LogState::empty);
    read_on(store, shard, &mut state)?;
    Ok(state)
}

/// The state the newest readable checkpoint holds. A checkpoint is only a
/// shortcut (the records it sums stay): one that does not parse, or names
/// a number past what the log holds, is passed over.
fn newest_checkpoint(store: &dyn Store, shard: ShardSpec) -> Result<Option<LogState>, LogError> {
    let mut found: Vec<u64> = store
        .list(&OutputLayout::log_folder(shard))?
        .iter()
        .filter_map(|key| match Name::parse(key) {
            Some(Name::LogCheckpoint(s, seq)) if s == shard => Some(seq),
            _ => None,
        })
        .collect();
    found.sort_unstable();
    for seq in found.into_iter().rev() {
        let key = OutputLayout::log_checkpoint(shard, seq);
        let Some(bytes) = store.get(&key)? else {
            continue;
        };
        match serde_json::from_slice::<LogState>(&bytes) {
            Ok(state) if state.next == seq + 1 => return Ok(Some(state)),
            _ => {
                tracing::warn!(file = %store.locate(&key), "passed over a log checkpoint that does not read")
            }
        }
    }
    Ok(None)
}

/// Reads the records from `state.next` on into `state`: a state read
/// earlier is brought up to date with one request for the next number
/// when nothing was appended (records are never replaced, so what was
/// read stays true).
pub fn read_on(store: &dyn Store, shard: ShardSpec, state: &mut LogState) -> Result<(), LogError> {
    while let Some(record) = record(store, shard, state.next)? {
        state.apply(record);
    }
    Ok(())
}

fn record(store: &dyn Store, shard: ShardSpec, seq: u64) -> Result<Option<Record>, LogError> {
    let key = OutputLayout::log_record(shard, seq);
    let Some(bytes) = store.get(&key)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| LogError::Malformed {
            location: store.locate(&key),
            source,
        })
}

/// Appends `record` as number `seq`, if that number is free.
fn put(store: &dyn Store, shard: ShardSpec, seq: u64, record: &Record) -> Result<bool, LogError> {
    let key = OutputLayout::log_record(shard, seq);
    let bytes = serde_json::to_vec(record).map_err(|source| LogError::Malformed {
        location: store.locate(&key),
        source,
    })?;
    Ok(store.put_if_absent(&key, &bytes)?)
}

/// Begins epoch `epoch` of `shard`: appends its `begin` record after
/// everything there (read on from `known`, the log as read so far), and
/// returns the log as it stood before it (final: no record of an earlier
/// epoch counts after it) and the writer of the epoch's records. A `done`
/// record found first ends it: nothing is appended.
pub fn begin_epoch(
    store: &Arc<dyn Store>,
    shard: ShardSpec,
    epoch: u32,
    holder: &str,
    known: LogState,
) -> Result<(LogState, Option<LogWriter>), LogError> {
    let record = Record {
        epoch,
        entry: Entry::Begin {
            holder: holder.to_string(),
            started: segpredict_core::time::now_rfc3339(),
        },
    };
    let mut state = known;
    read_on(store.as_ref(), shard, &mut state)?;
    loop {
        if state.done.is_some() {
            return Ok((state, None));
        }
        if put(store.as_ref(), shard, state.next, &record)? {
            let writer = LogWriter {
                store: store.clone(),
                shard,
                epoch,
                state: Arc::new(Mutex::new(state.clone())),
            };
            writer.appended(
                &mut writer.state.lock().unwrap_or_else(|e| e.into_inner()),
                record,
            );
            return Ok((state, Some(writer)));
        }
        // Another writer appended meanwhile: read on, try after it.
        read_on(store.as_ref(), shard, &mut state)?;
    }
}

/// Appends one attempt's records; shared by its writer threads (one record
/// at a time, so their numbers never race inside the process). It keeps
/// the log's state as it appends (no other process's record can come
/// between its own without fencing it), and writes a checkpoint of it
/// after every [`CHECKPOINT_EVERY`] records.
#[derive(Debug, Clone)]
pub struct LogWriter {
    store: Arc<dyn Store>,
    shard: ShardSpec,
    epoch: u32,
    state: Arc<Mutex<LogState>>,
}

impl LogWriter {
    /// The attempt whose records this writer appends.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Makes `files` visible, or learns that a newer attempt began.
    pub fn commit(&self, files: Vec<FileEntry>) -> Result<u64, LogError> {
        let (count, rows) = (files.len(), files.iter().map(|f| f.rows).sum::<u64>());
        let record = self.append(Entry::Commit { files })?;
        tracing::debug!(record, files = count, rows, "appended a commit record");
        Ok(record)
    }

    /// Records that the shard is done.
    pub fn done(&self, done: ShardDone) -> Result<u64, LogError> {
        self.append(Entry::Done(Box::new(done)))
    }

    fn append(&self, entry: Entry) -> Result<u64, LogError> {
        let record = Record {
            epoch: self.epoch,
            entry,
        };
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let seq = state.next;
            if put(self.store.as_ref(), self.shard, seq, &record)? {
                self.appended(&mut state, record);
                return Ok(seq);
            }
            self.check_not_fenced(seq)?;
            state.next += 1;
        }
    }

    /// `record` is in the log as number `state.next`.
    fn appended(&self, state: &mut LogState, record: Record) {
        let seq = state.next;
        state.apply(record);
        if seq.is_multiple_of(CHECKPOINT_EVERY) {
            self.write_checkpoint(seq, state);
        }
    }

    /// A failed checkpoint costs readers time, never correctness: it is
    /// logged and the run goes on.
    fn write_checkpoint(&self, seq: u64, state: &LogState) {
        let key = OutputLayout::log_checkpoint(self.shard, seq);
        let failed = |error: &dyn std::error::Error| {
            tracing::warn!(file = %self.store.locate(&key), %error, "could not write a log checkpoint");
        };
        match serde_json::to_vec(state) {
            Ok(bytes) => {
                if let Err(error) = self.store.put_if_absent(&key, &bytes) {
                    failed(&error);
                }
            }
            Err(error) => failed(&error),
        }
    }

    /// Whether a newer attempt has begun since this one's last record: a
    /// failure of this writer (its temporary files removed under it, say)
    /// is then best told as that.
    pub fn superseded(&self) -> Option<LogError> {
        let next = self.state.lock().unwrap_or_else(|e| e.into_inner()).next;
        self.check_not_fenced(next).err()
    }

    /// Record `seq` is taken: by a newer attempt's `begin` (fenced), or by
    /// a record that a newer attempt will not count anyway.
    fn check_not_fenced(&self, seq: u64) -> Result<(), LogError> {
        match record(self.store.as_ref(), self.shard, seq)? {
            Some(Record {
                epoch,
                entry: Entry::Begin { holder, started },
            }) if epoch != self.epoch => Err(LogError::Fenced {
                shard: self.shard,
                epoch: self.epoch,
                newer: epoch,
                holder,
                started,
            }),
            // Only one process writes an epoch, one record at a time: any
            // other record here means the log moved on without us.
            Some(other) => Err(LogError::Fenced {
                shard: self.shard,
                epoch: self.epoch,
                newer: other.epoch,
                holder: "unknown".into(),
                started: "unknown".into(),
            }),
            None => Ok(()),
        }
    }
}

/// The data files of our layout in `keys` (a listing of the output) that
/// no counted record names: what a writer killed with an upload in
/// flight, or stalled past its lease, landed after the log moved on.
pub fn uncounted<'a>(keys: &'a [String], counted: &[FileEntry]) -> Vec<&'a str> {
    let named: HashSet<&str> = counted.iter().map(|f| f.key.as_str()).collect();
    keys.iter()
        .map(String::as_str)
        .filter(|k| matches!(Name::parse(k), Some(Name::Data { .. })) && !named.contains(k))
        .collect()
}

/// Removes the [`uncounted`] data files of `keys`: never counted, now not
/// listed either.
pub fn remove_uncounted(
    store: &dyn Store,
    keys: &[String],
    counted: &[FileEntry],
) -> Result<(), StoreError> {
    for key in uncounted(keys, counted) {
        store.delete(key)?;
        tracing::info!(file = %store.locate(key), "removed a data file no commit record names");
    }
    Ok(())
}

/// The input rows written to one data file, gathered as they are written
/// and turned into ranges when it is committed.
#[derive(Debug, Default)]
pub struct Coverage {
    rows: BTreeMap<u32, Vec<u64>>,
}

impl Coverage {
    /// Notes that input row `origin` is in the file (in any order, each
    /// row once).
    pub fn add(&mut self, origin: Origin) {
        self.rows
            .entry(origin.file_idx)
            .or_default()
            .push(origin.row_idx);
    }

    /// The rows as sorted `[start, end)` ranges per input file.
    pub fn into_covered(self) -> Vec<Covered> {
        self.rows
            .into_iter()
            .map(|(file, mut rows)| {
                rows.sort_unstable();
                Covered {
                    file,
                    ranges: ranges_of(&rows),
                }
            })
            .collect()
    }
}

/// Sorted row numbers as flat `[start, end)` pairs (a repeated row stays
/// in, so the done set refuses it as a duplicate).
fn ranges_of(sorted: &[u64]) -> Vec<u64> {
    let mut ranges: Vec<u64> = Vec::new();
    for &row in sorted {
        match ranges.last_mut() {
            Some(end) if *end == row => *end += 1,
            _ => ranges.extend([row, row + 1]),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LocalStore;

    fn store(dir: &std::path::Path) -> Arc<dyn Store> {
        Arc::new(LocalStore::new(dir))
    }

    fn begin(dir: &std::path::Path, epoch: u32, holder: &str) -> (LogState, Option<LogWriter>) {
        begin_epoch(
            &store(dir),
            ShardSpec::WHOLE,
            epoch,
            holder,
            LogState::empty(),
        )
        .unwrap()
    }

    fn part(key: &str, rows: std::ops::Range<u64>) -> FileEntry {
        FileEntry {
            key: key.into(),
            kind: FileKind::Part,
            bytes: 1,
            rows: rows.end - rows.start,
            sha256: String::new(),
            covers: vec![Covered {
                file: 0,
                ranges: vec![rows.start, rows.end],
            }],
            batch_totals: None,
        }
    }

    /// Every record read one at a time, checkpoints ignored.
    fn read_every_record(dir: &std::path::Path) -> LogState {
        let mut state = LogState::empty();
        read_on(store(dir).as_ref(), ShardSpec::WHOLE, &mut state).unwrap();
        state
    }

    fn keys(state: &LogState) -> Vec<String> {
        state.files.iter().map(|f| f.key.clone()).collect()
    }

    #[test]
    fn a_reader_starts_at_the_newest_checkpoint_and_reads_the_same_log() {
        let dir = tempfile::tempdir().unwrap();
        let (_, first) = begin(dir.path(), 1, "first");
        let first = first.unwrap();
        for i in 0..70u64 {
            first
                .commit(vec![part(
                    &format!("part-a001-00-{i:05}.parquet"),
                    i * 10..i * 10 + 10,
                )])
                .unwrap();
        }
        // A second attempt fences the first; its records follow.
        let (_, second) = begin(dir.path(), 2, "second");
        let second = second.unwrap();
        for i in 0..40u64 {
            second
                .commit(vec![part(
                    &format!("part-a002-00-{i:05}.parquet"),
                    700 + i..701 + i,
                )])
                .unwrap();
        }
        let s = store(dir.path());
        let folder = OutputLayout::log_folder(ShardSpec::WHOLE);
        let checkpoints: Vec<String> = s
            .list(&folder)
            .unwrap()
            .into_iter()
            .filter(|k| k.ends_with(".checkpoint.json"))
            .collect();
        // 1 + 70 + 1 + 40 = 112 records: checkpoints after 50 and 100.
        assert_eq!(checkpoints.len(), 2, "{checkpoints:?}");
        let want = read_every_record(dir.path());
        assert_eq!(want.next, 113);
        let got = read_log(s.as_ref(), ShardSpec::WHOLE).unwrap();
        assert_eq!((got.next, got.epoch), (want.next, want.epoch));
        assert_eq!(keys(&got), keys(&want));
        assert_eq!(got.files.len(), 70 + 40);
        // Started at record 101: records 1..=100 removed, it still reads.
        for seq in 1..=100 {
            s.delete(&OutputLayout::log_record(ShardSpec::WHOLE, seq))
                .unwrap();
        }
        assert_eq!(
            keys(&read_log(s.as_ref(), ShardSpec::WHOLE).unwrap()),
            keys(&want)
        );
    }

    #[test]
    fn a_checkpoint_that_does_not_read_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let (_, first) = begin(dir.path(), 1, "first");
        let first = first.unwrap();
        for i in 0..60u64 {
            first
                .commit(vec![part(
                    &format!("part-a001-00-{i:05}.parquet"),
                    i..i + 1,
                )])
                .unwrap();
        }
        let s = store(dir.path());
        let key = OutputLayout::log_checkpoint(ShardSpec::WHOLE, 50);
        s.delete(&key).unwrap();
        s.put(&key, b"{not json").unwrap();
        let got = read_log(s.as_ref(), ShardSpec::WHOLE).unwrap();
        assert_eq!(keys(&got), keys(&read_every_record(dir.path())));
        assert_eq!(got.files.len(), 60);
    }

    #[test]
    fn ranges_merge_neighbours_and_keep_repeats() {
        assert_eq!(ranges_of(&[1, 2, 3, 7, 9, 10]), [1, 4, 7, 8, 9, 11]);
        assert_eq!(ranges_of(&[4, 4]), [4, 5, 4, 5]);
        let mut c = Coverage::default();
        for row in [5, 3, 4] {
            c.add(Origin {
                file_idx: 1,
                row_idx: row,
            });
        }
        assert_eq!(
            c.into_covered(),
            [Covered {
                file: 1,
                ranges: vec![3, 6]
            }]
        );
    }

    #[test]
    fn a_stale_epoch_is_fenced_and_its_late_records_never_count() {
        let dir = tempfile::tempdir().unwrap();
        let (state, first) = begin(dir.path(), 1, "first");
        assert_eq!(state.next, 1);
        let first = first.unwrap();
        first
            .commit(vec![part("part-a001-00-00001.parquet", 0..10)])
            .unwrap();
        // A second attempt begins while the first still runs (it stalled
        // past its lease, or its lock file was removed).
        let (state, second) = begin(dir.path(), 2, "second");
        assert_eq!(state.files.len(), 1, "the first epoch's commit counts");
        let e = first
            .commit(vec![part("part-a001-00-00002.parquet", 10..20)])
            .unwrap_err();
        assert!(matches!(e, LogError::Fenced { newer: 2, .. }), "{e}");
        assert!(e.to_string().contains("second"), "{e}");
        second
            .unwrap()
            .commit(vec![part("part-a002-00-00001.parquet", 10..20)])
            .unwrap();
        let now = read_log(store(dir.path()).as_ref(), ShardSpec::WHOLE).unwrap();
        let keys: Vec<&str> = now.files.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(
            keys,
            ["part-a001-00-00001.parquet", "part-a002-00-00001.parquet"]
        );
        let done = now.done_set(&[20], "out").unwrap();
        assert_eq!(done.predicted(), 20);
    }

    #[test]
    fn a_record_of_an_older_epoch_after_a_newer_begin_does_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let l = store(dir.path());
        let write = |seq: u64, record: Record| {
            assert!(put(l.as_ref(), ShardSpec::WHOLE, seq, &record).unwrap())
        };
        let begin = |epoch: u32| Record {
            epoch,
            entry: Entry::Begin {
                holder: format!("h{epoch}"),
                started: "t".into(),
            },
        };
        write(1, begin(1));
        write(2, begin(2));
        write(
            3,
            Record {
                epoch: 1,
                entry: Entry::Commit {
                    files: vec![part("part-a001-00-00001.parquet", 0..5)],
                },
            },
        );
        let state = read_log(l.as_ref(), ShardSpec::WHOLE).unwrap();
        assert!(state.files.is_empty());
        assert_eq!((state.next, state.epoch), (4, 2));
    }

    #[test]
    fn two_attempts_beginning_at_once_take_different_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let (_, a) = begin(dir.path(), 1, "a");
        let (state, b) = begin(dir.path(), 2, "b");
        assert_eq!(state.next, 2);
        assert!(a.unwrap().commit(vec![]).is_err());
        b.unwrap().commit(vec![]).unwrap();
    }
}
