//! One writer thread: appends the predictions it receives to its own part
//! file and the rejects to its own rejects file, and commits both (each
//! made visible whole by the store) at least every `commit_every_s` and whenever a
//! part reaches `rows_per_file`. A crash loses at most the window since the
//! last commit; what is committed is the checkpoint a later attempt resumes
//! from. Nothing grows with the length of the run: rejects and the model
//! worker's batch records go to disk as they arrive, committed with the
//! parts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::batch_parts::BatchPart;
use crate::parts::PartWriter;
use crate::reject_parts::RejectPart;
use crate::{OutputSchema, WriterConfig, WriterError};
use segpredict_checkpoint::store::Store;
use segpredict_checkpoint::{FileEntry, FileKind, LogWriter, OutputLayout};
use segpredict_core::message::{
    BatchRecord, Predictions, Reject, RejectKind, WriterMsg, WriterReport,
};

/// Where one writer thread writes, and under which names.
#[derive(Debug, Clone, Copy)]
struct WriterPlace<'a> {
    store: &'a dyn Store,
    layout: &'a OutputLayout,
    log: &'a LogWriter,
    writer_idx: usize,
}

/// The files a writer thread has open, and since when they hold rows not
/// yet committed.
struct Open<'a> {
    place: WriterPlace<'a>,
    config: &'a WriterConfig,
    schema: &'a OutputSchema,
    part: Option<PartWriter>,
    rejects: Option<RejectPart>,
    batches: Option<BatchPart>,
    part_seq: usize,
    rejects_seq: usize,
    batches_seq: usize,
    uncommitted_since: Option<Instant>,
}

impl Open<'_> {
    fn write_predictions(&mut self, p: &Predictions) -> Result<(), WriterError> {
        let part = match self.part.as_mut() {
            Some(part) => part,
            None => {
                self.part_seq += 1;
                let key = self.place.layout.part(self.place.writer_idx, self.part_seq);
                let compression = self.config.compression;
                let part = PartWriter::create(self.place.store, &key, compression, self.schema)?;
                self.part.insert(part)
            }
        };
        part.write(p)?;
        self.uncommitted_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    fn write_rejects(&mut self, rejects: &[Reject]) -> Result<(), WriterError> {
        if rejects.is_empty() {
            return Ok(());
        }
        let file = match self.rejects.as_mut() {
            Some(file) => file,
            None => {
                self.rejects_seq += 1;
                let layout = self.place.layout;
                let key = layout.rejects_part(self.place.writer_idx, self.rejects_seq);
                let file = RejectPart::create(self.place.store, &key, self.schema.id_kind)?;
                self.rejects.insert(file)
            }
        };
        file.write(rejects, &self.schema.sources)?;
        self.uncommitted_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    fn write_batch_record(&mut self, record: BatchRecord) -> Result<(), WriterError> {
        let file = match self.batches.as_mut() {
            Some(file) => file,
            None => {
                self.batches_seq += 1;
                let layout = self.place.layout;
                let key = layout.batches_part(self.place.writer_idx, self.batches_seq);
                let file = BatchPart::create(self.place.store, &key, layout.names())?;
                self.batches.insert(file)
            }
        };
        file.write(record)?;
        self.uncommitted_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Writes one message's rows, rejects or batch record, and counts them.
    fn handle(&mut self, message: WriterMsg, report: &mut WriterReport) -> Result<(), WriterError> {
        match message {
            WriterMsg::Predictions(p) => {
                self.write_predictions(&p)?;
                report.rows += p.rows.len() as u64;
                self.schema.live.add_rows(p.rows.len());
                if self.part_is_full() {
                    self.commit_part(&mut report.files)?;
                }
            }
            WriterMsg::Rejects(rejects) => {
                self.write_rejects(&rejects)?;
                count_rejects(&mut report.reject_kinds, &rejects);
                report.rejects += rejects.len() as u64;
                self.schema.live.add_rejects(rejects.len());
            }
            WriterMsg::Batch(record) => {
                self.schema.live.add_batch(&record);
                self.write_batch_record(record)?;
                report.batch_records += 1;
            }
        }
        Ok(())
    }

    fn part_is_full(&self) -> bool {
        self.part
            .as_ref()
            .is_some_and(|p| p.rows() >= self.config.rows_per_file)
    }

    fn commit_due(&self, every: Duration) -> bool {
        self.uncommitted_since.is_some_and(|t| t.elapsed() >= every)
    }

    /// How long the thread may wait for a message before a commit is due.
    fn patience(&self, every: Duration) -> Duration {
        match self.uncommitted_since {
            Some(t) => every.saturating_sub(t.elapsed()),
            None => Duration::from_secs(3600),
        }
    }

    /// Puts the full part under its name and appends the record that makes
    /// it visible.
    fn commit_part(&mut self, files: &mut Vec<String>) -> Result<(), WriterError> {
        if let Some(part) = self.part.take() {
            self.record(vec![part.finish()?], files)?;
        }
        Ok(())
    }

    /// Puts every open file under its name, then one record naming them
    /// all: they become visible together, or (fenced, killed) not at all.
    fn commit_all(&mut self, files: &mut Vec<String>) -> Result<(), WriterError> {
        let mut entries = Vec::new();
        if let Some(part) = self.part.take() {
            entries.push(part.finish()?);
        }
        if let Some(rejects) = self.rejects.take() {
            entries.push(rejects.commit()?);
        }
        if let Some(batches) = self.batches.take() {
            entries.push(batches.commit()?);
        }
        self.record(entries, files)?;
        self.uncommitted_since = None;
        Ok(())
    }

    fn record(
        &mut self,
        entries: Vec<FileEntry>,
        files: &mut Vec<String>,
    ) -> Result<(), WriterError> {
        if entries.is_empty() {
            return Ok(());
        }
        // The rows' files, not the batch records.
        let rows_files = entries.iter().filter(|e| e.kind != FileKind::Batches);
        let located: Vec<String> = rows_files
            .map(|e| self.place.store.locate(&e.key))
            .collect();
        self.place.log.commit(entries)?;
        files.extend(located);
        Ok(())
    }
}

/// Runs one writer thread until its channel closes or the run is cancelled;
/// either way it commits the rows it has written (they are whole
/// predictions, and a later attempt need not redo them). On an error its
/// open files are removed, never renamed.
#[allow(clippy::too_many_arguments)]
pub fn run_writer(
    store: &dyn Store,
    layout: &OutputLayout,
    log: &LogWriter,
    writer_idx: usize,
    config: &WriterConfig,
    schema: &OutputSchema,
    messages: Receiver<WriterMsg>,
    cancel: &AtomicBool,
) -> Result<WriterReport, WriterError> {
    segpredict_core::cpu::lower_this_thread();
    let place = WriterPlace {
        store,
        layout,
        log,
        writer_idx,
    };
    write_until_done(place, config, schema, messages, cancel).map_err(|error| {
        // A newer attempt began under this one: that is why it failed.
        match (&error, log.superseded()) {
            (WriterError::Log(_), _) | (_, None) => error,
            (_, Some(fenced)) => WriterError::Log(fenced),
        }
    })
}

fn write_until_done(
    place: WriterPlace<'_>,
    config: &WriterConfig,
    schema: &OutputSchema,
    messages: Receiver<WriterMsg>,
    cancel: &AtomicBool,
) -> Result<WriterReport, WriterError> {
    let every = config.commit_every();
    let mut report = WriterReport::default();
    let mut open = Open {
        place,
        config,
        schema,
        part: None,
        rejects: None,
        batches: None,
        part_seq: 0,
        rejects_seq: 0,
        batches_seq: 0,
        uncommitted_since: None,
    };
    loop {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let message = match messages.recv_timeout(open.patience(every)) {
            Ok(message) => Some(message),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let started = Instant::now();
        if let Some(message) = message {
            open.handle(message, &mut report)?;
        }
        if open.commit_due(every) {
            open.commit_all(&mut report.files)?;
        }
        report.busy += started.elapsed();
    }
    open.commit_all(&mut report.files)?;
    Ok(report)
}

fn count_rejects(kinds: &mut HashMap<RejectKind, u64>, rejects: &[Reject]) {
    for reject in rejects {
        *kinds.entry(reject.kind).or_default() += 1;
    }
}
