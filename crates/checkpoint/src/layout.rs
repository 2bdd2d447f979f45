//! The names of everything a run writes in its output directory, in one
//! place: part files and rejects files (tagged with the shard and the
//! attempt), their hidden in-progress names, the run manifest, the progress
//! folder's markers, the merged rejects, the reports and the success
//! marker.
//!
//! ```text
//! DIR/_run.json                         what the run is (manifest.rs)
//! DIR/part-[S-]aAAA-WW-NNNNN.parquet     committed predictions
//! DIR/.part-….parquet.inprogress        a part being written
//! DIR/_progress/rejects-[S-]aAAA-WW-NNNNN.parquet   committed rejects
//! DIR/_progress/batches-[S-]aAAA-WW-NNNNN.parquet   committed batch records
//! DIR/_progress/attempt-S-aAAA.json     one per attempt of a shard
//! DIR/_progress/done-S.json             a shard's accounting, once done
//! DIR/_rejects.parquet, _batches.parquet, _report.json, _report.svg,
//!     _SUCCESS                          the commit
//! ```
//!
//! `S` is the shard tag (`s001of004`), only in sharded runs' part names;
//! `A` the attempt; `WW` the writer thread; `NNNNN` its file sequence.
//! `_progress/` starts with `_` so that Spark, Hive, pyarrow and DuckDB
//! dataset readers skip it, as they skip `_SUCCESS`.

use std::path::{Path, PathBuf};

use segpredict_core::message::ShardSpec;

pub const REJECTS: &str = "_rejects.parquet";
pub const BATCHES: &str = "_batches.parquet";
pub const REPORT_JSON: &str = "_report.json";
pub const REPORT_SVG: &str = "_report.svg";
pub const SUCCESS: &str = "_SUCCESS";
pub const MANIFEST: &str = "_run.json";
pub const PROGRESS: &str = "_progress";
const IN_PROGRESS_SUFFIX: &str = ".inprogress";

/// The shard and attempt whose files these are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptNames {
    pub shard: ShardSpec,
    pub attempt: u32,
}

impl AttemptNames {
    /// `s001of003-a002` sharded, `a002` not.
    fn stem(self) -> String {
        match self.shard.is_sharded() {
            true => format!("{}-a{:03}", self.shard.tag(), self.attempt),
            false => format!("a{:03}", self.attempt),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLayout {
    dir: PathBuf,
    names: AttemptNames,
}

impl OutputLayout {
    /// The layout of attempt 1 of an unsharded run.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::for_attempt(
            dir,
            AttemptNames {
                shard: ShardSpec::WHOLE,
                attempt: 1,
            },
        )
    }

    pub fn for_attempt(dir: impl Into<PathBuf>, names: AttemptNames) -> Self {
        Self {
            dir: dir.into(),
            names,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn names(&self) -> AttemptNames {
        self.names
    }

    /// Part file `seq` (from 1) of writer thread `writer_idx`.
    pub fn part(&self, writer_idx: usize, seq: usize) -> PathBuf {
        let stem = self.names.stem();
        self.dir
            .join(format!("part-{stem}-{writer_idx:02}-{seq:05}.parquet"))
    }

    /// Rejects file `seq` (from 1) of writer thread `writer_idx`.
    pub fn rejects_part(&self, writer_idx: usize, seq: usize) -> PathBuf {
        let stem = self.names.stem();
        self.progress()
            .join(format!("rejects-{stem}-{writer_idx:02}-{seq:05}.parquet"))
    }

    /// Batch-records file `seq` (from 1) of writer thread `writer_idx`.
    pub fn batches_part(&self, writer_idx: usize, seq: usize) -> PathBuf {
        self.progress().join(format!(
            "{}{writer_idx:02}-{seq:05}.parquet",
            self.batches_prefix()
        ))
    }

    /// How this attempt's batch files' names start (`batches-a002-`).
    pub fn batches_prefix(&self) -> String {
        format!("batches-{}-", self.names.stem())
    }

    /// The hidden name a file is written under until it is whole, beside it.
    pub fn in_progress(&self, final_path: &Path) -> PathBuf {
        let name = final_path.file_name().unwrap_or_default().to_string_lossy();
        final_path.with_file_name(format!(".{name}{IN_PROGRESS_SUFFIX}"))
    }

    pub fn progress(&self) -> PathBuf {
        self.dir.join(PROGRESS)
    }

    pub fn manifest(&self) -> PathBuf {
        self.dir.join(MANIFEST)
    }

    /// Written when this attempt starts; counting them counts attempts.
    pub fn attempt_marker(&self) -> PathBuf {
        let (tag, attempt) = (self.names.shard.tag(), self.names.attempt);
        self.progress()
            .join(format!("attempt-{tag}-a{attempt:03}.json"))
    }

    /// Written when `shard` is done, with its accounting.
    pub fn done_marker(&self, shard: ShardSpec) -> PathBuf {
        self.progress().join(format!("done-{}.json", shard.tag()))
    }

    /// This shard's plot, where a sharded run keeps it.
    pub fn shard_svg(&self) -> PathBuf {
        match self.names.shard.is_sharded() {
            true => self
                .progress()
                .join(format!("report-{}.svg", self.names.shard.tag())),
            false => self.report_svg(),
        }
    }

    pub fn rejects(&self) -> PathBuf {
        self.dir.join(REJECTS)
    }

    pub fn batches(&self) -> PathBuf {
        self.dir.join(BATCHES)
    }

    pub fn report_json(&self) -> PathBuf {
        self.dir.join(REPORT_JSON)
    }

    pub fn report_svg(&self) -> PathBuf {
        self.dir.join(REPORT_SVG)
    }

    /// Written last: its presence says the run completed.
    pub fn success(&self) -> PathBuf {
        self.dir.join(SUCCESS)
    }

    /// Names this program gives its output, and so may replace with
    /// `overwrite`.
    pub fn is_ours(name: &str) -> bool {
        (name.starts_with("part-") && name.ends_with(".parquet"))
            || name.starts_with("_report.")
            || name == REJECTS
            || name == BATCHES
            || name == SUCCESS
            || name == MANIFEST
            || name == PROGRESS
            || (name.starts_with('.') && name.ends_with(IN_PROGRESS_SUFFIX))
    }

    /// Whether `name` is a temporary file of this layout's shard (in an
    /// unsharded run, every temporary file is).
    pub fn is_leftover(&self, name: &str) -> bool {
        if !(name.starts_with('.') && name.ends_with(IN_PROGRESS_SUFFIX)) {
            return false;
        }
        let shard = self.names.shard;
        !shard.is_sharded() || name.contains(&shard.tag())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_attempt_and_the_shard() {
        let layout = OutputLayout::new("out");
        let part = layout.part(3, 12);
        assert_eq!(part, Path::new("out/part-a001-03-00012.parquet"));
        assert_eq!(
            layout.in_progress(&part),
            Path::new("out/.part-a001-03-00012.parquet.inprogress")
        );
        assert_eq!(
            layout.in_progress(&layout.rejects_part(0, 1)),
            Path::new("out/_progress/.rejects-a001-00-00001.parquet.inprogress")
        );
        assert_eq!(layout.report_json(), Path::new("out/_report.json"));
        assert_eq!(
            layout.batches_part(1, 2),
            Path::new("out/_progress/batches-a001-01-00002.parquet")
        );
        assert_eq!(layout.success(), Path::new("out/_SUCCESS"));
        let shard = OutputLayout::for_attempt(
            "out",
            AttemptNames {
                shard: ShardSpec::new(2, 3).unwrap(),
                attempt: 4,
            },
        );
        assert_eq!(
            shard.part(0, 1),
            Path::new("out/part-s002of003-a004-00-00001.parquet")
        );
        assert_eq!(
            shard.attempt_marker(),
            Path::new("out/_progress/attempt-s002of003-a004.json")
        );
        assert!(shard.is_leftover(".part-s002of003-a001-00-00001.parquet.inprogress"));
        assert!(!shard.is_leftover(".part-s001of003-a001-00-00001.parquet.inprogress"));
    }

    #[test]
    fn only_our_names_are_ours() {
        for name in [
            "part-a001-00-00001.parquet",
            "_report.json",
            "_report.svg",
            "_rejects.parquet",
            "_batches.parquet",
            "_SUCCESS",
            "_run.json",
            "_progress",
            ".part-a001-01-00002.parquet.inprogress",
        ] {
            assert!(OutputLayout::is_ours(name), "{name}");
        }
        for name in ["data.parquet", "_metadata", ".hidden", "part-00-00001.csv"] {
            assert!(!OutputLayout::is_ours(name), "{name}");
        }
    }
}
