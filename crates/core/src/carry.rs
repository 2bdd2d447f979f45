//! `[writers] carry`: which input columns the output keeps beside each
//! prediction. The readers resolve it against the input's columns (and its
//! Hive partition keys) when they plan; the writers add the columns to each
//! part. Each row's carried values travel with the row, encoded once by the
//! readers (Arrow's row format) and decoded by the writers to their types.

use serde::Deserialize;

/// What `carry` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Carry {
    /// Nothing but the id (the default).
    #[default]
    Nothing,
    /// These columns, in this order.
    Columns(Vec<String>),
    /// Every input column that is not a model input (id, segments, extra
    /// inputs), in the file's order, then the partition keys.
    All,
}

impl Carry {
    /// Whether no input column is carried into the output (`Nothing`, or
    /// an empty list), so the carry machinery can be skipped.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Carry::Nothing) || matches!(self, Carry::Columns(c) if c.is_empty())
    }
}

impl<'de> Deserialize<'de> for Carry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            List(Vec<String>),
        }
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "all" => Ok(Carry::All),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "carry must be \"all\" or a list of column names, found \"{w}\""
            ))),
            Raw::List(names) => Ok(Carry::Columns(names)),
        }
    }
}
