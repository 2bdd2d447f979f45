//! Readers: find the input Parquet files, check their columns once up front,
//! then decode row groups in parallel into [`RowChunk`]s.
//!
//! Each (file, row group) is one unit of work; `threads` reader threads take
//! units from a shared queue, and each decodes its record batches with rayon.
//! A value that cannot be decoded rejects its row (with file, row and reason);
//! a file that cannot be read ends the run, or with `on_bad_file = "skip"`
//! is left out (at planning) or has its rows rejected (mid-run).

#![warn(missing_docs)]

mod bad_unit;
pub mod carry;
mod columns;
mod decode;
mod discover;
pub mod image;
mod overlap;
mod panics;
mod plan;
mod prefetch;
mod remote;
mod survey;
mod unit;
mod watched;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::reader::ChunkReader;
use serde::Deserialize;

pub use columns::ColumnMapping;
pub use decode::{DecodeCost, DecodeError};
pub use overlap::check_output_outside_input;
pub use panics::install_hook as catch_decoder_panics;
pub use plan::{ReadPlan, Unit, UnitQueue};
pub use survey::{
    column_roles, segment_counts, survey_files, survey_segments, ColumnRole, FileSurvey,
    SegmentCounts, SegmentsSurvey,
};

use remote::{FetchedBytes, RemoteError};

use segpredict_core::exit::{content_or_io, Classify, Failure};
use segpredict_core::message::{IdKind, ReaderStats, RowChunk};

/// `[readers]`: where the input is and how to decode it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReaderConfig {
    /// A Parquet file, a directory (read recursively: Hive partitions'
    /// `key=value` folders become columns `[writers] carry` can name), or
    /// a glob such as `data/2026-12-*/part-*.parquet`. Required.
    pub path: PathBuf,
    /// Reader threads; 0 picks half the cores (at least 1, at most 8). Default 0.
    /// More threads decode more row groups at once, each holding one
    /// record batch in memory.
    #[serde(default)]
    pub threads: usize,
    /// Threads that turn record batches into rows, one pool shared by the
    /// reader threads; 0 picks a quarter of the cores (1 to 8). Default 0.
    /// Decoding on every core starves the model worker of the CPU it needs
    /// to keep the GPU busy.
    #[serde(default)]
    pub decode_threads: usize,
    /// Rows per decoded record batch. Default 1024. Larger batches cost
    /// memory per reader thread and make backpressure coarser.
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// How Parquet columns map to the model's inputs.
    pub columns: ColumnMapping,
    /// An input file that cannot be read (not Parquet, truncated, columns
    /// that do not fit): `fail` (default) ends the run before any row is
    /// predicted, naming the file; `skip` leaves it out, names it and why
    /// in the report, and predicts the other files. A row group that fails
    /// to decode mid-run (a corrupt page) ends the run under `fail`, naming
    /// file and row group; under `skip` its rows not yet predicted become
    /// `bad_row_group` rejects and the run goes on.
    #[serde(default)]
    pub on_bad_file: OnBadFile,
    /// Row groups fetched at once ahead of the reader threads when the input
    /// is in object storage (`s3://`, `gs://`, `az://`). Default 16: what
    /// hid 50 ms a request in benches/cpu/results/s3-concurrency.md (8 did
    /// not, 32 added nothing); each holds one row group's compressed bytes.
    #[serde(default = "default_fetch_concurrency")]
    pub fetch_concurrency: usize,
    /// `[writers] carry`, copied here when the pipeline is loaded (no
    /// `[readers]` key): the plan resolves it against the input's columns
    /// and partition keys, and the readers read and encode those columns.
    #[serde(skip)]
    pub carry: segpredict_core::carry::Carry,
    /// The output's own column names, which no carried column may take.
    #[serde(skip)]
    pub reserved: Vec<String>,
}

fn default_fetch_concurrency() -> usize {
    16
}

/// What to do with an input file that cannot be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadFile {
    /// End the run, naming the file (before any row is predicted when
    /// found at planning).
    #[default]
    Fail,
    /// Leave the file out (or reject a bad row group's rows) and go on;
    /// the report names each file and why.
    Skip,
}

fn default_batch_rows() -> usize {
    1024
}

/// Why the input cannot be read: a missing or unreadable file, columns
/// that do not fit the pipeline, a bad `[readers]` setting, or a file that
/// changed mid-run. Each names the file (and column or row group).
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// `[readers] path` names nothing.
    #[error("input {path} does not exist")]
    Missing {
        /// The input path as configured.
        path: PathBuf,
    },
    /// The directory or glob holds no Parquet file.
    #[error("no Parquet files match {pattern}")]
    NoMatch {
        /// The directory or glob searched.
        pattern: String,
    },
    /// The glob does not parse.
    #[error("bad input pattern {pattern}")]
    BadPattern {
        /// The glob as configured.
        pattern: String,
        /// glob's complaint, with the position.
        #[source]
        source: glob::PatternError,
    },
    /// The file system failed on a local input; a retry may pass.
    #[error("cannot read {path}")]
    Io {
        /// The file or directory being read.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file's footer or metadata does not parse as Parquet.
    #[error("{path}: not a readable Parquet file")]
    NotParquet {
        /// The input file.
        path: PathBuf,
        /// The Parquet reader's error; an I/O failure inside it is
        /// retryable, bad content is not.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A column the pipeline maps is missing or of a type that does not
    /// fit its role.
    #[error("{path}: column `{column}`: {message}")]
    Column {
        /// The input file whose schema was checked.
        path: PathBuf,
        /// The column's name in the file.
        column: String,
        /// What is wrong with it.
        message: String,
    },
    /// The id column's type differs between files: the output's id column
    /// has one type.
    #[error("{path}: id column `{column}` is {found} here but {expected} in {first}")]
    IdKindMismatch {
        /// The file whose id type differs.
        path: PathBuf,
        /// The id column's name.
        column: String,
        /// The id type in `path`.
        found: IdKind,
        /// The id type in the first file, which the output keeps.
        expected: IdKind,
        /// The first file.
        first: PathBuf,
    },
    /// `[writers] carry` does not fit the input (checked on the first
    /// file): never a file left out under `on_bad_file = "skip"`.
    #[error("{path}: column `{column}`: {message}")]
    Carry {
        /// The first input file, against which carry was resolved.
        path: PathBuf,
        /// The carried column named.
        column: String,
        /// What is wrong with it (missing, or an output column's name).
        message: String,
    },
    /// Arrow cannot build a row format for the carried columns' types.
    #[error("{path}: the row format of the carried columns")]
    CarryType {
        /// The first input file.
        path: PathBuf,
        /// Arrow's error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A row group failed to read or decode mid-run; under
    /// `on_bad_file = "skip"` bad content becomes rejects instead.
    #[error("{path}, row group {row_group}")]
    Decode {
        /// The input file.
        path: PathBuf,
        /// The row group's index in the file.
        row_group: usize,
        /// What failed, classed as content or I/O.
        #[source]
        source: DecodeError,
    },
    /// The decode thread pool could not start (threads exhausted).
    #[error("starting the decode threads")]
    DecodePool(#[source] rayon::ThreadPoolBuildError),
    /// The output would be written into the input (or the input into the
    /// output): the next run would read its own output.
    #[error("the output directory {output} {how} the input {input}: write the output elsewhere")]
    OutputOverlapsInput {
        /// The output location.
        output: PathBuf,
        /// The input location.
        input: PathBuf,
        /// `is`, `lies inside` or `contains`.
        how: &'static str,
    },
    /// A `[readers]` setting out of range; holds what is wrong.
    #[error("invalid [readers] section: {0}")]
    Config(String),
    /// The object store failed listing or reading the input.
    #[error("input {location}")]
    Storage {
        /// The input URL or object.
        location: String,
        /// The store's error, which carries its own class.
        #[source]
        source: Box<segpredict_storage::StorageError>,
    },
    /// The file's size, modification time, footer or version differs from
    /// the plan's: it was rewritten during the run (or between attempts).
    #[error(
        "input {path} changed while the run read it ({how}); nothing of the new version is used"
    )]
    Changed {
        /// The input file.
        path: PathBuf,
        /// What differs, for the message.
        how: String,
    },
}

impl ReaderError {
    /// Whether the error is the file's own content (a corrupt page, a
    /// footer that no longer parses), which `on_bad_file = "skip"` turns
    /// into rejects, rather than the file system's (which a retry may fix).
    pub fn is_bad_data(&self) -> bool {
        matches!(
            self,
            ReaderError::Decode { .. }
                | ReaderError::NotParquet { .. }
                | ReaderError::Changed { .. }
        ) && self.is_permanent()
    }
}

impl Classify for ReaderError {
    /// Whether a rerun meets the same error: everything but the file
    /// system's and the network's failures (an input that cannot be read
    /// now, a decode pool that could not start).
    fn failure(&self) -> Failure {
        match self {
            ReaderError::Io { .. } | ReaderError::DecodePool(_) => Failure::Retryable,
            ReaderError::Storage { source, .. } => source.failure(),
            ReaderError::NotParquet { source, .. } => content_or_io(source),
            ReaderError::Decode { source, .. } => source.failure(),
            ReaderError::Missing { .. }
            | ReaderError::NoMatch { .. }
            | ReaderError::BadPattern { .. }
            | ReaderError::Column { .. }
            | ReaderError::Carry { .. }
            | ReaderError::CarryType { .. }
            | ReaderError::IdKindMismatch { .. }
            | ReaderError::OutputOverlapsInput { .. }
            | ReaderError::Changed { .. }
            | ReaderError::Config(_) => Failure::Permanent,
        }
    }
}

impl ReaderConfig {
    /// Checks the settings and column mapping before any file is opened,
    /// so a bad pipeline fails at once.
    pub fn validate(&self) -> Result<(), ReaderError> {
        if self.batch_rows == 0 {
            return Err(ReaderError::Config("batch_rows must be at least 1".into()));
        }
        self.columns.validate()
    }

    /// Reader threads to start: `threads`, or for 0 half the cores (1 to
    /// 8).
    pub fn effective_threads(&self) -> usize {
        match self.threads {
            // Half the cores: the model's threads (libtorch's on CPU, the
            // worker on a GPU) need the rest.
            0 => (num_cpus::get() / 2).clamp(1, 8),
            n => n,
        }
    }

    /// Decode pool threads: `decode_threads`, or for 0 a quarter of the
    /// cores (1 to 8).
    pub fn effective_decode_threads(&self) -> usize {
        match self.decode_threads {
            0 => (num_cpus::get() / 4).clamp(1, 8),
            n => n,
        }
    }

    /// The pool that decodes rows; its threads run at the feeders' lower
    /// priority.
    pub fn decode_pool(&self) -> Result<rayon::ThreadPool, ReaderError> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(self.effective_decode_threads())
            .thread_name(|i| format!("decode-{i}"))
            .start_handler(|_| segpredict_core::cpu::lower_this_thread())
            .build()
            .map_err(ReaderError::DecodePool)
    }
}

/// Hex SHA-256 of `bytes`: a footer's hash, the same for a local file and
/// an object.
pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One reader thread: takes units until the queue is empty, the run is
/// cancelled, or the downstream stage has gone.
pub fn run_reader(
    config: &ReaderConfig,
    plan: &ReadPlan,
    decode_pool: &rayon::ThreadPool,
    units: &UnitQueue,
    out: Sender<RowChunk>,
    cancel: &AtomicBool,
) -> Result<ReaderStats, ReaderError> {
    segpredict_core::cpu::lower_this_thread();
    let reading = Reading {
        config,
        plan,
        decode_pool,
        out: &out,
        cancel,
    };
    let mut stats = ReaderStats::default();
    while let Some((unit, fetched)) = units.take() {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        if !reading.read_unit(unit, fetched, &mut stats)? {
            break;
        }
    }
    Ok(stats)
}

/// The segment bytes of the input's first rows, in file order, until
/// `n_segments` segments' worth (less when the input has fewer): `segpredict
/// speed --input` times the model on real data, as the run will see it,
/// instead of a byte pattern. Rows the decoder rejects are left out.
pub fn leading_segments(config: &ReaderConfig, n_segments: usize) -> Result<Vec<u8>, ReaderError> {
    let plan = config.plan()?;
    let pool = config.decode_pool()?;
    let units = UnitQueue::new(&plan);
    let want = n_segments.saturating_mul(config.columns.segments.segment_bytes());
    let cancel = AtomicBool::new(false);
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::scope(|scope| {
        // One reader, so the rows come in file order.
        let reader = scope.spawn(|| run_reader(config, &plan, &pool, &units, tx, &cancel));
        let mut bytes = Vec::with_capacity(want);
        for chunk in rx.iter() {
            chunk
                .rows
                .iter()
                .for_each(|row| bytes.extend_from_slice(&row.segments));
            if bytes.len() >= want {
                break;
            }
        }
        // Ends the reader: its next send fails.
        cancel.store(true, Ordering::Relaxed);
        drop(rx);
        let read = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // An error past what was wanted (the reader a chunk ahead) costs nothing.
        match read {
            Err(error) if bytes.len() < want => Err(error),
            _ => {
                bytes.truncate(want);
                Ok(bytes)
            }
        }
    })
}

/// What one reader thread reads with and sends to.
struct Reading<'a> {
    config: &'a ReaderConfig,
    plan: &'a ReadPlan,
    decode_pool: &'a rayon::ThreadPool,
    out: &'a Sender<RowChunk>,
    cancel: &'a AtomicBool,
}

impl Reading<'_> {
    /// Reads one unit; under `on_bad_file = "skip"`, a unit that stops
    /// decoding part way (or whose file changed) has its rows not yet sent
    /// rejected instead. Returns false when the downstream stage has gone
    /// (the run is ending).
    fn read_unit(
        &self,
        unit: Unit,
        fetched: Option<Result<FetchedBytes, RemoteError>>,
        stats: &mut ReaderStats,
    ) -> Result<bool, ReaderError> {
        let mut next_row = unit.first_row;
        let decoded = match fetched {
            None => self.read_local(unit, &mut next_row, stats),
            Some(fetched) => self.read_fetched(unit, fetched, &mut next_row, stats),
        };
        match decoded {
            Err(error) if self.config.on_bad_file == OnBadFile::Skip && error.is_bad_data() => {
                let rejects = bad_unit::BadUnit::new(unit, next_row, &error);
                Ok(rejects.send(
                    self.plan,
                    self.config.batch_rows,
                    self.out,
                    self.cancel,
                    stats,
                ))
            }
            read => read,
        }
    }

    /// A local file's unit, decoded with the footer the plan read, from the
    /// file checked to be the one the plan recorded (size, times, inode)
    /// when opened and again before each chunk of rows is sent.
    fn read_local(
        &self,
        unit: Unit,
        next_row: &mut u64,
        stats: &mut ReaderStats,
    ) -> Result<bool, ReaderError> {
        let (file, footer) = self.plan.source(unit.file_idx)?;
        let (builder, opened) = watched::open_local(file, footer)?;
        self.decode_unit(unit, &file.path, builder, next_row, stats, &|| {
            opened.check()
        })
        .map_err(|e| opened.explain(e))
    }

    /// An object's unit from its fetched bytes. Bytes that do not decode
    /// are fetched again once (pinned to the object recorded, so the same
    /// object): damage in transit is ridden out and counted; the object's
    /// own damage fails again, as it should.
    fn read_fetched(
        &self,
        unit: Unit,
        fetched: Result<FetchedBytes, RemoteError>,
        next_row: &mut u64,
        stats: &mut ReaderStats,
    ) -> Result<bool, ReaderError> {
        let (file, _) = self.plan.source(unit.file_idx)?;
        let path = &file.path;
        let first = self
            .fetched_builder(unit, path, fetched)
            .and_then(|builder| self.decode_unit(unit, path, builder, next_row, stats, &|| Ok(())));
        let error = match first {
            Err(error) if error.is_bad_data() && !matches!(error, ReaderError::Changed { .. }) => {
                error
            }
            done => return done,
        };
        let remote = self
            .plan
            .remote(unit.file_idx)
            .ok_or_else(|| ReaderError::Config("fetched bytes of a local file".into()))?;
        tracing::warn!(path = %path.display(), row_group = unit.row_group, error = %bad_unit::one_line(&error), "a fetched range did not decode; fetching it again");
        let again =
            self.fetched_builder(unit, path, remote::fetch_blocking(remote, unit.row_group))?;
        let decoded = self.decode_unit(unit, path, again, next_row, stats, &|| Ok(()))?;
        segpredict_storage::count_refetched_range();
        tracing::info!(path = %path.display(), row_group = unit.row_group, "the range fetched again decoded");
        Ok(decoded)
    }

    /// A reader over an object's row group from its fetched bytes and the
    /// footer read at planning.
    fn fetched_builder(
        &self,
        unit: Unit,
        path: &std::path::Path,
        fetched: Result<FetchedBytes, RemoteError>,
    ) -> Result<ParquetRecordBatchReaderBuilder<FetchedBytes>, ReaderError> {
        let bytes = fetched.map_err(|e| match e {
            RemoteError::Parquet(e) => ReaderError::Decode {
                path: path.to_path_buf(),
                row_group: unit.row_group,
                source: DecodeError::Parquet(e),
            },
            e => plan::remote_error(path, e),
        })?;
        let remote = self
            .plan
            .remote(unit.file_idx)
            .ok_or_else(|| ReaderError::Config("fetched bytes of a local file".into()))?;
        Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(
            bytes,
            remote.metadata.clone(),
        ))
    }

    /// Decodes and sends one unit's rows from `next_row` (the first not yet
    /// sent: rows before it are skipped unread), leaving it past the rows
    /// sent; `unchanged` is asked before each chunk is sent.
    fn decode_unit<T: ChunkReader + 'static>(
        &self,
        unit: Unit,
        path: &std::path::Path,
        builder: ParquetRecordBatchReaderBuilder<T>,
        next_row: &mut u64,
        stats: &mut ReaderStats,
        unchanged: &dyn Fn() -> Result<(), ReaderError>,
    ) -> Result<bool, ReaderError> {
        let decode_error = |source: DecodeError| ReaderError::Decode {
            path: path.to_path_buf(),
            row_group: unit.row_group,
            source,
        };
        let plan = self.plan;
        let mut reader = self
            .record_reader(unit, builder, *next_row)
            .map_err(|e| decode_error(DecodeError::Parquet(e)))?;
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let started = std::time::Instant::now();
            // A corrupt page can make the parquet crate panic: that is this
            // file's and row group's error, not the program's.
            let next = panics::catch(|| reader.next())
                .map_err(|p| decode_error(DecodeError::Corrupt(p.0)))?;
            let Some(batch) = next else { break };
            let batch = batch.map_err(|e| decode_error(DecodeError::Arrow(e)))?;
            let (mut chunk, cost) = self
                .decode_pool
                .install(|| self.decode_carrying(&batch, unit.file_idx, *next_row))
                .map_err(decode_error)?;
            stats.segments += cost.segments;
            stats.decode_busy += cost.busy;
            if plan.skips_rows() {
                // Rows (and rejects) an earlier attempt already committed.
                chunk.rows.retain(|r| !plan.is_done(&r.meta.origin));
                chunk.rejects.retain(|r| !plan.is_done(&r.origin));
            }
            // What was read is of the version the run recorded.
            unchanged()?;
            *next_row += batch.num_rows() as u64;
            stats.rows += (chunk.rows.len() + chunk.rejects.len()) as u64;
            stats.rejects += chunk.rejects.len() as u64;
            stats.busy += started.elapsed();
            if self.out.send(chunk).is_err() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The batch's rows, each with its carried values when `carry` is set.
    fn decode_carrying(
        &self,
        batch: &arrow::record_batch::RecordBatch,
        file_idx: u32,
        first_row: u64,
    ) -> Result<(RowChunk, DecodeCost), DecodeError> {
        let (mut chunk, cost) =
            decode::decode_batch_costed(batch, &self.config.columns, file_idx, first_row)?;
        if let (Some(carried), Some(file)) =
            (&self.plan.carried, self.plan.sources.get(file_idx as usize))
        {
            carried
                .encode(batch, file, first_row, &mut chunk)
                .map_err(|source| DecodeError::Cast {
                    column: "[writers] carry".into(),
                    source,
                })?;
        }
        Ok((chunk, cost))
    }

    /// The unit's row group, its mapped and carried columns only, from row
    /// `from` on.
    fn record_reader<T: ChunkReader + 'static>(
        &self,
        unit: Unit,
        builder: ParquetRecordBatchReaderBuilder<T>,
        from: u64,
    ) -> parquet::errors::Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
        use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
        let roots = plan::projection(
            &self.config.columns,
            self.plan.carried.as_deref(),
            builder.schema(),
        );
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let mut builder = builder
            .with_projection(mask)
            .with_row_groups(vec![unit.row_group])
            .with_batch_size(self.config.batch_rows);
        let skip = from.saturating_sub(unit.first_row).min(unit.rows);
        if skip > 0 {
            builder = builder.with_row_selection(RowSelection::from(vec![
                RowSelector::skip(skip as usize),
                RowSelector::select((unit.rows - skip) as usize),
            ]));
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use arrow::array::{Array, FixedSizeBinaryArray, ListArray};

    use super::*;

    fn sample() -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("sample_data/digits.parquet")
    }

    fn sample_readers() -> ReaderConfig {
        let text = format!(
            "path = {:?}\n[columns]\nid = \"id\"\n\
             segments = {{ name = \"segments\", dtype = \"u8\", shape = [1, 8, 8] }}\n",
            sample().display().to_string()
        );
        toml::from_str(&text).unwrap()
    }

    /// The sample's segment bytes as Parquet holds them, in file order.
    fn sample_segment_bytes() -> Vec<u8> {
        let file = std::fs::File::open(sample()).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let mut bytes = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let column = batch.column_by_name("segments").unwrap();
            let list = column.as_any().downcast_ref::<ListArray>().unwrap();
            let items = list
                .values()
                .as_any()
                .downcast_ref::<FixedSizeBinaryArray>()
                .unwrap();
            let (first, last) = (list.value_offsets()[0], list.value_offsets()[list.len()]);
            bytes.extend_from_slice(&items.value_data()[first as usize * 64..last as usize * 64]);
        }
        bytes
    }

    #[test]
    fn leading_segments_are_the_inputs_own_in_file_order() {
        let all = sample_segment_bytes();
        let first = leading_segments(&sample_readers(), 100).unwrap();
        assert_eq!(first, all[..100 * 64]);
        // More than the input holds: all of it, and the reader ends.
        let everything = leading_segments(&sample_readers(), all.len()).unwrap();
        assert_eq!(everything, all);
    }
}
