//! The output location as the run's checkpoint, in one place: what a run
//! finds there before its first row (the verdict, which `run` and `check`
//! both take), the lock that keeps one writer per shard, what an attempt
//! writes to begin and removes when its start-up fails, which committed
//! files say which rows are done, and the markers that let the last of
//! several shards commit the whole run (`commit.rs`). Everything goes
//! through a [`Store`]; every name is `layout.rs`'s.

use segpredict_core::exit::{Classify, Failure};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::layout::{self, AttemptNames, Name, OutputLayout, MANIFEST, SUCCESS};
use crate::log::{begin_epoch, read_log, read_on, FileKind, LogError, LogState, LogWriter};
use crate::manifest::{ManifestError, RunManifest};
use crate::store::{Holder, Lock, Store, StoreError};
use segpredict_core::accounting::RowCounts;
use segpredict_core::done::DoneSet;
use segpredict_core::shard::ShardSpec;
use segpredict_report::RunReport;

/// Why the output location cannot be used as this run's checkpoint, or why
/// reading or writing its protocol files failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The location holds a different run's output and `--overwrite` was
    /// not given: nothing is touched.
    #[error("output {location} holds another run's output ({}); pass --overwrite to replace it", differences.join("; "))]
    Refused {
        /// The output location, as the user gave it.
        location: String,
        /// Each way the recorded manifest differs from this run's, one
        /// phrase each, for the message.
        differences: Vec<String>,
    },
    /// segpredict's names without its manifest: not provably ours, so not
    /// removed even with `--overwrite`.
    #[error("output {location} holds segpredict's file names but no run manifest ({found}); segpredict removes only what its own runs recorded: remove them or choose another output")]
    Unmanaged {
        /// The output location, as the user gave it.
        location: String,
        /// The first name found and how many there are, for the message.
        found: String,
    },
    /// Files that are not segpredict's: a run never writes beside or
    /// removes them.
    #[error("output {location} holds files segpredict did not write ({found}); it writes only into an empty directory or its own run's output, and never removes other files (not with --overwrite either)")]
    Foreign {
        /// The output location, as the user gave it.
        location: String,
        /// The first foreign name and how many there are, for the message.
        found: String,
    },
    /// Another live process holds this shard's lock (after waiting
    /// `--wait-for-lock`, if given).
    #[error("output {location}: shard {shard} is being written by another process ({}); run again when it has ended, or pass --wait-for-lock DURATION to wait for it", holder.described())]
    Locked {
        /// The output location, as the user gave it.
        location: String,
        /// The shard whose lock is held.
        shard: ShardSpec,
        /// Who holds the lock (host, process, since when), as its lock
        /// file says.
        holder: Holder,
    },
    /// Another process wrote this attempt's start marker (or the manifest)
    /// first, starting the same attempt: this one backs off.
    #[error("{location} was written by another process starting the same attempt; run again")]
    AttemptTaken {
        /// The marker or manifest the other process wrote.
        location: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run manifest could not be read or written.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The shard's commit log could not be read or appended to.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Classify for CheckpointError {
    /// A retry of the same command fails the same way.
    fn failure(&self) -> Failure {
        match self {
            CheckpointError::Refused { .. }
            | CheckpointError::Unmanaged { .. }
            | CheckpointError::Foreign { .. } => Failure::Permanent,
            // The other process may end: a retry can succeed.
            CheckpointError::Locked { .. } | CheckpointError::AttemptTaken { .. } => {
                Failure::Retryable
            }
            CheckpointError::Store(e) => e.failure(),
            CheckpointError::Manifest(e) => e.failure(),
            CheckpointError::Log(e) => e.failure(),
        }
    }
}

/// What a run would do with its output location, decided before its first
/// row by [`verdict`], which reads and never writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No output yet: the run starts from scratch.
    New,
    /// An earlier attempt of this very run: the run resumes it.
    Resumes,
    /// This shard finished in an earlier attempt; the run may still wait
    /// for other shards.
    ShardDone,
    /// This very run is complete (`_SUCCESS`): nothing would be done.
    Complete,
    /// Another run's output, which `--overwrite` replaces.
    Replaced,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::New => "new",
            Verdict::Resumes => "resumes an earlier attempt",
            Verdict::ShardDone => "this shard is done; the run waits for the others",
            Verdict::Complete => "already complete",
            Verdict::Replaced => "replaced (--overwrite)",
        })
    }
}

/// The accounting a shard records when it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ShardAccounting {
    /// The shard's rows by outcome, summed over all its attempts.
    pub rows: RowCounts,
    /// How many attempts the shard took, the one that finished included.
    pub attempts: u32,
}

/// What each shard records when it is done, for the commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardDone {
    /// The shard that finished.
    pub shard: ShardSpec,
    /// Its rows and attempts, which the commit sums over the shards.
    pub accounting: ShardAccounting,
    /// The shard's own run report.
    pub report: RunReport,
}

/// A run's checkpoint: its store, what the run is, and which shard this
/// process writes.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    store: Arc<dyn Store>,
    manifest: RunManifest,
    shard: ShardSpec,
    overwrite: bool,
    /// How long to wait for another process's lock (zero: refuse at once).
    wait_for_lock: Duration,
    /// Set when this process loses its lock (a lease taken over after it
    /// stalled): the run's cancel flag, so the stages stop in order.
    on_lost_lock: Option<Arc<AtomicBool>>,
    /// This shard's log as read so far: each later look reads on from it
    /// (one request when nothing was appended), so a resume reads every
    /// record once, not once per question (`benches/store/resume.py`).
    log_read: Arc<Mutex<Option<LogState>>>,
}

/// An attempt that began: its names, the store, the lock it holds until it
/// is dropped, the rows earlier attempts committed, and the writer of its
/// commit-log records (the only way anything it writes becomes visible).
#[derive(Debug)]
pub struct Attempt {
    /// The output location's store, which every file of the attempt goes
    /// through.
    pub store: Arc<dyn Store>,
    /// The names of the output (the attempt's own are in `log`'s records).
    pub layout: OutputLayout,
    /// Rows earlier attempts committed, as the log counts them.
    pub done: DoneSet,
    /// The batch-record files earlier attempts committed.
    pub earlier_batch_files: Vec<crate::log::FileEntry>,
    /// Appends this attempt's records to the shard's commit log: a file
    /// counts only once a record here names it.
    pub log: LogWriter,
    lock: Box<dyn Lock>,
}

/// How an attempt began.
#[derive(Debug)]
pub enum Begun {
    /// Predict every row not in the committed files.
    Predict(Attempt),
    /// This shard finished earlier: only the commit may be left, done
    /// while holding the shard's lock.
    ShardDone(Box<dyn Lock>),
    /// `_SUCCESS` of this very run is there: nothing touched.
    Complete,
}

impl Checkpoint {
    /// The checkpoint of the run `manifest` describes, for `shard`, at
    /// `store`. Touches nothing until [`Checkpoint::verdict`] or
    /// [`Checkpoint::begin`]; `overwrite` lets `begin` replace another
    /// run's output (never foreign files). Refuses a held lock at once
    /// unless [`Checkpoint::waiting_for_lock`] says otherwise.
    pub fn new(
        store: Arc<dyn Store>,
        manifest: RunManifest,
        shard: ShardSpec,
        overwrite: bool,
    ) -> Self {
        Self {
            store,
            manifest,
            shard,
            overwrite,
            wait_for_lock: Duration::ZERO,
            on_lost_lock: None,
            log_read: Arc::new(Mutex::new(None)),
        }
    }

    /// Waits up to `wait` for another process's lock on the shard.
    pub fn waiting_for_lock(mut self, wait: Duration) -> Self {
        self.wait_for_lock = wait;
        self
    }

    /// Sets `cancel` if this process loses its lock while it runs.
    pub fn cancelling_on_lost_lock(mut self, cancel: Arc<AtomicBool>) -> Self {
        self.on_lost_lock = Some(cancel);
        self
    }

    /// This shard's commit log as it stands.
    pub fn log(&self) -> Result<LogState, CheckpointError> {
        let mut read = self.log_read.lock().unwrap_or_else(|e| e.into_inner());
        match read.as_mut() {
            Some(state) => read_on(self.store.as_ref(), self.shard, state)?,
            None => *read = Some(read_log(self.store.as_ref(), self.shard)?),
        }
        Ok(read.clone().unwrap_or_else(LogState::empty))
    }

    /// Forgets the log read so far: the output was replaced under it.
    fn forget_log(&self) {
        *self.log_read.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The output location's store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This run's manifest: what the output at this location must be of
    /// to be resumed rather than refused or replaced.
    pub fn manifest(&self) -> &RunManifest {
        &self.manifest
    }

    /// What the run would do with its output: `check` reports it, `run`
    /// acts on it ([`Checkpoint::begin`]). Reads only.
    pub fn verdict(&self) -> Result<Verdict, CheckpointError> {
        let keys = self.store.list("")?;
        let foreign: Vec<&String> = keys.iter().filter(|k| !is_ours_or_ignored(k)).collect();
        if let Some(first) = foreign.first() {
            return Err(CheckpointError::Foreign {
                location: self.store.location(),
                found: describe(foreign.len(), first),
            });
        }
        let recorded = match RunManifest::read(self.store.as_ref()) {
            Err(ManifestError::Parse { .. } | ManifestError::OtherFormat { .. })
                if self.overwrite =>
            {
                return Ok(Verdict::Replaced)
            }
            Err(ManifestError::OtherFormat { format, .. }) => {
                return Err(CheckpointError::Refused {
                    location: self.store.location(),
                    differences: vec![format!(
                        "manifest format differs (was {format}, now {})",
                        crate::manifest::MANIFEST_FORMAT
                    )],
                })
            }
            other => other?,
        };
        let Some(recorded) = recorded else {
            return self.verdict_without_manifest(&keys);
        };
        let differences = self.manifest.differences_from(&recorded);
        match (differences.is_empty(), self.overwrite) {
            (true, _) if keys.iter().any(|k| k == SUCCESS) => Ok(Verdict::Complete),
            (true, _) if self.log()?.done.is_some() => Ok(Verdict::ShardDone),
            (true, _) => Ok(Verdict::Resumes),
            (false, true) => Ok(Verdict::Replaced),
            (false, false) => Err(CheckpointError::Refused {
                location: self.store.location(),
                differences,
            }),
        }
    }

    /// Whether another process writes this shard now, asked without taking
    /// its lock (`check` gives `run`'s answer and writes nothing).
    pub fn check_not_locked(&self) -> Result<(), CheckpointError> {
        match self.store.holder(&OutputLayout::lock_of(self.shard))? {
            None => Ok(()),
            Some(holder) => Err(CheckpointError::Locked {
                location: self.store.location(),
                shard: self.shard,
                holder,
            }),
        }
    }

    /// No manifest: new, unless files with our names are there (written by
    /// no run this version recorded): those are refused, even with
    /// `--overwrite`, since nothing says which run they are.
    fn verdict_without_manifest(&self, keys: &[String]) -> Result<Verdict, CheckpointError> {
        // Locks and temporary files are what a starting run writes first.
        let data: Vec<&String> = keys
            .iter()
            .filter(|k| {
                !matches!(
                    Name::parse(k),
                    Some(
                        Name::Lock(_)
                            | Name::Temporary
                            | Name::LogRecord(..)
                            | Name::LogCheckpoint(..)
                    )
                )
            })
            .collect();
        match data.first() {
            None => Ok(Verdict::New),
            Some(first) => Err(CheckpointError::Unmanaged {
                location: self.store.location(),
                found: describe(data.len(), first),
            }),
        }
    }

    /// Begins an attempt: takes this shard's lock, takes the verdict and
    /// acts on it (writes the manifest of a new run, replaces another
    /// run's output with `--overwrite`), claims the attempt's number (its
    /// epoch), appends its `begin` record to the shard's log, which fences
    /// every older attempt, and then removes this shard's leftovers.
    pub fn begin(&self) -> Result<Begun, CheckpointError> {
        // First without the lock, which is a file in the output: a location
        // that is refused gets nothing written into it, and a finished run
        // is not touched at all.
        if self.verdict()? == Verdict::Complete {
            self.remove_leftovers_of_a_finished_run()?;
            return Ok(Begun::Complete);
        }
        self.store.ensure()?;
        let lock = self.lock()?;
        // Again under the lock: another writer may have finished meanwhile.
        match self.verdict()? {
            Verdict::Complete => return Ok(Begun::Complete),
            Verdict::Replaced => self.replace()?,
            Verdict::New => self.write_manifest()?,
            Verdict::Resumes | Verdict::ShardDone => {}
        }
        let keys = self.store.list("")?;
        // After every attempt a marker or a data file names: a new attempt
        // never writes over an earlier one's files.
        let attempt = layout::last_attempt(&keys, self.shard) + 1;
        let layout = OutputLayout::for_attempt(AttemptNames {
            shard: self.shard,
            attempt,
        });
        if self.log()?.done.is_some() {
            self.remove_leftovers(&layout, &keys)?;
            return Ok(Begun::ShardDone(lock));
        }
        self.claim_attempt(&layout)?;
        let (state, writer) = begin_epoch(
            &self.store,
            self.shard,
            attempt,
            &holder_text(),
            self.log()?,
        )?;
        // Fenced first, cleaned after: a writer of an older attempt still
        // running (its lock file removed, its lease lost) whose files go
        // now finds this attempt's `begin` when it asks why it failed.
        self.remove_leftovers(&layout, &keys)?;
        let Some(log) = writer else {
            return Ok(Begun::ShardDone(lock));
        };
        Ok(Begun::Predict(Attempt {
            store: self.store.clone(),
            done: state.done_set(&self.input_rows(), &self.store.location())?,
            earlier_batch_files: state.files_of(FileKind::Batches).cloned().collect(),
            layout,
            log,
            lock,
        }))
    }

    /// The attempt's number is its own: put-if-absent of its marker.
    fn claim_attempt(&self, layout: &OutputLayout) -> Result<(), CheckpointError> {
        let marker = layout.attempt_marker();
        match self
            .store
            .put_if_absent(&marker, started_marker().as_bytes())?
        {
            true => Ok(()),
            false => Err(CheckpointError::AttemptTaken {
                location: self.store.locate(&marker),
            }),
        }
    }

    fn input_rows(&self) -> Vec<u64> {
        self.manifest.inputs.iter().map(|i| i.rows).collect()
    }

    /// Takes this shard's lock, waiting up to `wait_for_lock` for another
    /// holder to end (or its lease to expire).
    fn lock(&self) -> Result<Box<dyn Lock>, CheckpointError> {
        let key = OutputLayout::lock_of(self.shard);
        let deadline = Instant::now() + self.wait_for_lock;
        let mut told = false;
        loop {
            let holder = Holder(holder_text());
            let holder = match self.store.lock(&key, &holder, self.on_lost_lock.clone())? {
                Ok(lock) => return Ok(lock),
                Err(holder) => holder,
            };
            if Instant::now() >= deadline {
                return Err(CheckpointError::Locked {
                    location: self.store.location(),
                    shard: self.shard,
                    holder,
                });
            }
            if !told {
                tracing::info!(shard = %self.shard, holder = %holder.described(), "waiting for the shard's lock (--wait-for-lock)");
                told = true;
            }
            std::thread::sleep(LOCK_POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// A new run's manifest. Another shard of this run may have written it
    /// first (the same bytes); another run's is refused.
    fn write_manifest(&self) -> Result<(), CheckpointError> {
        // Never a plain put: two runs racing for an empty location must not
        // both believe the manifest is theirs.
        for _ in 0..3 {
            if self.manifest.write_if_absent(self.store.as_ref())? {
                return Ok(());
            }
            match RunManifest::read(self.store.as_ref())? {
                Some(recorded) if self.manifest.differences_from(&recorded).is_empty() => {
                    return Ok(())
                }
                Some(recorded) => {
                    return Err(CheckpointError::Refused {
                        location: self.store.location(),
                        differences: self.manifest.differences_from(&recorded),
                    })
                }
                // Removed meanwhile by a start-up that failed: try again.
                None => continue,
            }
        }
        Err(CheckpointError::AttemptTaken {
            location: self.store.locate(MANIFEST),
        })
    }

    /// Removes every file another run of ours wrote (the verdict has
    /// checked that nothing else is there), locks aside, then records this
    /// run.
    fn replace(&self) -> Result<(), CheckpointError> {
        // No shard of the old run or of this one may be writing: their
        // files are about to go.
        let recorded = match RunManifest::read(self.store.as_ref()) {
            Ok(Some(recorded)) => recorded.shards,
            _ => 1,
        };
        let _others = self.lock_other_shards(&[recorded, self.shard.count])?;
        let mut keys: Vec<String> = self
            .store
            .list("")?
            .into_iter()
            .filter(|k| layout::is_ours(k) && !matches!(Name::parse(k), Some(Name::Lock(_))))
            .collect();
        // `_SUCCESS` first and `_run.json` last: killed halfway, the
        // location still says which run it holds, and `--overwrite` goes on.
        keys.sort_by_key(|k| (k != SUCCESS, k == MANIFEST));
        for key in keys {
            self.store.delete(&key)?;
        }
        self.forget_log();
        Ok(self.manifest.write(self.store.as_ref())?)
    }

    /// Takes the lock of every shard of runs of `counts` shards but this
    /// process's own (which it holds), or names a holder.
    fn lock_other_shards(&self, counts: &[u32]) -> Result<Vec<Box<dyn Lock>>, CheckpointError> {
        let shards = counts
            .iter()
            .flat_map(|&count| (0..count).map(move |index| ShardSpec { index, count }))
            .filter(|&shard| shard != self.shard);
        lock_shards(self.store.as_ref(), shards)
    }

    /// A shard killed while committing, whose run another shard then
    /// committed, left temporary files: its rerun removes them, and only
    /// when no process of the shard holds its lock (one committing now
    /// writes under the same tag). A finished run without leftovers is not
    /// touched at all.
    fn remove_leftovers_of_a_finished_run(&self) -> Result<(), CheckpointError> {
        let layout = OutputLayout::for_attempt(AttemptNames {
            shard: self.shard,
            attempt: 0,
        });
        let keys = self.store.list("")?;
        self.remove_uncounted_files(&keys)?;
        if !keys.iter().any(|k| layout.is_leftover(k)) {
            return Ok(());
        }
        if self.store.holder(&layout.lock())?.is_none() {
            self.remove_leftovers(&layout, &keys)?;
        }
        Ok(())
    }

    /// A finished run's data files that no counted record names (an upload
    /// that landed after its writer was killed and the run finished) are
    /// removed by any rerun; with none, nothing is touched.
    fn remove_uncounted_files(&self, keys: &[String]) -> Result<(), CheckpointError> {
        let has_data = keys
            .iter()
            .any(|k| matches!(Name::parse(k), Some(Name::Data { .. })));
        if !has_data {
            return Ok(());
        }
        let mut counted = Vec::new();
        for index in 0..self.manifest.shards {
            let shard = ShardSpec {
                index,
                count: self.manifest.shards,
            };
            counted.extend(read_log(self.store.as_ref(), shard)?.files);
        }
        Ok(crate::log::remove_uncounted(
            self.store.as_ref(),
            keys,
            &counted,
        )?)
    }

    fn remove_leftovers(&self, layout: &OutputLayout, keys: &[String]) -> Result<(), StoreError> {
        for key in keys.iter().filter(|k| layout.is_leftover(k)) {
            self.store.delete(key)?;
            tracing::info!(file = %self.store.locate(key), "removed a killed attempt's temporary file");
        }
        Ok(())
    }
}

/// How often a run waiting for a lock tries it again.
const LOCK_POLL: Duration = Duration::from_secs(2);

impl Attempt {
    /// Undoes what [`Checkpoint::begin`] wrote for an attempt whose
    /// start-up failed before it predicted anything: its attempt marker,
    /// and then, if nothing else of the run is there (no other attempt,
    /// nothing committed, no shard done), the manifest, so a rerun with the
    /// cause fixed (another model, say) is a new run, not another run's
    /// output to refuse.
    pub fn abandon(&self) -> Result<(), CheckpointError> {
        self.store.delete(&self.layout.attempt_marker())?;
        let shard = self.layout.names().shard;
        let keys = self.store.list("")?;
        let only_manifest = keys.iter().all(|k| {
            k == MANIFEST
                || matches!(Name::parse(k), Some(Name::Lock(_) | Name::Temporary))
                || matches!(Name::parse(k), Some(Name::LogRecord(s, _) | Name::LogCheckpoint(s, _)) if s == shard)
        });
        // Only this attempt's `begin` in the log: nothing was committed.
        if !only_manifest || read_log(self.store.as_ref(), shard)?.next > 2 {
            return Ok(());
        }
        // Another shard starting on this manifest holds its lock: then the
        // manifest is its too. Liveness is asked of the lock, not of the
        // file's existence (a dead process's lock file stays behind).
        let mut held = Vec::new();
        for index in (0..shard.count).filter(|&i| i != shard.index) {
            let key = OutputLayout::lock_of(ShardSpec {
                index,
                count: shard.count,
            });
            match self.store.lock(&key, &Holder(holder_text()), None)? {
                Ok(lock) => held.push((key, lock)),
                Err(_) => return Ok(()),
            }
        }
        self.store.delete(MANIFEST)?;
        self.store.delete(&OutputLayout::log_record(shard, 1))?;
        // Held until the process ends; a process that opened one of these
        // files before its removal finds the name gone and opens again.
        for (key, _lock) in &held {
            self.store.delete(key)?;
        }
        self.store.delete(&self.layout.lock())?;
        Ok(())
    }

    /// Who took this shard's lock over, if this process lost it (it
    /// stalled past its lease).
    pub fn lost_lock(&self) -> Option<Holder> {
        self.lock.lost()
    }
}

/// `lost+found` is the file system's, at the root of a mounted volume.
fn is_ours_or_ignored(key: &str) -> bool {
    layout::is_ours(key) || key.starts_with("lost+found/") || key == "lost+found"
}

fn describe(count: usize, first: &str) -> String {
    match count {
        1 => first.to_string(),
        n => format!("{n} files such as {first}"),
    }
}

/// Takes the lock of each of `shards`, or names the first one held.
pub fn lock_shards(
    store: &dyn Store,
    shards: impl IntoIterator<Item = ShardSpec>,
) -> Result<Vec<Box<dyn Lock>>, CheckpointError> {
    let mut held = Vec::new();
    for shard in shards {
        match store.lock(&OutputLayout::lock_of(shard), &Holder(holder_text()), None)? {
            Ok(lock) => held.push(lock),
            Err(holder) => {
                return Err(CheckpointError::Locked {
                    location: store.location(),
                    shard,
                    holder,
                })
            }
        }
    }
    Ok(held)
}

/// Who holds a shard's lock, for the process refused next.
fn holder_text() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let since = segpredict_core::time::now_rfc3339();
    format!("pid {} on {host}, since {since}", std::process::id())
}

fn started_marker() -> String {
    let started = segpredict_core::time::now_rfc3339();
    serde_json::json!({ "pid": std::process::id(), "started": started }).to_string()
}

/// Each done shard's `done` record and the log it closes.
pub type DoneShards = Vec<(ShardDone, LogState)>;

/// Every shard's `done` record when all `count` shards are done;
/// otherwise the shards that are not.
pub fn shards_done(
    store: &dyn Store,
    count: u32,
) -> Result<Result<DoneShards, Vec<u32>>, CheckpointError> {
    let mut done = Vec::new();
    let mut missing = Vec::new();
    for index in 0..count {
        let mut state = read_log(store, ShardSpec { index, count })?;
        match state.done.take() {
            Some(marker) => done.push((marker, state)),
            None => missing.push(index),
        }
    }
    Ok(match missing.is_empty() {
        true => Ok(done),
        false => Err(missing),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Fingerprint, InputRecord, MANIFEST_FORMAT};
    use crate::store::LocalStore;

    fn manifest(shards: u32) -> RunManifest {
        RunManifest {
            format: MANIFEST_FORMAT,
            segpredict_version: "test".into(),
            fingerprint: Fingerprint {
                model_sha256: "00".into(),
                labels_sha256: "11".into(),
                columns: "c".into(),
                dtype: "f32".into(),
            },
            inputs: vec![InputRecord {
                path: "in.parquet".into(),
                size: 1,
                mtime_ns: 2,
                rows: 3,
                footer_sha256: "ff".repeat(32),
                version: String::new(),
            }],
            shards,
        }
    }

    fn checkpoint(
        dir: &std::path::Path,
        m: RunManifest,
        shard: ShardSpec,
        overwrite: bool,
    ) -> Checkpoint {
        let store = LocalStore::new(dir).tagged(&shard.tag());
        Checkpoint::new(Arc::new(store), m, shard, overwrite)
    }

    fn whole(dir: &std::path::Path) -> Checkpoint {
        checkpoint(dir, manifest(1), ShardSpec::WHOLE, false)
    }

    fn begin(c: &Checkpoint) -> Attempt {
        match c.begin().unwrap() {
            Begun::Predict(attempt) => attempt,
            other => panic!("{other:?}"),
        }
    }

    fn keys(dir: &std::path::Path) -> Vec<String> {
        LocalStore::new(dir).list("").unwrap()
    }

    #[test]
    fn a_fresh_directory_gets_a_manifest_attempt_one_and_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let c = whole(&out);
        assert_eq!(c.verdict().unwrap(), Verdict::New);
        assert!(!out.exists(), "the verdict wrote nothing");
        let attempt = begin(&c);
        assert_eq!(attempt.layout.names().attempt, 1);
        assert_eq!(attempt.done.predicted() + attempt.done.rejected(), 0);
        assert_eq!(
            keys(&out),
            [
                "_progress/attempt-s000of001-a001.json",
                "_progress/lock-s000of001",
                "_progress/log/s000of001/00000000000000000001.json",
                MANIFEST
            ]
        );
        assert_eq!(c.verdict().unwrap(), Verdict::Resumes);
    }

    #[test]
    fn a_second_writer_of_a_shard_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let c = whole(dir.path());
        let first = begin(&c);
        let e = c.begin().unwrap_err();
        assert!(matches!(e, CheckpointError::Locked { .. }), "{e}");
        assert!(!e.is_permanent());
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(first);
        assert_eq!(begin(&c).layout.names().attempt, 2);
    }

    #[test]
    fn a_second_attempt_removes_its_leftovers_and_counts_only_logged_files() {
        use crate::log::{Covered, FileEntry, FileKind};
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let c = whole(out);
        let first = begin(&c);
        let store = LocalStore::new(out);
        let entry = |key: String, kind, rows: [u64; 2]| FileEntry {
            key,
            kind,
            bytes: 0,
            rows: rows[1] - rows[0],
            sha256: String::new(),
            covers: vec![Covered {
                file: 0,
                ranges: rows.to_vec(),
            }],
            batch_totals: None,
        };
        store.put(&first.layout.part(0, 1), b"").unwrap();
        store.put(&first.layout.rejects_part(0, 1), b"").unwrap();
        first
            .log
            .commit(vec![
                entry(first.layout.part(0, 1), FileKind::Part, [0, 1]),
                entry(first.layout.rejects_part(0, 1), FileKind::Rejects, [1, 2]),
            ])
            .unwrap();
        // Landed, never recorded: not counted.
        store.put(&first.layout.part(0, 2), b"").unwrap();
        let leftover = crate::layout::temp_key(&first.layout.part(0, 3), "s000of001-1-0");
        store.put(&leftover, b"half").unwrap();
        drop(first);
        let second = begin(&c);
        assert_eq!(second.layout.names().attempt, 2);
        assert_eq!((second.done.predicted(), second.done.rejected()), (1, 1));
        assert!(!keys(out).contains(&leftover));
    }

    #[test]
    fn a_killed_commits_temporary_files_are_removed_by_its_own_shard_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let shard = |i| ShardSpec::new(i, 3).unwrap();
        let c1 = checkpoint(out, manifest(3), shard(1), false);
        let attempt = begin(&c1);
        // Shard 1 finished and was killed while committing the run.
        let store = LocalStore::new(out);
        let ones = crate::layout::temp_key(SUCCESS, "s001of003-9-0");
        let twos = crate::layout::temp_key(crate::layout::REJECTS, "s002of003-9-0");
        store.put(&ones, b"").unwrap();
        store.put(&twos, b"").unwrap();
        let done = ShardDone {
            shard: shard(1),
            accounting: ShardAccounting::default(),
            report: serde_json::from_value(sample_report()).unwrap(),
        };
        attempt.log.done(done).unwrap();
        drop(attempt);
        assert_eq!(c1.verdict().unwrap(), Verdict::ShardDone);
        assert!(matches!(c1.begin().unwrap(), Begun::ShardDone(_)));
        let left = keys(out);
        assert!(
            !left.contains(&ones),
            "its own commit's leftover stays: {left:?}"
        );
        assert!(
            left.contains(&twos),
            "another shard's temporary file was removed"
        );
        assert_eq!(shards_done(&store, 3).unwrap().unwrap_err(), vec![0, 2]);
    }

    #[test]
    fn commit_by_hand_waits_for_running_shards_and_removes_a_killed_commits_leftovers() {
        use crate::commit::{commit_by_hand, CommitError, CommitState};
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let shard = |i| ShardSpec::new(i, 2).unwrap();
        let c1 = checkpoint(out, manifest(2), shard(1), false);
        let running = begin(&c1);
        let by_hand = LocalStore::new(out).tagged(crate::layout::COMMIT_TAG);
        let leftover = crate::layout::temp_key(SUCCESS, "commit-9-0");
        by_hand.put(&leftover, b"").unwrap();
        match commit_by_hand(&by_hand) {
            Err(CommitError::Checkpoint(CheckpointError::Locked { shard: held, .. })) => {
                assert_eq!(held, shard(1))
            }
            other => panic!("a running shard must refuse the commit: {other:?}"),
        }
        assert!(keys(out).contains(&leftover), "removed while refused");
        drop(running);
        match commit_by_hand(&by_hand).unwrap() {
            CommitState::Waiting(missing) => assert_eq!(missing, vec![0, 1]),
            other => panic!("{other:?}"),
        }
        let left = keys(out);
        assert!(!left.contains(&leftover), "{left:?}");
        assert!(left.iter().all(|k| !k.contains(".inprogress")), "{left:?}");
    }

    #[test]
    fn a_shard_killed_committing_a_run_another_shard_finished_removes_its_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let shard = |i| ShardSpec::new(i, 2).unwrap();
        let c0 = checkpoint(out, manifest(2), shard(0), false);
        drop(begin(&c0));
        let store = LocalStore::new(out);
        // Shard 0 was killed while committing; shard 1 then committed the run.
        let mine = crate::layout::temp_key(crate::layout::REJECTS, "s000of002-9-0");
        let theirs = crate::layout::temp_key("_report.json", "s001of002-9-1");
        store.put(&mine, b"").unwrap();
        store.put(&theirs, b"").unwrap();
        store.put(SUCCESS, b"").unwrap();
        assert!(matches!(c0.begin().unwrap(), Begun::Complete));
        let left = keys(out);
        assert!(!left.contains(&mine), "{left:?}");
        assert!(left.contains(&theirs), "another shard's file was removed");
        // Clean, a finished run is not touched (its lock not even taken).
        let before = std::fs::metadata(out.join("_progress/lock-s000of002"))
            .unwrap()
            .modified()
            .unwrap();
        assert!(matches!(c0.begin().unwrap(), Begun::Complete));
        let after = std::fs::metadata(out.join("_progress/lock-s000of002"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
    }

    /// A report as a shard's marker carries it, minimal.
    fn sample_report() -> serde_json::Value {
        serde_json::json!({
            "input": "in", "output": "out", "device": "cpu", "model_dtype": "f32",
            "input_files": 1, "rows_in": 0, "rows_out": 0, "rows_rejected": 0,
            "rows_resumed": 0, "attempts": 1, "skipped_files": [], "batches": 0,
            "segments": 0, "padded_segments": 0, "oversized_batches": 0,
            "max_segments": 1, "final_max_segments": null, "size_classes": [],
            "cudnn_benchmark": false, "channels_last": false, "allocator_conf": null,
            "oom_events": 0, "oom_rejected_rows": 0, "wall_s": 0.0, "rows_per_s": 0.0,
            "segments_per_s": 0.0, "busy_s": {}, "strategy": "SegmentBudget",
            "batches_file": "_segpredict/batches.parquet"
        })
    }

    #[test]
    fn another_runs_output_is_refused_naming_the_difference_unless_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let first = begin(&whole(out));
        LocalStore::new(out)
            .put(&first.layout.part(0, 1), b"")
            .unwrap();
        drop(first);
        let mut other = manifest(1);
        other.fingerprint.model_sha256 = "99".into();
        let refused = checkpoint(out, other.clone(), ShardSpec::WHOLE, false);
        let e = refused.begin().unwrap_err();
        assert!(e.is_permanent());
        assert!(e.to_string().contains("model differs"), "{e}");
        let replacing = checkpoint(out, other.clone(), ShardSpec::WHOLE, true);
        assert_eq!(replacing.verdict().unwrap(), Verdict::Replaced);
        drop(begin(&replacing));
        assert!(!keys(out).contains(&"part-a001-00-00001.parquet".to_string()));
        let store = LocalStore::new(out);
        assert_eq!(RunManifest::read(&store).unwrap(), Some(other));
    }

    /// Format 3 kept `_rejects.parquet` and `_batches.parquet` beside the
    /// parts: such an output is refused naming the format, and
    /// `--overwrite` replaces it, those files included.
    #[test]
    fn a_format_3_output_is_refused_naming_the_format_and_overwrite_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        let store = LocalStore::new(out);
        let mut old = serde_json::to_value(manifest(1)).unwrap();
        old["format"] = serde_json::json!(3);
        store.put(MANIFEST, old.to_string().as_bytes()).unwrap();
        for key in ["part-a001-00-00001.parquet", SUCCESS]
            .into_iter()
            .chain(crate::layout::LEGACY_RUN_FILES)
        {
            store.put(key, b"").unwrap();
        }
        let e = whole(out).begin().unwrap_err();
        assert!(e.is_permanent());
        let text = e.to_string();
        assert!(
            text.contains("manifest format differs (was 3, now 4)"),
            "{text}"
        );
        let replacing = checkpoint(out, manifest(1), ShardSpec::WHOLE, true);
        assert_eq!(replacing.verdict().unwrap(), Verdict::Replaced);
        drop(begin(&replacing));
        let left = keys(out);
        assert!(left.iter().all(|k| !k.ends_with(".parquet")), "{left:?}");
        assert_eq!(RunManifest::read(&store).unwrap(), Some(manifest(1)));
    }

    #[test]
    fn files_segpredict_did_not_write_are_refused_and_survive_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        // A Spark dataset: its own part names, `_SUCCESS` and a checksum.
        for name in [
            "part-00000-5f1c.snappy.parquet",
            "_SUCCESS",
            ".part-00000-5f1c.crc",
        ] {
            std::fs::write(out.join(name), b"theirs").unwrap();
        }
        for overwrite in [false, true] {
            let c = checkpoint(out, manifest(1), ShardSpec::WHOLE, overwrite);
            let e = c.verdict().unwrap_err();
            assert!(matches!(e, CheckpointError::Foreign { .. }), "{e}");
            assert!(e.is_permanent());
            assert!(c.begin().is_err());
        }
        let mut left = keys(out);
        left.sort();
        assert_eq!(
            left,
            [
                ".part-00000-5f1c.crc",
                "_SUCCESS",
                "part-00000-5f1c.snappy.parquet"
            ]
        );
    }

    #[test]
    fn our_names_without_a_manifest_are_refused_even_with_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-a001-00-00001.parquet"), b"").unwrap();
        let c = checkpoint(dir.path(), manifest(1), ShardSpec::WHOLE, true);
        let e = c.begin().unwrap_err();
        assert!(matches!(e, CheckpointError::Unmanaged { .. }), "{e}");
        assert_eq!(keys(dir.path()), ["part-a001-00-00001.parquet"]);
    }

    #[test]
    fn a_finished_run_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let c = whole(dir.path());
        drop(begin(&c));
        LocalStore::new(dir.path()).put(SUCCESS, b"").unwrap();
        let before = keys(dir.path());
        assert_eq!(c.verdict().unwrap(), Verdict::Complete);
        assert!(matches!(c.begin().unwrap(), Begun::Complete));
        assert_eq!(keys(dir.path()), before);
    }

    #[test]
    fn an_abandoned_start_leaves_a_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let c = whole(dir.path());
        let attempt = begin(&c);
        attempt.abandon().unwrap();
        drop(attempt);
        assert_eq!(c.verdict().unwrap(), Verdict::New);
        assert!(keys(dir.path()).is_empty(), "{:?}", keys(dir.path()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut other = manifest(1);
        other.fingerprint.model_sha256 = "99".into();
        let fixed = checkpoint(dir.path(), other, ShardSpec::WHOLE, false);
        assert_eq!(fixed.verdict().unwrap(), Verdict::New);
    }
}
