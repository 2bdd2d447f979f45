//! The column forms encoded images come in: `list<binary>` (one image per
//! segment), `list<struct<bytes: binary, path: string>>` (Hugging Face
//! `datasets`' `Image` feature in a list), and one image per row as
//! `binary` or `struct<bytes, path>`. Binary, large binary and binary views
//! alike; the bytes are cast once per batch to one layout.

use arrow::array::{Array, ArrayRef, AsArray, LargeBinaryArray, StringArray};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Fields};

use crate::columns::list_child;
use segpredict_core::message::RejectKind;

/// The field of a `datasets` image struct that holds the encoded bytes.
const BYTES_FIELD: &str = "bytes";
const PATH_FIELD: &str = "path";

fn is_binary(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

fn bytes_field(fields: &Fields) -> Option<&DataType> {
    let field = fields.iter().find(|f| f.name() == BYTES_FIELD)?;
    Some(field.data_type())
}

/// Whether items of this type are encoded images: binary, or a struct
/// with a binary `bytes` field.
fn is_image_item(data_type: &DataType) -> bool {
    match data_type {
        DataType::Struct(fields) => bytes_field(fields).is_some_and(is_binary),
        other => is_binary(other),
    }
}

/// Whether the column holds one image per row (not a list of them).
pub fn one_per_row(data_type: &DataType) -> bool {
    list_child(data_type).is_none()
}

/// What is wrong with a column's type for encoded image segments, if anything.
pub fn type_problem(data_type: &DataType) -> Option<String> {
    let item = list_child(data_type).unwrap_or(data_type);
    (!is_image_item(item)).then(|| {
        format!(
            "encoded image segments must be binary, struct<bytes: binary, path: string>, or a list of either; found {data_type}"
        )
    })
}

/// The encoded images of one batch, indexed as the items of the column's
/// lists (or as its rows, one image each).
pub struct EncodedImages {
    bytes: LargeBinaryArray,
    /// The struct's own nulls (a null image), for the struct forms.
    struct_nulls: Option<NullBuffer>,
    /// The struct's `path`, for saying why an image without bytes is not read.
    paths: Option<StringArray>,
}

impl EncodedImages {
    /// From the items array (the list's values, or the column itself).
    pub fn new(items: &ArrayRef) -> Result<Self, arrow::error::ArrowError> {
        let large = |a: &ArrayRef| -> Result<LargeBinaryArray, arrow::error::ArrowError> {
            Ok(cast(a, &DataType::LargeBinary)?.as_binary::<i64>().clone())
        };
        let DataType::Struct(_) = items.data_type() else {
            return Ok(Self {
                bytes: large(items)?,
                struct_nulls: None,
                paths: None,
            });
        };
        let images = items.as_struct();
        let field = |name: &str| images.column_by_name(name);
        let bytes = field(BYTES_FIELD).ok_or_else(|| {
            arrow::error::ArrowError::SchemaError("the image struct has no `bytes` field".into())
        })?;
        let paths = field(PATH_FIELD)
            .and_then(|p| cast(p, &DataType::Utf8).ok())
            .map(|p| p.as_string::<i32>().clone());
        Ok(Self {
            bytes: large(bytes)?,
            struct_nulls: images.nulls().cloned(),
            paths,
        })
    }

    /// Image `j`'s bytes, or why there are none.
    pub fn get(&self, j: usize) -> Result<&[u8], (RejectKind, String)> {
        let null = |why: String| Err((RejectKind::NullSegment, why));
        if self.struct_nulls.as_ref().is_some_and(|n| n.is_null(j)) {
            return null("is null".into());
        }
        if self.bytes.is_null(j) {
            return match self.paths.as_ref().filter(|p| p.is_valid(j)) {
                Some(paths) => null(format!(
                    "has no bytes, only the path {:?}: segpredict decodes the `bytes` field, it does not open paths",
                    paths.value(j)
                )),
                None => null("is null".into()),
            };
        }
        Ok(self.bytes.value(j))
    }
}
