//! The read plan: every input file checked up front, and the frozen list of
//! units of work (one row group of one file each) the reader threads share.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{discover, ReaderConfig, ReaderError};
use crate::message::{IdKind, InputFile, Sources};

/// One row group of one file: the unit of parallel reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Index into the plan's sources.
    pub file_idx: u32,
    pub row_group: usize,
    /// The row group's first row within its file.
    pub first_row: u64,
    pub rows: u64,
}

/// The checked inputs of a run.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    pub sources: Sources,
    pub id_kind: IdKind,
    pub total_rows: u64,
    /// Frozen once planned: readers index into it, never add to it.
    units: Box<[Unit]>,
}

impl ReadPlan {
    pub fn row_groups(&self) -> usize {
        self.units.len()
    }

    /// Every non-empty row group of every file, in file then row-group order.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }
}

/// The row groups the reader threads share: an index into the plan's frozen
/// unit list, so the queue is bounded by construction and every unit is
/// taken exactly once, in plan order.
#[derive(Debug)]
pub struct UnitQueue<'a> {
    units: &'a [Unit],
    next: AtomicUsize,
}

impl<'a> UnitQueue<'a> {
    pub fn new(plan: &'a ReadPlan) -> Self {
        Self {
            units: &plan.units,
            next: AtomicUsize::new(0),
        }
    }

    /// The next unit not yet taken by any thread; `None` when all are.
    pub fn take(&self) -> Option<Unit> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        self.units.get(index).copied()
    }
}

/// Opens a local Parquet file and reads its footer.
pub(super) fn open_builder(
    path: &std::path::Path,
) -> Result<ParquetRecordBatchReaderBuilder<std::fs::File>, ReaderError> {
    let file = std::fs::File::open(path).map_err(|source| ReaderError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| ReaderError::NotParquet {
        path: path.to_path_buf(),
        source,
    })
}

impl ReaderConfig {
    /// Finds the input files and checks every file's columns before any row
    /// is read, so a wrong column fails in seconds, not hours into a night.
    pub fn plan(&self) -> Result<ReadPlan, ReaderError> {
        self.validate()?;
        let mut files = discover::input_files(&self.path)?;
        let mut units = Vec::new();
        let mut id_kind: Option<(IdKind, PathBuf)> = None;
        for (file_idx, file) in files.iter_mut().enumerate() {
            let file_idx = u32::try_from(file_idx)
                .map_err(|_| ReaderError::Config("more than 4 billion input files".into()))?;
            let kind = self.plan_file(file, file_idx, &mut units)?;
            match &id_kind {
                None => id_kind = Some((kind, file.path.clone())),
                Some((expected, first)) if *expected != kind => {
                    return Err(ReaderError::IdKindMismatch {
                        path: file.path.clone(),
                        column: self.columns.id.clone(),
                        found: kind,
                        expected: *expected,
                        first: first.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        Ok(ReadPlan {
            total_rows: files.iter().map(|f| f.rows).sum(),
            sources: Arc::new(files),
            id_kind: id_kind.map_or(IdKind::Str, |(k, _)| k),
            units: units.into_boxed_slice(),
        })
    }

    /// Checks one file's columns, records its rows and row groups, and adds
    /// its non-empty row groups to `units`; returns its id column's kind.
    fn plan_file(
        &self,
        file: &mut InputFile,
        file_idx: u32,
        units: &mut Vec<Unit>,
    ) -> Result<IdKind, ReaderError> {
        let builder = open_builder(&file.path)?;
        let kind = self.columns.check_schema(builder.schema(), &file.path)?;
        let mut first_row = 0u64;
        let row_groups = builder.metadata().row_groups();
        for (row_group, meta) in row_groups.iter().enumerate() {
            let rows = u64::try_from(meta.num_rows()).unwrap_or(0);
            if rows > 0 {
                units.push(Unit {
                    file_idx,
                    row_group,
                    first_row,
                    rows,
                });
            }
            first_row += rows;
        }
        file.rows = first_row;
        file.row_groups = row_groups.len();
        Ok(kind)
    }
}
