//! `[writers] carry` resolved against the input: which columns each row
//! keeps for the output, their types as read, and each row's values
//! encoded in Arrow's row format (`RowMeta::carried`), so they travel with
//! the row through bucketing's reordering at their own size, counted in
//! bucketing's `max_held_bytes` account.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use segpredict_core::carry::Carry;
use segpredict_core::message::{InputFile, RowChunk};

use super::{ColumnMapping, ReaderError};

/// Where a carried column's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// The file's own column.
    Column,
    /// A Hive partition key of the file's path: a string, the same for
    /// every row of the file.
    Partition,
}

/// The carried columns as the plan resolved them from the first file.
#[derive(Debug)]
pub struct Carried {
    /// Their fields, in the order the output has them: a file column's
    /// type and nullability as read, a partition key's UTF-8, nullable.
    pub schema: SchemaRef,
    sources: Vec<Source>,
    converter: RowConverter,
}

impl Carried {
    /// Resolves `carry` against the first file's schema and partitions.
    /// `reserved` are the output's own columns: a carried column of one of
    /// those names is an error, as is one neither the file nor its path has.
    pub fn resolve(
        carry: &Carry,
        reserved: &[String],
        columns: &ColumnMapping,
        file: &InputFile,
        schema: &Schema,
    ) -> Result<Option<Arc<Self>>, ReaderError> {
        let names = wanted(carry, columns, file, schema);
        if names.is_empty() {
            return Ok(None);
        }
        let error = |column: &str, message: String| ReaderError::Carry {
            path: file.path.clone(),
            column: column.to_string(),
            message,
        };
        let mut fields = Vec::new();
        let mut sources = Vec::new();
        for name in &names {
            if fields.iter().any(|f: &Field| f.name() == name) {
                return Err(error(name, "[writers] carry names it twice".into()));
            }
            let (field, source) =
                field_of(name, reserved, file, schema).map_err(|m| error(name, m.into()))?;
            fields.push(field);
            sources.push(source);
        }
        let sort_fields: Vec<SortField> = fields
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        if let Some(field) = fields
            .iter()
            .find(|f| !RowConverter::supports_fields(&[SortField::new(f.data_type().clone())]))
        {
            return Err(error(
                field.name(),
                format!(
                    "[writers] carry cannot keep a column of type {}",
                    field.data_type()
                ),
            ));
        }
        let converter =
            RowConverter::new(sort_fields).map_err(|source| ReaderError::CarryType {
                path: file.path.clone(),
                source,
            })?;
        Ok(Some(Arc::new(Self {
            schema: Arc::new(Schema::new(fields)),
            sources,
            converter,
        })))
    }

    /// Checks that `file` has every carried column with the type the first
    /// file had, and every carried partition key in its path.
    pub fn check_file(&self, file: &InputFile, schema: &Schema) -> Result<(), ReaderError> {
        let error = |column: &str, message: String| ReaderError::Column {
            path: file.path.clone(),
            column: column.to_string(),
            message,
        };
        for (field, source) in self.schema.fields().iter().zip(&self.sources) {
            let name = field.name();
            match source {
                Source::Column => match schema.field_with_name(name) {
                    Ok(here) if here.data_type() == field.data_type() => {}
                    Ok(here) => {
                        return Err(error(
                            name,
                            format!(
                                "carried as {} (the first file's type) but {} here",
                                field.data_type(),
                                here.data_type()
                            ),
                        ))
                    }
                    Err(_) => {
                        return Err(error(name, "carried, but no column of this file".into()))
                    }
                },
                Source::Partition => {
                    if !file.partitions.iter().any(|(key, _)| key == name) {
                        return Err(error(name, "carried as a partition key, but no `key=value` folder of this file's path names it".into()));
                    }
                }
            }
        }
        Ok(())
    }

    /// The file's carried columns, for the read's projection.
    pub fn file_columns(&self) -> impl Iterator<Item = &str> {
        self.schema
            .fields()
            .iter()
            .zip(&self.sources)
            .filter(|(_, s)| **s == Source::Column)
            .map(|(f, _)| f.name().as_str())
    }

    /// Puts each row's carried values, in the row format, into its
    /// `RowMeta::carried`; `batch` is the record batch the chunk's rows
    /// came from, its first row at `first_row` of `file`.
    pub fn encode(
        &self,
        batch: &RecordBatch,
        file: &InputFile,
        first_row: u64,
        chunk: &mut RowChunk,
    ) -> Result<(), arrow::error::ArrowError> {
        let columns = self.columns_of(batch, file)?;
        let rows = self.converter.convert_columns(&columns)?;
        for row in &mut chunk.rows {
            let i = (row.meta.origin.row_idx - first_row) as usize;
            row.meta.carried = rows.row(i).as_ref().into();
        }
        Ok(())
    }

    fn columns_of(
        &self,
        batch: &RecordBatch,
        file: &InputFile,
    ) -> Result<Vec<ArrayRef>, arrow::error::ArrowError> {
        let missing = |name: &str| {
            arrow::error::ArrowError::SchemaError(format!("no column `{name}` to carry"))
        };
        self.schema
            .fields()
            .iter()
            .zip(&self.sources)
            .map(|(field, source)| match source {
                Source::Column => batch
                    .column_by_name(field.name())
                    .cloned()
                    .ok_or_else(|| missing(field.name())),
                Source::Partition => {
                    let value = file
                        .partitions
                        .iter()
                        .find(|(k, _)| k == field.name())
                        .and_then(|(_, v)| v.as_deref());
                    Ok(Arc::new(StringArray::from(vec![value; batch.num_rows()])) as ArrayRef)
                }
            })
            .collect()
    }
}

/// A carried column's field and where its values come from, or why it
/// cannot be carried.
fn field_of(
    name: &str,
    reserved: &[String],
    file: &InputFile,
    schema: &Schema,
) -> Result<(Field, Source), &'static str> {
    if reserved.iter().any(|r| r == name) {
        return Err("[writers] carry names a column the output has already (carry another column or rename it)");
    }
    if let Ok(field) = schema.field_with_name(name) {
        Ok((field.clone(), Source::Column))
    } else if file.partitions.iter().any(|(key, _)| key == name) {
        Ok((Field::new(name, DataType::Utf8, true), Source::Partition))
    } else {
        Err("[writers] carry names it, but it is no column of this file nor a partition key (`key=value` folder) of its path")
    }
}

/// The column names `carry` asks for: `all` is every column of the file
/// that is no model input, in the file's order, then every partition key
/// the file has no column of.
fn wanted(
    carry: &Carry,
    columns: &ColumnMapping,
    file: &InputFile,
    schema: &Schema,
) -> Vec<String> {
    match carry {
        Carry::Nothing => Vec::new(),
        Carry::Columns(names) => names.clone(),
        Carry::All => {
            let inputs: Vec<&str> = columns.names().collect();
            let in_file = schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| !inputs.contains(&n.as_str()));
            let keys = file
                .partitions
                .iter()
                .map(|(k, _)| k.clone())
                .filter(|k| schema.field_with_name(k).is_err());
            in_file.chain(keys).collect()
        }
    }
}
