//! Reading back what earlier attempts committed: the `(source_file,
//! source_row)` of every row in the committed part files (predicted) and
//! reject files (rejected), and nothing else. Each file is fetched whole
//! from the store (one get, as an object store serves it; bounded by
//! `rows_per_file`) and only those two columns are decoded.

use segpredict_core::exit::{content_or_io, Classify, Failure};
use std::collections::HashMap;

use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::checkpoint::Committed;
use crate::store::{Store, StoreError};
use segpredict_core::done::{DoneError, DoneSet, Finished};

/// Rows decoded per record batch while scanning: bounds the scan's memory.
const SCAN_BATCH_ROWS: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("reading committed output {location}")]
    Parquet {
        location: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("reading committed output {location}")]
    Arrow {
        location: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("committed output {location}: {problem}")]
    Content { location: String, problem: String },
    #[error("committed output {location} names source file {source_file}, which is not an input of this run")]
    UnknownSource {
        location: String,
        source_file: String,
    },
    #[error("committed output {location}: {source}")]
    Done {
        location: String,
        #[source]
        source: DoneError,
    },
}

impl Classify for ScanError {
    /// A committed file that does not read as ours stays so; a store that
    /// failed to read it may not.
    fn failure(&self) -> Failure {
        match self {
            ScanError::Store(e) => e.failure(),
            ScanError::Parquet { source, .. } => content_or_io(source),
            ScanError::Arrow { source, .. } => content_or_io(source),
            ScanError::Content { .. }
            | ScanError::UnknownSource { .. }
            | ScanError::Done { .. } => Failure::Permanent,
        }
    }
}

/// The rows the committed files finished, for inputs named as the output
/// names them (`source_file`) with their row counts, in input order.
pub fn scan_committed(
    store: &dyn Store,
    files: &[Committed],
    inputs: &[(String, u64)],
) -> Result<DoneSet, ScanError> {
    let rows: Vec<u64> = inputs.iter().map(|(_, rows)| *rows).collect();
    let index: HashMap<&str, u32> = inputs
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.as_str(), i as u32))
        .collect();
    let mut done = DoneSet::new(&rows);
    for file in files {
        scan_file(store, file, &index, &mut done)?;
    }
    Ok(done)
}

fn scan_file(
    store: &dyn Store,
    file: &Committed,
    index: &HashMap<&str, u32>,
    done: &mut DoneSet,
) -> Result<(), ScanError> {
    let location = store.locate(&file.key);
    let parquet_error = |source| ScanError::Parquet {
        location: location.clone(),
        source,
    };
    let bytes = store.read(&file.key)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(parquet_error)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["source_file", "source_row"]);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(SCAN_BATCH_ROWS)
        .build()
        .map_err(parquet_error)?;
    for batch in reader {
        let batch = batch.map_err(|source| ScanError::Arrow {
            location: location.clone(),
            source,
        })?;
        scan_batch(&batch, &location, file.finished, index, done)?;
    }
    Ok(())
}

/// Marks the rows of one record batch of `(source_file, source_row)`.
fn scan_batch(
    batch: &arrow::record_batch::RecordBatch,
    location: &str,
    finished: Finished,
    index: &HashMap<&str, u32>,
    done: &mut DoneSet,
) -> Result<(), ScanError> {
    let content = |problem: String| ScanError::Content {
        location: location.to_string(),
        problem,
    };
    let arrow_error = |source| ScanError::Arrow {
        location: location.to_string(),
        source,
    };
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| content(format!("no column `{name}`")))
    };
    // Parts store the file name dictionary-encoded, rejects as plain
    // strings: casting both to plain strings keeps one code path.
    let sources = cast(&column("source_file")?, &DataType::Utf8).map_err(arrow_error)?;
    let sources = sources.as_string::<i32>();
    let rows = cast(&column("source_row")?, &DataType::Int64).map_err(arrow_error)?;
    let rows = rows.as_primitive::<Int64Type>();
    let mut last: Option<(&str, u32)> = None;
    for i in 0..batch.num_rows() {
        if sources.is_null(i) || rows.is_null(i) {
            return Err(content(format!("row {i} has no source")));
        }
        let name = sources.value(i);
        let file_idx = match last {
            Some((last_name, idx)) if last_name == name => idx,
            _ => {
                let idx = *index.get(name).ok_or_else(|| ScanError::UnknownSource {
                    location: location.to_string(),
                    source_file: name.to_string(),
                })?;
                last = Some((name, idx));
                idx
            }
        };
        let row = u64::try_from(rows.value(i))
            .map_err(|_| content(format!("negative source_row {}", rows.value(i))))?;
        done.insert(file_idx, row, finished)
            .map_err(|source| ScanError::Done {
                location: location.to_string(),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LocalStore;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray, StringDictionaryBuilder};
    use arrow::datatypes::{Field, Int32Type, Schema};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;

    fn write(store: &LocalStore, key: &str, dictionary: bool, rows: &[(&str, i64)]) {
        let source_type = if dictionary {
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
        } else {
            DataType::Utf8
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("source_file", source_type, false),
            Field::new("source_row", DataType::Int64, false),
        ]));
        let sources: ArrayRef = if dictionary {
            let mut b = StringDictionaryBuilder::<Int32Type>::new();
            for (s, _) in rows {
                b.append_value(s);
            }
            Arc::new(b.finish())
        } else {
            Arc::new(rows.iter().map(|(s, _)| Some(*s)).collect::<StringArray>())
        };
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows.len() as i64)),
                sources,
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(store.root().join(key)).unwrap(),
            schema,
            None,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    #[test]
    fn parts_and_rejects_mark_their_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        write(
            &store,
            "part.parquet",
            true,
            &[("a", 0), ("a", 2), ("b", 1)],
        );
        write(&store, "rejects.parquet", false, &[("a", 1)]);
        let files = [
            Committed {
                key: "part.parquet".into(),
                finished: Finished::Predicted,
            },
            Committed {
                key: "rejects.parquet".into(),
                finished: Finished::Rejected,
            },
        ];
        let done = scan_committed(&store, &files, &[("a".into(), 3), ("b".into(), 2)]).unwrap();
        assert_eq!((done.predicted(), done.rejected()), (3, 1));
        assert!(done.all_done(0, 0, 3));
        assert!(done.contains(1, 1) && !done.contains(1, 0));
    }

    #[test]
    fn a_row_committed_twice_or_from_another_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        write(&store, "part.parquet", true, &[("a", 0), ("a", 0)]);
        let files = [Committed {
            key: "part.parquet".into(),
            finished: Finished::Predicted,
        }];
        let e = scan_committed(&store, &files, &[("a".into(), 3)]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        write(&store, "part.parquet", true, &[("c", 0)]);
        let e = scan_committed(&store, &files, &[("a".into(), 3)]).unwrap_err();
        assert!(matches!(e, ScanError::UnknownSource { .. }), "{e}");
    }
}
