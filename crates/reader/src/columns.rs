//! `[readers.columns]`: which Parquet column feeds which model input, and
//! the up-front check that every file's columns can be decoded that way.

use std::path::Path;

use arrow::datatypes::{DataType, Schema};
use serde::Deserialize;

use super::image::{self, ImageInput};
use super::ReaderError;
use segpredict_core::message::{ExtraSpec, IdKind, InputSpec, SegmentDtype};

/// Maps Parquet columns to the model's inputs. The model is called as
/// `forward(segments, segment_counts, *extras)`, extras in the order listed.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ColumnMapping {
    /// The row id column (string or integer); copied to the output. Required.
    pub id: String,
    /// The per-row list of segments.
    pub segments: SegmentsColumn,
    /// Further inputs, passed to the model after the segments in this order.
    /// Default: none.
    #[serde(default)]
    pub extras: Vec<ExtraColumn>,
}

/// A list column whose items are segments of one fixed shape, stored as
/// fixed-size binary (or binary) of `shape.product() * dtype` bytes, or as
/// fixed-size lists of `shape.product()` numbers; or, with `image`, encoded
/// images (PNG, JPEG, WebP) decoded and resized to `shape`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SegmentsColumn {
    /// Column name. Required.
    pub name: String,
    /// Element type: `u8`, `f16` or `f32`. Default `u8`.
    #[serde(default = "default_dtype")]
    pub dtype: SegmentDtype,
    /// Shape of one segment as the model takes it, e.g. `[1, 8, 8]`. Required.
    pub shape: Vec<usize>,
    /// Rows with more segments than this are rejected
    /// (`too_many_segments`) before their segments are copied. Default:
    /// no limit. One row of 100,000 segments took 4.3 GiB of host memory
    /// in the model on CPU; a limit keeps one odd row from ending the night.
    #[serde(default)]
    pub max_per_row: Option<usize>,
    /// The segments are encoded images: `shape` is `[channels, height,
    /// width]` and this says how each image becomes it
    /// (`[readers.columns.segments.image]`). The column is then
    /// `list<binary>`, `list<struct<bytes, path>>` (Hugging Face
    /// `datasets`), or `binary` / `struct<bytes, path>` for one image per
    /// row. Default: none (the segments are raw values).
    #[serde(default)]
    pub image: Option<ImageInput>,
}

fn default_dtype() -> SegmentDtype {
    SegmentDtype::U8
}

impl SegmentsColumn {
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn segment_bytes(&self) -> usize {
        self.elements() * self.dtype.size_bytes()
    }
}

/// One extra model input.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtraColumn {
    /// Column name. Required.
    pub name: String,
    /// How the column becomes a model input. Required.
    pub kind: ExtraKind,
    /// For `vector`: the fixed length. Required there, unused elsewhere.
    pub width: Option<usize>,
}

/// How an extra column is passed to the model.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExtraKind {
    /// A list of integers per row; the model gets two int64 tensors: all
    /// values concatenated `[T]` and per-row counts `[R]`. A null list is empty.
    Ragged,
    /// A fixed-length list of numbers per row; the model gets float `[R, width]`.
    Vector,
    /// One number per row; the model gets float `[R]`.
    Float,
    /// One integer per row; the model gets int64 `[R]`.
    Int,
}

impl ColumnMapping {
    /// Checks the mapping on its own (shape, names, widths) before any
    /// file's schema is seen.
    pub fn validate(&self) -> Result<(), ReaderError> {
        if self.segments.shape.is_empty() || self.segments.elements() == 0 {
            return Err(ReaderError::Config(format!(
                "columns.segments.shape {:?} must be non-empty with no zero dimension",
                self.segments.shape
            )));
        }
        if let Some(image) = &self.segments.image {
            image
                .validate(&self.segments.shape, self.segments.dtype)
                .map_err(|why| ReaderError::Config(format!("columns.segments.image: {why}")))?;
        }
        for extra in &self.extras {
            if extra.kind == ExtraKind::Vector && extra.width.unwrap_or(0) == 0 {
                return Err(ReaderError::Config(format!(
                    "extra column `{}` of kind vector needs width >= 1",
                    extra.name
                )));
            }
        }
        Ok(())
    }

    /// The model inputs these columns produce.
    pub fn input_spec(&self) -> InputSpec {
        InputSpec {
            segment_shape: self.segments.shape.clone(),
            segment_dtype: self.segments.dtype,
            extras: self
                .extras
                .iter()
                .map(|e| match e.kind {
                    ExtraKind::Ragged => ExtraSpec::Ragged,
                    ExtraKind::Vector => ExtraSpec::Vector {
                        width: e.width.unwrap_or(0),
                    },
                    ExtraKind::Float => ExtraSpec::Float,
                    ExtraKind::Int => ExtraSpec::Int,
                })
                .collect(),
        }
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.id.as_str())
            .chain(std::iter::once(self.segments.name.as_str()))
            .chain(self.extras.iter().map(|e| e.name.as_str()))
    }

    /// Top-level field indices of the mapped columns, for the projection.
    pub fn root_indices(&self, schema: &Schema) -> Vec<usize> {
        let mut roots: Vec<usize> = self
            .names()
            .filter_map(|n| schema.index_of(n).ok())
            .collect();
        roots.sort_unstable();
        roots.dedup();
        roots
    }

    /// Checks that `schema` (of the file at `path`) has every mapped column
    /// with a type this reader decodes; returns the id column's kind.
    pub fn check_schema(&self, schema: &Schema, path: &Path) -> Result<IdKind, ReaderError> {
        let field_type = |name: &str| -> Result<&DataType, ReaderError> {
            schema
                .field_with_name(name)
                .map(|f| f.data_type())
                .map_err(|_| column_error(path, name, "no such column in this file".into()))
        };
        let id_kind = id_kind_of(field_type(&self.id)?).ok_or_else(|| {
            column_error(
                path,
                &self.id,
                format!(
                    "id must be a string or integer column, found {}",
                    field_type(&self.id)
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
        let segments_type = field_type(&self.segments.name)?;
        if let Some(problem) = segments_type_problem(segments_type, &self.segments) {
            return Err(column_error(path, &self.segments.name, problem));
        }
        for extra in &self.extras {
            if let Some(problem) = extra_type_problem(field_type(&extra.name)?, extra) {
                return Err(column_error(path, &extra.name, problem));
            }
        }
        Ok(id_kind)
    }
}

fn column_error(path: &Path, column: &str, message: String) -> ReaderError {
    ReaderError::Column {
        path: path.to_path_buf(),
        column: column.to_string(),
        message,
    }
}

pub(super) fn id_kind_of(data_type: &DataType) -> Option<IdKind> {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(IdKind::Str),
        DataType::Dictionary(_, value) => id_kind_of(value),
        DataType::UInt64 => Some(IdKind::UInt),
        t if t.is_integer() => Some(IdKind::Int),
        _ => None,
    }
}

/// The child type of a list column, for `list` and `large_list` alike.
pub(super) fn list_child(data_type: &DataType) -> Option<&DataType> {
    match data_type {
        DataType::List(f) | DataType::LargeList(f) => Some(f.data_type()),
        _ => None,
    }
}

/// What is wrong with the segments column's type for its declared shape and
/// dtype, if anything.
fn segments_type_problem(data_type: &DataType, column: &SegmentsColumn) -> Option<String> {
    if column.image.is_some() {
        return image::column::type_problem(data_type);
    }
    let Some(child) = list_child(data_type) else {
        return Some(format!(
            "segments must be a list or large_list column, found {data_type}"
        ));
    };
    let bytes = column.segment_bytes();
    match child {
        DataType::FixedSizeBinary(w) if *w as usize == bytes => None,
        DataType::FixedSizeBinary(w) => Some(format!(
            "segments are fixed_size_binary({w}) but shape {:?} of {:?} needs {bytes} bytes",
            column.shape, column.dtype
        )),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => None,
        DataType::FixedSizeList(item, n) => {
            if *n as usize != column.elements() {
                return Some(format!(
                    "segments are fixed-size lists of {n} but shape {:?} has {} elements",
                    column.shape,
                    column.elements()
                ));
            }
            let want = match column.dtype {
                SegmentDtype::U8 => DataType::UInt8,
                SegmentDtype::F16 => DataType::Float16,
                SegmentDtype::F32 => DataType::Float32,
            };
            (item.data_type() != &want).then(|| {
                format!("segment items are {} but dtype says {want}", item.data_type())
            })
        }
        other => Some(format!(
            "segments must be a list of fixed_size_binary, binary or fixed-size lists, found a list of {other}"
        )),
    }
}

/// What is wrong with an extra column's type for its declared kind, if anything.
fn extra_type_problem(data_type: &DataType, extra: &ExtraColumn) -> Option<String> {
    if let (ExtraKind::Vector, DataType::FixedSizeList(_, n), Some(width)) =
        (extra.kind, data_type, extra.width)
    {
        // Every row would fail the same way: say so once, up front.
        if *n as usize != width {
            return Some(format!(
                "fixed-size lists of {n} but the pipeline declares width {width}"
            ));
        }
    }
    let ok = match extra.kind {
        ExtraKind::Ragged => list_child(data_type).is_some_and(DataType::is_integer),
        ExtraKind::Vector => match data_type {
            DataType::FixedSizeList(item, _) => item.data_type().is_numeric(),
            other => list_child(other).is_some_and(DataType::is_numeric),
        },
        ExtraKind::Float => data_type.is_numeric(),
        ExtraKind::Int => data_type.is_integer(),
    };
    (!ok).then(|| {
        format!(
            "a {:?} input cannot be read from a {data_type} column",
            extra.kind
        )
        .to_lowercase()
    })
}
