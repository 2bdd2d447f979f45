//! The names of everything a run writes in its output directory, in one
//! place: part files, their hidden in-progress names, the rejects, the
//! reports and the success marker.

use std::path::{Path, PathBuf};

/// Today's layout: `part-WW-NNNNN.parquet` per writer `WW` and sequence
/// `NNNNN`, each written as `.part-WW-NNNNN.parquet.inprogress` first;
/// `_rejects.parquet`, `_report.json`, `_report.svg` and `_SUCCESS` beside
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLayout {
    dir: PathBuf,
}

const REJECTS: &str = "_rejects.parquet";
const REPORT_JSON: &str = "_report.json";
const REPORT_SVG: &str = "_report.svg";
const SUCCESS: &str = "_SUCCESS";
const WRITE_PROBE: &str = ".segpredict-write-probe";
const IN_PROGRESS_SUFFIX: &str = ".inprogress";

impl OutputLayout {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Part file `seq` (from 1) of writer thread `writer_idx`.
    pub fn part(&self, writer_idx: usize, seq: usize) -> PathBuf {
        self.dir
            .join(format!("part-{writer_idx:02}-{seq:05}.parquet"))
    }

    /// The hidden name a file is written under until it is whole.
    pub fn in_progress(&self, final_path: &Path) -> PathBuf {
        let name = final_path.file_name().unwrap_or_default().to_string_lossy();
        self.dir.join(format!(".{name}{IN_PROGRESS_SUFFIX}"))
    }

    pub fn rejects(&self) -> PathBuf {
        self.dir.join(REJECTS)
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

    /// An empty file written and removed up front to prove the directory
    /// writable.
    pub fn write_probe(&self) -> PathBuf {
        self.dir.join(WRITE_PROBE)
    }

    /// Names this program gives its output, and so may replace with
    /// `overwrite`.
    pub fn is_ours(name: &str) -> bool {
        (name.starts_with("part-") && name.ends_with(".parquet"))
            || name.starts_with("_report.")
            || name == REJECTS
            || name == SUCCESS
            || (name.starts_with(".part-") && name.ends_with(IN_PROGRESS_SUFFIX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_todays() {
        let layout = OutputLayout::new("out");
        let part = layout.part(3, 12);
        assert_eq!(part, Path::new("out/part-03-00012.parquet"));
        assert_eq!(
            layout.in_progress(&part),
            Path::new("out/.part-03-00012.parquet.inprogress")
        );
        assert_eq!(
            layout.in_progress(&layout.rejects()),
            Path::new("out/._rejects.parquet.inprogress")
        );
        assert_eq!(layout.report_json(), Path::new("out/_report.json"));
        assert_eq!(layout.success(), Path::new("out/_SUCCESS"));
    }

    #[test]
    fn only_our_names_are_ours() {
        for name in [
            "part-00-00001.parquet",
            "_report.json",
            "_report.svg",
            "_rejects.parquet",
            "_SUCCESS",
            ".part-01-00002.parquet.inprogress",
        ] {
            assert!(OutputLayout::is_ours(name), "{name}");
        }
        for name in ["data.parquet", "_metadata", ".hidden", "part-00-00001.csv"] {
            assert!(!OutputLayout::is_ours(name), "{name}");
        }
    }
}
