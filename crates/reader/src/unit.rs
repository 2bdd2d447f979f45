//! The unit of parallel reading, shared by the planner and the prefetch.

/// One row group of one file: the unit of parallel reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Index into the plan's sources.
    pub file_idx: u32,
    /// The row group's index within its file.
    pub row_group: usize,
    /// The row group's first row within its file.
    pub first_row: u64,
    /// Rows in the row group.
    pub rows: u64,
}
