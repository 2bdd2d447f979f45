//! Decodes one Arrow record batch into rows. A bad value rejects its row and
//! says why; only a batch whose shape contradicts the checked schema is an
//! error for the whole batch.

use std::ops::Range;

use arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListArray, GenericListArray, OffsetSizeTrait,
};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Float16Type, Float32Type, Float64Type, Int64Type, UInt64Type, UInt8Type,
};
use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use super::columns::{ColumnMapping, ExtraKind, SegmentsColumn};
use super::image::column::{one_per_row, EncodedImages};
use super::image::ImageDecoder;
use segpredict_core::exit::{content_or_io, Classify, Failure};
use segpredict_core::message::{
    ExtraValue, IdKind, Origin, Reject, RejectKind, Row, RowChunk, RowId, RowMeta, SegmentDtype,
};

/// Why a whole record batch could not be decoded (a bad value only rejects
/// its row).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The Parquet reader failed on the row group: bad content, or bytes
    /// that could not be read (retryable).
    #[error(transparent)]
    Parquet(parquet::errors::ParquetError),
    /// Arrow failed on the decoded batch.
    #[error(transparent)]
    Arrow(arrow::error::ArrowError),
    /// A mapped column is not in the decoded batch; holds its name.
    #[error("column `{0}` missing from the decoded batch")]
    MissingColumn(String),
    /// A column could not be cast to the type its role needs.
    #[error("column `{column}`")]
    Cast {
        /// The column's name.
        column: String,
        /// Arrow's cast error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A column that must be a list (segments, a ragged or vector extra)
    /// is not.
    #[error("column `{column}`: expected a list column, found {found}")]
    NotAList {
        /// The column's name.
        column: String,
        /// Its type in this file.
        found: DataType,
    },
    /// The segments list holds items the decoder cannot turn into segment
    /// bytes.
    #[error("column `{column}`: unsupported segment item type {found}")]
    SegmentItems {
        /// The segments column's name.
        column: String,
        /// The list's item type in this file.
        found: DataType,
    },
    /// The `image` settings do not fit the segments' shape and dtype
    /// (checked at start-up, so only a bug reaches this).
    #[error("column `{0}`")]
    Image(String, #[source] crate::image::SettingsError),
    /// The Parquet decoder panicked on this data (a corrupt page).
    #[error("the file is corrupt: the Parquet decoder failed with \"{0}\"")]
    Corrupt(String),
}

impl Classify for DecodeError {
    /// The data's own fault, except bytes that could not be read.
    fn failure(&self) -> Failure {
        match self {
            DecodeError::Parquet(e) => content_or_io(e),
            DecodeError::Arrow(_)
            | DecodeError::MissingColumn(_)
            | DecodeError::Cast { .. }
            | DecodeError::NotAList { .. }
            | DecodeError::SegmentItems { .. }
            | DecodeError::Image(..)
            | DecodeError::Corrupt(_) => Failure::Permanent,
        }
    }
}

fn cast_error(column: &str) -> impl Fn(arrow::error::ArrowError) -> DecodeError + '_ {
    move |source| DecodeError::Cast {
        column: column.to_string(),
        source,
    }
}

/// Decodes `batch`, whose first row is row `first_row` of file `file_idx`.
#[cfg(test)]
pub fn decode_batch(
    batch: &RecordBatch,
    columns: &ColumnMapping,
    file_idx: u32,
    first_row: u64,
) -> Result<RowChunk, DecodeError> {
    decode_batch_costed(batch, columns, file_idx, first_row).map(|(chunk, _)| chunk)
}

/// What decoding a batch cost: its segments, and the CPU time the decode
/// pool's threads spent on its rows (summed over the threads).
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeCost {
    /// Segments of the batch's rows, rejected rows' included.
    pub segments: u64,
    /// Decode-pool CPU time on the batch, summed over threads.
    pub busy: std::time::Duration,
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): what a decode
/// thread spent, not the wall time it took, which at a lower priority also
/// counts the time other threads held its core.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let failed = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0;
    if failed {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The rows of a batch in blocks for the pool: a few per thread, so the
/// threads balance and the clock is read twice a block, not twice a row.
fn blocks(rows: usize) -> Vec<Range<usize>> {
    let block = rows.div_ceil(rayon::current_num_threads() * 4).max(1);
    (0..rows)
        .step_by(block)
        .map(|start| start..(start + block).min(rows))
        .collect()
}

/// [`decode_batch`], with what it cost.
pub fn decode_batch_costed(
    batch: &RecordBatch,
    columns: &ColumnMapping,
    file_idx: u32,
    first_row: u64,
) -> Result<(RowChunk, DecodeCost), DecodeError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| DecodeError::MissingColumn(name.to_string()))
    };
    let ids = IdColumn::new(column(&columns.id)?, &columns.id)?;
    let segments = SegmentsReader::new(column(&columns.segments.name)?, &columns.segments)?;
    let extras = columns
        .extras
        .iter()
        .map(|e| ExtraReader::new(column(&e.name)?, e.kind, e.width.unwrap_or(0), &e.name))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let decoded: Vec<(Vec<Result<Row, Reject>>, DecodeCost)> = blocks(batch.num_rows())
        .into_par_iter()
        .map(|block| {
            let started = thread_cpu_time();
            let mut cost = DecodeCost::default();
            let rows = block
                .map(|i| {
                    cost.segments += segments.len_of(i) as u64;
                    let origin = Origin {
                        file_idx,
                        row_idx: first_row + i as u64,
                    };
                    decode_row(i, origin, &ids, &segments, &extras)
                })
                .collect();
            cost.busy = thread_cpu_time().saturating_sub(started);
            (rows, cost)
        })
        .collect();
    let mut chunk = RowChunk::default();
    let mut cost = DecodeCost::default();
    for (rows, block_cost) in decoded {
        cost.busy += block_cost.busy;
        cost.segments += block_cost.segments;
        for result in rows {
            match result {
                Ok(row) => chunk.rows.push(row),
                Err(reject) => chunk.rejects.push(reject),
            }
        }
    }
    Ok((chunk, cost))
}

fn decode_row(
    i: usize,
    origin: Origin,
    ids: &IdColumn,
    segments: &SegmentsReader,
    extras: &[ExtraReader],
) -> Result<Row, Reject> {
    let id = ids.get(i).ok_or_else(|| Reject {
        id: None,
        origin,
        kind: RejectKind::NullId,
        reason: "the id is null".into(),
    })?;
    let reject = |kind: RejectKind, reason: String| Reject {
        id: Some(id.clone()),
        origin,
        kind,
        reason,
    };
    let (n_segments, bytes) = segments.row(i).map_err(|(k, r)| reject(k, r))?;
    let extras = extras
        .iter()
        .map(|e| e.row(i))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|(k, r)| reject(k, r))?;
    Ok(Row {
        meta: RowMeta {
            id,
            origin,
            carried: Box::default(),
        },
        n_segments,
        segments: bytes.into_boxed_slice(),
        extras,
    })
}

type RowError = (RejectKind, String);

/// The id column, cast once per batch to Utf8, Int64 or (for unsigned
/// 64-bit ids, which may not fit an i64) UInt64.
enum IdColumn {
    Str(arrow::array::StringArray),
    Int(arrow::array::Int64Array),
    UInt(arrow::array::UInt64Array),
}

impl IdColumn {
    fn new(array: &ArrayRef, name: &str) -> Result<Self, DecodeError> {
        let kind = super::columns::id_kind_of(array.data_type());
        let target = match kind {
            Some(IdKind::Str) => DataType::Utf8,
            Some(IdKind::UInt) => DataType::UInt64,
            _ => DataType::Int64,
        };
        let cast = cast(array, &target).map_err(cast_error(name))?;
        Ok(match kind {
            Some(IdKind::Str) => IdColumn::Str(cast.as_string::<i32>().clone()),
            Some(IdKind::UInt) => IdColumn::UInt(cast.as_primitive::<UInt64Type>().clone()),
            _ => IdColumn::Int(cast.as_primitive::<Int64Type>().clone()),
        })
    }

    fn get(&self, i: usize) -> Option<RowId> {
        match self {
            IdColumn::Str(a) => a.is_valid(i).then(|| RowId::Str(a.value(i).to_string())),
            IdColumn::Int(a) => a.is_valid(i).then(|| RowId::Int(a.value(i))),
            IdColumn::UInt(a) => a.is_valid(i).then(|| RowId::UInt(a.value(i))),
        }
    }
}

/// Row ranges of a `list` or `large_list` array.
enum Lists<'a> {
    Small(&'a GenericListArray<i32>),
    Large(&'a GenericListArray<i64>),
}

impl<'a> Lists<'a> {
    fn new(array: &'a ArrayRef, name: &str) -> Result<Self, DecodeError> {
        match array.data_type() {
            DataType::List(_) => Ok(Lists::Small(array.as_list::<i32>())),
            DataType::LargeList(_) => Ok(Lists::Large(array.as_list::<i64>())),
            other => Err(DecodeError::NotAList {
                column: name.to_string(),
                found: other.clone(),
            }),
        }
    }

    fn values(&self) -> &'a ArrayRef {
        match self {
            Lists::Small(a) => a.values(),
            Lists::Large(a) => a.values(),
        }
    }

    /// The row's item range in `values()`, or None for a null list.
    fn range(&self, i: usize) -> Option<Range<usize>> {
        fn range_of<O: OffsetSizeTrait>(a: &GenericListArray<O>, i: usize) -> Option<Range<usize>> {
            if a.is_null(i) {
                return None;
            }
            let offsets = a.value_offsets();
            Some(offsets[i].as_usize()..offsets[i + 1].as_usize())
        }
        match self {
            Lists::Small(a) => range_of(a, i),
            Lists::Large(a) => range_of(a, i),
        }
    }
}

struct SegmentsReader<'a> {
    /// None: one image per row (the column is not a list).
    lists: Option<Lists<'a>>,
    items: SegmentItems<'a>,
    segment_bytes: usize,
    elements: usize,
    max_per_row: usize,
}

/// The segment items of a batch, in each of the layouts writers produce.
enum SegmentItems<'a> {
    FixedBinary(&'a arrow::array::FixedSizeBinaryArray),
    Binary(ArrayRef),
    FixedList(&'a FixedSizeListArray, SegmentDtype),
    /// Encoded images, decoded and resized by the decoder.
    /// Boxed: much larger than the other variants.
    Images(Box<(EncodedImages, ImageDecoder)>),
}

impl<'a> SegmentsReader<'a> {
    fn new(array: &'a ArrayRef, column: &SegmentsColumn) -> Result<Self, DecodeError> {
        let (lists, items) = match &column.image {
            Some(image) => Self::images(array, column, image)?,
            None => {
                let lists = Lists::new(array, &column.name)?;
                let items = Self::raw_items(lists.values(), column)?;
                (Some(lists), items)
            }
        };
        Ok(Self {
            lists,
            items,
            segment_bytes: column.segment_bytes(),
            elements: column.elements(),
            max_per_row: column.max_per_row.unwrap_or(usize::MAX),
        })
    }

    fn images(
        array: &'a ArrayRef,
        column: &SegmentsColumn,
        image: &crate::image::ImageInput,
    ) -> Result<(Option<Lists<'a>>, SegmentItems<'a>), DecodeError> {
        let decoder = ImageDecoder::new(image, &column.shape, column.dtype)
            .map_err(|why| DecodeError::Image(column.name.clone(), why))?;
        let lists = (!one_per_row(array.data_type()))
            .then(|| Lists::new(array, &column.name))
            .transpose()?;
        let values = lists.as_ref().map_or(array, |l| l.values());
        let images = EncodedImages::new(values).map_err(cast_error(&column.name))?;
        Ok((lists, SegmentItems::Images(Box::new((images, decoder)))))
    }

    fn raw_items(
        values: &'a ArrayRef,
        column: &SegmentsColumn,
    ) -> Result<SegmentItems<'a>, DecodeError> {
        Ok(match values.data_type() {
            DataType::FixedSizeBinary(_) => {
                SegmentItems::FixedBinary(values.as_fixed_size_binary())
            }
            // Binary and view layouts are cast once per batch to one layout.
            DataType::Binary | DataType::BinaryView => SegmentItems::Binary(
                cast(values, &DataType::LargeBinary).map_err(cast_error(&column.name))?,
            ),
            DataType::LargeBinary => SegmentItems::Binary(values.clone()),
            DataType::FixedSizeList(_, _) => {
                SegmentItems::FixedList(values.as_fixed_size_list(), column.dtype)
            }
            other => {
                return Err(DecodeError::SegmentItems {
                    column: column.name.clone(),
                    found: other.clone(),
                })
            }
        })
    }

    /// The row's items, or None for a null list.
    fn range(&self, i: usize) -> Option<Range<usize>> {
        match &self.lists {
            Some(lists) => lists.range(i),
            None => Some(i..i + 1),
        }
    }

    /// How many segments the row holds (0 for a null list).
    fn len_of(&self, i: usize) -> usize {
        self.range(i).map_or(0, |r| r.len())
    }

    /// The row's segment count and its segments' bytes, concatenated.
    fn row(&self, i: usize) -> Result<(usize, Vec<u8>), RowError> {
        let range = self.range(i).ok_or((
            RejectKind::NullSegments,
            "the segments list is null".to_string(),
        ))?;
        if range.is_empty() {
            return Err((RejectKind::NoSegments, "the row has no segments".into()));
        }
        let n_segments = range.len();
        if n_segments > self.max_per_row {
            return Err((
                RejectKind::TooManySegments,
                format!(
                    "the row has {n_segments} segments, more than max_per_row = {}",
                    self.max_per_row
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(n_segments * self.segment_bytes);
        for (k, j) in range.enumerate() {
            self.append_segment(j, &mut bytes)
                .map_err(|(kind, why)| (kind, format!("segment {k}: {why}")))?;
        }
        Ok((n_segments, bytes))
    }

    fn append_segment(&self, j: usize, out: &mut Vec<u8>) -> Result<(), RowError> {
        match &self.items {
            SegmentItems::FixedBinary(a) => {
                if a.is_null(j) {
                    return Err((RejectKind::NullSegment, "is null".into()));
                }
                out.extend_from_slice(a.value(j));
            }
            SegmentItems::Binary(a) => {
                let a = a.as_binary::<i64>();
                if a.is_null(j) {
                    return Err((RejectKind::NullSegment, "is null".into()));
                }
                let value = a.value(j);
                if value.len() != self.segment_bytes {
                    return Err((
                        RejectKind::BadSegmentSize,
                        format!("has {} bytes, expected {}", value.len(), self.segment_bytes),
                    ));
                }
                out.extend_from_slice(value);
            }
            SegmentItems::Images(images) => {
                let (images, decoder) = &**images;
                let encoded = images.get(j)?;
                decoder
                    .append(encoded, out)
                    .map_err(|why| (RejectKind::BadImage, format!("{why}")))?;
            }
            SegmentItems::FixedList(a, dtype) => {
                if a.is_null(j) {
                    return Err((RejectKind::NullSegment, "is null".into()));
                }
                let start = a.value_offset_at(j);
                append_numbers(a.values(), start..start + self.elements, *dtype, out)?;
            }
        }
        Ok(())
    }
}

fn append_numbers(
    values: &ArrayRef,
    range: Range<usize>,
    dtype: SegmentDtype,
    out: &mut Vec<u8>,
) -> Result<(), RowError> {
    if values.null_count() > 0 && range.clone().any(|k| values.is_null(k)) {
        return Err((RejectKind::NullSegment, "holds a null value".into()));
    }
    match dtype {
        SegmentDtype::U8 => {
            out.extend_from_slice(&values.as_primitive::<UInt8Type>().values()[range])
        }
        SegmentDtype::F16 => {
            for v in &values.as_primitive::<Float16Type>().values()[range] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        SegmentDtype::F32 => {
            for v in &values.as_primitive::<Float32Type>().values()[range] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    Ok(())
}

/// One extra column, its values cast once per batch to int64 or float.
struct ExtraReader<'a> {
    kind: ExtraKind,
    width: usize,
    name: &'a str,
    lists: Option<Lists<'a>>,
    fixed: Option<&'a FixedSizeListArray>,
    values: ArrayRef,
}

impl<'a> ExtraReader<'a> {
    fn new(
        array: &'a ArrayRef,
        kind: ExtraKind,
        width: usize,
        name: &'a str,
    ) -> Result<Self, DecodeError> {
        let err = cast_error(name);
        let (lists, fixed, values) = match kind {
            ExtraKind::Ragged => {
                let lists = Lists::new(array, name)?;
                let values = cast(lists.values(), &DataType::Int64).map_err(err)?;
                (Some(lists), None, values)
            }
            ExtraKind::Vector => match array.data_type() {
                DataType::FixedSizeList(_, _) => {
                    let fixed = array.as_fixed_size_list();
                    let values = cast(fixed.values(), &DataType::Float64).map_err(err)?;
                    (None, Some(fixed), values)
                }
                _ => {
                    let lists = Lists::new(array, name)?;
                    let values = cast(lists.values(), &DataType::Float64).map_err(err)?;
                    (Some(lists), None, values)
                }
            },
            ExtraKind::Float => (None, None, cast(array, &DataType::Float64).map_err(err)?),
            ExtraKind::Int => (None, None, cast(array, &DataType::Int64).map_err(err)?),
        };
        Ok(Self {
            kind,
            width,
            name,
            lists,
            fixed,
            values,
        })
    }

    fn row(&self, i: usize) -> Result<ExtraValue, RowError> {
        let name = self.name;
        match self.kind {
            ExtraKind::Ragged => {
                let range = self.lists.as_ref().and_then(|l| l.range(i)).unwrap_or(0..0);
                self.no_nulls(range.clone())?;
                Ok(ExtraValue::Ragged(
                    self.values.as_primitive::<Int64Type>().values()[range].to_vec(),
                ))
            }
            ExtraKind::Vector => {
                let range = match (&self.fixed, &self.lists) {
                    (Some(f), _) if f.is_valid(i) => {
                        let start = f.value_offset_at(i);
                        Some(start..start + f.value_length() as usize)
                    }
                    (None, Some(l)) => l.range(i),
                    _ => None,
                }
                .ok_or((RejectKind::NullInput, format!("`{name}` is null")))?;
                if range.len() != self.width {
                    return Err((
                        RejectKind::BadInputWidth,
                        format!(
                            "`{name}` has {} values, expected {}",
                            range.len(),
                            self.width
                        ),
                    ));
                }
                self.no_nulls(range.clone())?;
                let floats = self.values.as_primitive::<Float64Type>().values()[range]
                    .iter()
                    .map(|v| *v as f32);
                Ok(ExtraValue::Vector(floats.collect()))
            }
            ExtraKind::Float => {
                self.no_nulls(i..i + 1)?;
                Ok(ExtraValue::Float(
                    self.values.as_primitive::<Float64Type>().value(i) as f32,
                ))
            }
            ExtraKind::Int => {
                self.no_nulls(i..i + 1)?;
                Ok(ExtraValue::Int(
                    self.values.as_primitive::<Int64Type>().value(i),
                ))
            }
        }
    }

    fn no_nulls(&self, range: Range<usize>) -> Result<(), RowError> {
        if self.values.null_count() > 0 && range.clone().any(|k| self.values.is_null(k)) {
            return Err((
                RejectKind::NullInput,
                format!("`{}` holds a null value", self.name),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BinaryBuilder, FixedSizeBinaryBuilder, Float32Builder, ListBuilder, StringArray,
    };

    use super::*;
    use crate::columns::ExtraColumn;

    /// Segments of shape [1, 2, 2] in u8: 4 bytes each.
    fn mapping(extras: Vec<ExtraColumn>) -> ColumnMapping {
        ColumnMapping {
            id: "id".into(),
            segments: SegmentsColumn {
                name: "segments".into(),
                dtype: SegmentDtype::U8,
                shape: vec![1, 2, 2],
                max_per_row: None,
                image: None,
            },
            extras,
        }
    }

    #[test]
    fn a_row_over_max_per_row_is_rejected_before_its_segments_are_copied() {
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
        let mut segments = ListBuilder::new(FixedSizeBinaryBuilder::new(4));
        for n in [2, 3] {
            for _ in 0..n {
                segments.values().append_value([1, 2, 3, 4]).unwrap();
            }
            segments.append(true);
        }
        let batch = batch(vec![("id", ids), ("segments", Arc::new(segments.finish()))]);
        let mut columns = mapping(vec![]);
        columns.segments.max_per_row = Some(2);
        let chunk = decode_batch(&batch, &columns, 0, 0).unwrap();
        assert_eq!(chunk.rows.len(), 1);
        assert_eq!(kinds(&chunk), [(1, RejectKind::TooManySegments)]);
        assert!(chunk.rejects[0].reason.contains("3 segments"));
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    fn kinds(chunk: &RowChunk) -> Vec<(u64, RejectKind)> {
        let rejects = chunk.rejects.iter();
        rejects.map(|r| (r.origin.row_idx, r.kind)).collect()
    }

    #[test]
    fn fixed_size_binary_segments_decode_and_bad_rows_are_rejected() {
        let ids: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("b"),
            Some("c"),
            None,
            Some("e"),
        ]));
        let mut segments = ListBuilder::new(FixedSizeBinaryBuilder::new(4));
        segments.values().append_value([1, 2, 3, 4]).unwrap();
        segments.values().append_value([5, 6, 7, 8]).unwrap();
        segments.append(true); // a: two segments
        segments.append_null(); // b: null list
        segments.append(true); // c: no segments
        segments.values().append_value([9; 4]).unwrap();
        segments.append(true); // null id
        segments.values().append_null();
        segments.append(true); // e: a null segment
        let batch = batch(vec![("id", ids), ("segments", Arc::new(segments.finish()))]);

        let chunk = decode_batch(&batch, &mapping(vec![]), 3, 100).unwrap();

        assert_eq!(chunk.rows.len(), 1);
        let row = &chunk.rows[0];
        assert_eq!(row.meta.id, RowId::Str("a".into()));
        assert_eq!(
            row.meta.origin,
            Origin {
                file_idx: 3,
                row_idx: 100
            }
        );
        assert_eq!(row.n_segments, 2);
        assert_eq!(&row.segments[..], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            kinds(&chunk),
            [
                (101, RejectKind::NullSegments),
                (102, RejectKind::NoSegments),
                (103, RejectKind::NullId),
                (104, RejectKind::NullSegment),
            ]
        );
        assert_eq!(chunk.rejects[2].id, None);
        assert_eq!(chunk.rejects[3].id, Some(RowId::Str("e".into())));
    }

    #[test]
    fn binary_segments_of_the_wrong_size_and_vectors_of_the_wrong_width_reject() {
        let ids: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![7, 8, 9]));
        let mut segments = ListBuilder::new(BinaryBuilder::new());
        let mut vectors = ListBuilder::new(Float32Builder::new());
        for (bytes, width) in [(4, 2), (3, 2), (4, 3)] {
            segments.values().append_value(vec![1u8; bytes]);
            segments.append(true);
            for _ in 0..width {
                vectors.values().append_value(0.5);
            }
            vectors.append(true);
        }
        let batch = batch(vec![
            ("id", ids),
            ("segments", Arc::new(segments.finish())),
            ("v", Arc::new(vectors.finish())),
        ]);
        let extras = vec![ExtraColumn {
            name: "v".into(),
            kind: ExtraKind::Vector,
            width: Some(2),
        }];

        let chunk = decode_batch(&batch, &mapping(extras), 0, 0).unwrap();

        assert_eq!(chunk.rows.len(), 1);
        assert_eq!(chunk.rows[0].meta.id, RowId::Int(7));
        assert_eq!(chunk.rows[0].extras, [ExtraValue::Vector(vec![0.5, 0.5])]);
        assert_eq!(
            kinds(&chunk),
            [
                (1, RejectKind::BadSegmentSize),
                (2, RejectKind::BadInputWidth)
            ]
        );
        assert!(chunk.rejects[0].reason.contains("3 bytes, expected 4"));
    }

    /// Image segments of shape [1, 8, 8] u8.
    fn image_mapping() -> ColumnMapping {
        let mut columns = mapping(vec![]);
        columns.segments.shape = vec![1, 8, 8];
        columns.segments.image = Some(toml::from_str("").unwrap());
        columns
    }

    fn struct_images(items: Vec<(Option<Vec<u8>>, Option<&str>)>) -> ArrayRef {
        let bytes: ArrayRef = Arc::new(arrow::array::BinaryArray::from_iter(
            items.iter().map(|(b, _)| b.as_deref()),
        ));
        let paths: ArrayRef = Arc::new(StringArray::from_iter(items.iter().map(|(_, p)| *p)));
        Arc::new(
            arrow::array::StructArray::try_from(vec![("bytes", bytes), ("path", paths)]).unwrap(),
        )
    }

    #[test]
    fn image_columns_in_every_form_decode_and_bad_images_reject_their_row() {
        use crate::image::sniff::Format;
        use crate::image::tests::{encode, png_claiming, ramp};
        let png = encode(Format::Png, 8, 8, &ramp());
        let ids = || -> ArrayRef { Arc::new(StringArray::from(vec!["a", "b", "c"])) };
        let mut lists = ListBuilder::new(BinaryBuilder::new());
        for items in [
            vec![png.clone(), png.clone()],
            vec![png.clone(), vec![]],
            vec![png_claiming(9000)],
        ] {
            items.iter().for_each(|b| lists.values().append_value(b));
            lists.append(true);
        }
        let per_row: ArrayRef = Arc::new(arrow::array::BinaryArray::from_iter_values([
            png.clone(),
            b"GIF89a".to_vec(),
            png.clone(),
        ]));
        let structs = struct_images(vec![
            (Some(png.clone()), Some("a.png")),
            (None, Some("b.png")),
            (Some(png.clone()[..40].to_vec()), None),
        ]);
        let forms: [(&str, ArrayRef, &str, &str); 3] = [
            (
                "list<binary>",
                Arc::new(lists.finish()),
                "segment 1: is empty (0 bytes)",
                "segment 0: PNG of 9000x9000",
            ),
            ("binary", per_row, "segment 0: is not PNG, JPEG or WebP", ""),
            (
                "struct",
                structs,
                "segment 0: has no bytes, only the path \"b.png\"",
                "segment 0: PNG",
            ),
        ];
        for (form, segments, second, third) in forms {
            let batch = batch(vec![("id", ids()), ("segments", segments)]);
            let chunk = decode_batch(&batch, &image_mapping(), 0, 0).unwrap();
            assert_eq!(&chunk.rows[0].segments[..64], ramp(), "{form}");
            let reasons: Vec<&str> = chunk.rejects.iter().map(|r| r.reason.as_str()).collect();
            assert!(reasons[0].starts_with(second), "{form}: {reasons:?}");
            assert!(
                third.is_empty() || reasons[1].starts_with(third),
                "{form}: {reasons:?}"
            );
            assert_eq!(chunk.rows.len() + chunk.rejects.len(), 3, "{form}");
        }
    }

    #[test]
    fn unsigned_ids_above_i64_max_keep_their_value() {
        let big = u64::MAX - 1;
        let ids: ArrayRef = Arc::new(arrow::array::UInt64Array::from(vec![big, 3]));
        let mut segments = ListBuilder::new(FixedSizeBinaryBuilder::new(4));
        for _ in 0..2 {
            segments.values().append_value([1, 2, 3, 4]).unwrap();
            segments.append(true);
        }
        let batch = batch(vec![("id", ids), ("segments", Arc::new(segments.finish()))]);
        let chunk = decode_batch(&batch, &mapping(vec![]), 0, 0).unwrap();
        assert!(chunk.rejects.is_empty(), "{:?}", chunk.rejects);
        assert_eq!(chunk.rows[0].meta.id, RowId::UInt(big));
        assert_eq!(chunk.rows[1].meta.id, RowId::UInt(3));
    }

    #[test]
    fn a_batch_without_a_mapped_column_is_an_error_naming_it() {
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        let error = decode_batch(&batch(vec![("id", ids)]), &mapping(vec![]), 0, 0).unwrap_err();
        assert!(matches!(&error, DecodeError::MissingColumn(c) if c == "segments"));
        assert!(error.to_string().contains("`segments`"), "{error}");
    }
}
