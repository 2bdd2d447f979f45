//! What an input holds, without decoding rows: the files' footers (rows,
//! row groups, schema) and the segments column's list lengths. It backs
//! `segpredict inspect`, which answers "how will tonight's data batch?"
//! before any model is loaded.

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::error::ArrowError;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::reader::ChunkReader;

use super::columns::{id_kind_of, list_child};
use super::{discover, panics, DecodeError, ReaderError};
use crate::image::survey::{add_images, can_hold_images, ImageSurvey};
use crate::plan::read_footer;
use crate::remote::{self, RemoteFile};

/// One input file as its footer describes it.
#[derive(Debug, Clone)]
pub struct FileSurvey {
    /// The file's path or object URL.
    pub path: PathBuf,
    /// Rows, from the footer.
    pub rows: u64,
    /// Row groups, from the footer.
    pub row_groups: usize,
    /// The file's Arrow schema, as the reader would decode it.
    pub schema: SchemaRef,
}

/// Segments per row of one file, in row order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentCounts {
    /// One count per row whose list is not null (empty lists count 0).
    pub counts: Vec<usize>,
    /// Rows whose segments list is null (a run rejects them).
    pub null_rows: u64,
}

/// The Parquet files `path` names (a file, a directory or a glob, as
/// `[readers] path`), each described by its footer alone.
pub fn survey_files(path: &Path) -> Result<Vec<FileSurvey>, ReaderError> {
    discover::input_files(path)?
        .into_iter()
        .map(|mut file| {
            let (metadata, _, _) = read_footer(&mut file)?;
            Ok(FileSurvey {
                rows: u64::try_from(metadata.metadata().file_metadata().num_rows()).unwrap_or(0),
                row_groups: metadata.metadata().num_row_groups(),
                schema: metadata.schema().clone(),
                path: file.path,
            })
        })
        .collect()
}

/// The list length of `column` in every row of the file at `path` (a
/// local file or an object).
///
/// Only that column is projected, so no other column's pages are read;
/// its pages are decompressed (Parquet keeps list lengths inside them), but
/// no row is built.
pub fn segment_counts(path: &Path, column: &str) -> Result<SegmentCounts, ReaderError> {
    Ok(survey_segments(path, column)?.counts)
}

/// What one pass over the segments column of one file tells: the list
/// lengths, and for encoded images each one's header (no pixel decoded).
#[derive(Debug, Clone, Default)]
pub struct SegmentsSurvey {
    /// Each row's segment count, and the rows with none.
    pub counts: SegmentCounts,
    /// Empty unless the column holds encoded images.
    pub images: ImageSurvey,
}

/// [`SegmentsSurvey`] of the file at `path` (a local file or an object,
/// whose segments column alone is fetched, once).
pub fn survey_segments(path: &Path, column: &str) -> Result<SegmentsSurvey, ReaderError> {
    let mut survey = SegmentsSurvey::default();
    scan_column(path, column, |array| {
        add_list_lengths(array.as_ref(), &mut survey.counts);
        match can_hold_images(array.data_type()) {
            true => add_images(array, &mut survey.images),
            false => Ok(()),
        }
    })?;
    Ok(survey)
}

/// Calls `visit` on each batch of `column` alone in the file at `path`, row
/// group by row group; an object's row groups are fetched by byte range.
fn scan_column(
    path: &Path,
    column: &str,
    mut visit: impl FnMut(&ArrayRef) -> Result<(), ArrowError>,
) -> Result<(), ReaderError> {
    let mut file = discover::input_files(path)?
        .into_iter()
        .next()
        .ok_or_else(|| ReaderError::Missing {
            path: path.to_path_buf(),
        })?;
    let (metadata, _, object) = read_footer(&mut file)?;
    let root = segments_root(metadata.schema(), path, column)?;
    // A local file is opened once, its footer (read above) not parsed again.
    let source = match object {
        None => Source::Local(std::fs::File::open(path).map_err(io_error(path))?),
        Some((store, key)) => Source::Object(RemoteFile {
            store,
            path: key,
            size: file.size_bytes,
            pin: crate::remote::Pin::of(&file.version),
            metadata: metadata.clone(),
            roots: vec![root],
        }),
    };
    for row_group in 0..metadata.metadata().num_row_groups() {
        match &source {
            Source::Local(file) => {
                let file = file.try_clone().map_err(io_error(path))?;
                let builder =
                    ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata.clone());
                scan_row_group(builder, root, path, row_group, &mut visit)?
            }
            Source::Object(remote) => {
                let fetched = remote::fetch_blocking(remote, row_group)
                    .map_err(|e| crate::plan::remote_error(path, e))?;
                let builder =
                    ParquetRecordBatchReaderBuilder::new_with_metadata(fetched, metadata.clone());
                scan_row_group(builder, root, path, row_group, &mut visit)?
            }
        }
    }
    Ok(())
}

/// Where a surveyed file's row groups come from.
enum Source {
    Local(std::fs::File),
    Object(RemoteFile),
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> ReaderError + '_ {
    move |source| ReaderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The segments column's index, checked to be a list.
fn segments_root(schema: &Schema, path: &Path, column: &str) -> Result<usize, ReaderError> {
    let root = schema.index_of(column).map_err(|_| ReaderError::Column {
        path: path.to_path_buf(),
        column: column.to_string(),
        message: "no such column in this file".into(),
    })?;
    let data_type = schema.field(root).data_type().clone();
    let one_image_per_row = crate::image::column::type_problem(&data_type).is_none()
        && crate::image::column::one_per_row(&data_type);
    if !one_image_per_row && !matches!(data_type, DataType::List(_) | DataType::LargeList(_)) {
        return Err(ReaderError::Column {
            path: path.to_path_buf(),
            column: column.to_string(),
            message: format!("segments must be a list or large_list column, found {data_type}"),
        });
    }
    Ok(root)
}

fn scan_row_group<T: ChunkReader + 'static>(
    builder: ParquetRecordBatchReaderBuilder<T>,
    root: usize,
    path: &Path,
    row_group: usize,
    visit: &mut impl FnMut(&ArrayRef) -> Result<(), ArrowError>,
) -> Result<(), ReaderError> {
    let decode_error = |source| ReaderError::Decode {
        path: path.to_path_buf(),
        row_group,
        source,
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), [root]);
    let mut reader = builder
        .with_projection(mask)
        .with_row_groups(vec![row_group])
        .with_batch_size(8192)
        .build()
        .map_err(|e| decode_error(DecodeError::Parquet(e)))?;
    // A corrupt page can make the parquet crate panic: as in a run, that
    // is this file's and row group's error.
    while let Some(batch) =
        panics::catch(|| reader.next()).map_err(|p| decode_error(DecodeError::Corrupt(p.0)))?
    {
        let batch = batch.map_err(|e| decode_error(DecodeError::Arrow(e)))?;
        visit(batch.column(0)).map_err(|e| decode_error(DecodeError::Arrow(e)))?;
    }
    Ok(())
}

fn add_list_lengths(array: &dyn Array, counts: &mut SegmentCounts) {
    let lengths: Box<dyn Iterator<Item = Option<usize>>> = match array.data_type() {
        // One encoded image per row: a valid row holds one segment.
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::Struct(_) => {
            Box::new((0..array.len()).map(|i| array.is_valid(i).then_some(1)))
        }
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            Box::new((0..list.len()).map(move |i| {
                list.is_valid(i)
                    .then(|| usize::try_from(list.value_length(i)).unwrap_or(0))
            }))
        }
        _ => {
            let list = array.as_list::<i64>();
            Box::new((0..list.len()).map(move |i| {
                list.is_valid(i)
                    .then(|| usize::try_from(list.value_length(i)).unwrap_or(0))
            }))
        }
    };
    for length in lengths {
        match length {
            Some(n) => counts.counts.push(n),
            None => counts.null_rows += 1,
        }
    }
}

/// What a column could feed, judged from its Arrow type alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnRole {
    /// A list of segments; `elements` per segment when fixed (`dtype`
    /// elements; for binary the byte count, as u8).
    Segments {
        /// The segment dtype the items would be read as (`u8`, `f16`,
        /// `f32`).
        dtype: &'static str,
        /// Elements per segment when the type fixes it; `None` for
        /// variable-length binary.
        elements: Option<usize>,
    },
    /// Encoded images in Hugging Face `datasets`' layout
    /// (`struct<bytes, path>`, or a list of them): segments with `image`.
    Images,
    /// A string: only an id.
    Text,
    /// An integer: the id, or an `int` (or `float`) extra.
    Int,
    /// A float: a `float` extra.
    Float,
    /// A list of integers: a `ragged` extra.
    RaggedInts,
    /// A fixed-size list of numbers: a `vector` extra.
    Vector {
        /// The fixed list length: the extra's `width`.
        width: usize,
    },
    /// Nothing this reader decodes.
    Other,
}

impl ColumnRole {
    /// Whether the column could be the id column (a string or an integer).
    pub fn can_be_id(&self) -> bool {
        matches!(self, ColumnRole::Text | ColumnRole::Int)
    }

    /// What a person may use the column for.
    pub fn describe(&self) -> String {
        match self {
            ColumnRole::Segments {
                dtype,
                elements: Some(n),
            } => format!("segments ({n} {dtype} values each)"),
            ColumnRole::Segments { .. } => {
                "segments (variable-length binary, or encoded images)".into()
            }
            ColumnRole::Images => "segments (encoded images, datasets layout)".into(),
            ColumnRole::Text => "id (or not a model input)".into(),
            ColumnRole::Int => "id, or an int/float extra".into(),
            ColumnRole::Float => "a float extra".into(),
            ColumnRole::RaggedInts => "a ragged extra".into(),
            ColumnRole::Vector { width } => format!("a vector extra (width {width})"),
            ColumnRole::Other => "not a model input".into(),
        }
    }
}

/// Each top-level column of `schema` with what it could feed.
pub fn column_roles(schema: &arrow::datatypes::Schema) -> Vec<(String, ColumnRole)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), role_of(f.data_type())))
        .collect()
}

fn role_of(data_type: &DataType) -> ColumnRole {
    if crate::image::survey::is_datasets_image(data_type) {
        return ColumnRole::Images;
    }
    if let Some(child) = list_child(data_type) {
        return match child {
            DataType::FixedSizeBinary(w) => ColumnRole::Segments {
                dtype: "u8",
                elements: usize::try_from(*w).ok(),
            },
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                ColumnRole::Segments {
                    dtype: "u8",
                    elements: None,
                }
            }
            DataType::FixedSizeList(item, n) => match item.data_type() {
                DataType::UInt8 => segments_of("u8", *n),
                DataType::Float16 => segments_of("f16", *n),
                DataType::Float32 => segments_of("f32", *n),
                _ => ColumnRole::Other,
            },
            t if t.is_integer() => ColumnRole::RaggedInts,
            _ => ColumnRole::Other,
        };
    }
    match data_type {
        DataType::FixedSizeList(item, n) if item.data_type().is_numeric() => ColumnRole::Vector {
            width: usize::try_from(*n).unwrap_or(0),
        },
        t if t.is_integer() => ColumnRole::Int,
        t if t.is_floating() => ColumnRole::Float,
        t if id_kind_of(t).is_some() => ColumnRole::Text,
        _ => ColumnRole::Other,
    }
}

fn segments_of(dtype: &'static str, n: i32) -> ColumnRole {
    ColumnRole::Segments {
        dtype,
        elements: usize::try_from(n).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("sample_data/digits.parquet")
    }

    #[test]
    fn the_sample_footer_gives_rows_row_groups_and_columns() {
        let files = survey_files(&sample()).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].rows, 2000);
        assert_eq!(files[0].row_groups, 4);
        assert!(files[0].schema.index_of("segments").is_ok());
    }

    #[test]
    fn segment_counts_cover_every_row() {
        let counts = segment_counts(&sample(), "segments").unwrap();
        assert_eq!(counts.counts.len() as u64 + counts.null_rows, 2000);
        assert!(counts.counts.iter().all(|&n| n > 0));
    }

    #[test]
    fn the_sample_columns_get_their_roles() {
        let files = survey_files(&sample()).unwrap();
        let roles = column_roles(&files[0].schema);
        let role = |name: &str| roles.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(role("id"), ColumnRole::Text);
        assert_eq!(
            role("segments"),
            ColumnRole::Segments {
                dtype: "u8",
                elements: Some(64)
            }
        );
        assert_eq!(role("tags"), ColumnRole::RaggedInts);
    }

    #[test]
    fn a_column_that_is_not_a_list_is_named() {
        let error = segment_counts(&sample(), "id").unwrap_err().to_string();
        assert!(error.contains("`id`") && error.contains("list"), "{error}");
    }
}
