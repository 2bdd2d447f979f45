//! The pipeline file: one TOML section per stage, each owned by its stage.
//!
//! This module only loads, resolves relative paths and applies the command
//! line's overrides; each section's meaning lives with its stage.

use segpredict_core::exit::{Classify, Failure};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use segpredict_bucketing::BucketingConfig;
use segpredict_reader::ReaderConfig;
use segpredict_worker::ModelConfig;
use segpredict_writers::WriterConfig;

/// A whole pipeline file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// `[readers]`: where the input is and how to decode it.
    pub readers: ReaderConfig,
    /// `[bucketing]`: how rows are grouped into batches under the segment budget.
    #[serde(default)]
    pub bucketing: BucketingConfig,
    /// `[model]`: the model file and its format, its labels and the device.
    pub model: ModelConfig,
    /// `[writers]`: where predictions go.
    pub writers: WriterConfig,
    /// `[storage]`: how object storage (`s3://`, `gs://`, `az://`) is
    /// reached; unused for local paths.
    #[serde(default)]
    pub storage: StorageConfig,
    /// `max_segments = "auto"` in `[bucketing]`: the budget is calibrated on
    /// the device against `gpu_memory` before the run.
    #[serde(skip)]
    pub auto_budget: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read pipeline file {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid pipeline file {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: TomlError,
    },
}

impl Classify for ConfigError {
    fn failure(&self) -> Failure {
        match self {
            ConfigError::Read { source, .. } => source.failure(),
            ConfigError::Parse { .. } => Failure::Permanent,
        }
    }
}

/// A TOML error in one line that names the key and its line. toml's own
/// message spans several lines with a source excerpt, which a batch job's
/// log does not want; the error itself is kept whole for `Debug`.
#[derive(Debug, thiserror::Error)]
#[error("{}", one_line(.line, .error))]
pub struct TomlError {
    /// 1-based line of the offending text, when toml knows it.
    pub line: Option<usize>,
    pub error: Box<toml::de::Error>,
}

impl TomlError {
    fn new(text: &str, error: toml::de::Error) -> Self {
        let line = error.span().map(|span| {
            1 + text
                .get(..span.start)
                .map_or(0, |t| t.matches('\n').count())
        });
        Self {
            line,
            error: Box::new(error),
        }
    }
}

fn one_line(line: &Option<usize>, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match line {
        Some(line) => format!("line {line}: {message}"),
        None => message,
    }
}

/// `[storage]`: retries and the shard lock's lease in object storage.
/// Credentials, regions and endpoints come from the environment (`AWS_*`,
/// `GOOGLE_*`, `AZURE_*`), never from the pipeline file.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// A cap on the retries of one failed request (5xx, 429, a reset, a
    /// timeout). Default: none, only `retry_timeout_s` bounds them, so a
    /// burst of 503s is ridden out however many tries it takes.
    #[serde(default)]
    pub max_retries: Option<usize>,
    /// Seconds a failed request is retried, with exponential backoff (pauses
    /// up to 5 s): no retry starts later than this after the first try.
    /// Default 180, which rides out an outage of a few minutes.
    #[serde(default = "default_retry_timeout_s")]
    pub retry_timeout_s: f64,
    /// Seconds a shard's lock outlives its holder's last heartbeat: after a
    /// kill -9 on another machine the rerun waits at most this long (on the
    /// same machine, not at all). Default 60.
    #[serde(default = "default_lock_lease_s")]
    pub lock_lease_s: f64,
}

fn default_retry_timeout_s() -> f64 {
    180.0
}

fn default_lock_lease_s() -> f64 {
    60.0
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            max_retries: None,
            retry_timeout_s: default_retry_timeout_s(),
            lock_lease_s: default_lock_lease_s(),
        }
    }
}

impl StorageConfig {
    /// Makes these the settings of every object-store client the process
    /// builds (before the first is built).
    pub fn apply(&self) {
        let seconds = |s: f64| std::time::Duration::from_secs_f64(s.clamp(0.1, 86_400.0));
        segpredict_storage::configure(segpredict_storage::StorageSettings {
            max_retries: self.max_retries,
            retry_timeout: seconds(self.retry_timeout_s),
            lock_lease: seconds(self.lock_lease_s),
        });
    }
}

/// Values given on the command line; each replaces the file's value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub input: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub device: Option<String>,
    pub max_segments: Option<usize>,
    pub threads: Option<usize>,
}

impl PipelineConfig {
    /// `[writers] top_k` against the labels file's classes, before the run
    /// starts: more than there are is a settings error naming the key.
    pub fn check_top_k(&self) -> segpredict_core::exit::Result<()> {
        let Some(k) = self.writers.top_k else {
            return Ok(());
        };
        let n_labels = segpredict_worker::load_labels(&self.model.labels)?.len();
        Ok(self.writers.check_top_k(k, n_labels, &self.model.labels)?)
    }

    /// Reads `path`; relative paths inside it are taken from the file's folder,
    /// so a pipeline runs the same from any working directory.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Self::parse(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config.storage.apply();
        Ok(config)
    }

    /// Parses TOML text; the error is one line naming the offending key.
    pub fn parse(text: &str) -> Result<Self, TomlError> {
        let error = |e| TomlError::new(text, e);
        let mut table: toml::Table = toml::from_str(text).map_err(error)?;
        let budget_given = has_budget(&table);
        let mut config: Self = if take_auto_budget(&mut table) {
            let mut config: Self = table.try_into().map_err(error)?;
            config.auto_budget = true;
            config
        } else {
            // Straight from the text, so errors keep their line numbers.
            toml::from_str(text).map_err(error)?
        };
        config.bucketing.max_segments_given = budget_given;
        // `[writers] carry` is planned by the readers: they read the columns.
        config.readers.carry = config.writers.carry.clone();
        config.readers.reserved = segpredict_writers::output_columns();
        Ok(config)
    }

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            // A URL (`s3://`, `file://`) is not relative to anything.
            if p.is_relative() && !p.to_string_lossy().contains("://") {
                *p = lexically_normal(&base.join(&*p));
            }
        };
        resolve(&mut self.readers.path);
        resolve(&mut self.model.path);
        resolve(&mut self.model.labels);
        resolve(&mut self.writers.dir);
    }

    /// Command-line values win over the file; their relative paths are taken
    /// from the working directory, as a shell user expects.
    pub fn apply(&mut self, overrides: &Overrides) {
        if let Some(input) = &overrides.input {
            self.readers.path = input.clone();
        }
        if let Some(output) = &overrides.output {
            self.writers.dir = output.clone();
        }
        if let Some(device) = &overrides.device {
            self.model.device = device.clone();
        }
        if let Some(max_segments) = overrides.max_segments {
            self.bucketing.max_segments = max_segments;
            self.bucketing.max_segments_given = true;
            self.auto_budget = false;
        }
        if let Some(threads) = overrides.threads {
            self.readers.threads = threads;
            self.writers.threads = threads;
        }
    }
}

/// `pipelines/../out` -> `out`, without touching the file system (the path
/// may not exist yet), so messages and reports show the path a person means.
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// Whether `[bucketing]` sets `max_segments` (a number or "auto"): if not,
/// the run's device picks the default.
fn has_budget(table: &toml::Table) -> bool {
    table
        .get("bucketing")
        .and_then(toml::Value::as_table)
        .is_some_and(|b| b.contains_key("max_segments"))
}

/// Replaces `max_segments = "auto"` with a placeholder budget (calibration
/// sets the real one) and says whether it was there.
fn take_auto_budget(table: &mut toml::Table) -> bool {
    let Some(toml::Value::Table(bucketing)) = table.get_mut("bucketing") else {
        return false;
    };
    if bucketing.get("max_segments").and_then(toml::Value::as_str) != Some("auto") {
        return false;
    }
    bucketing.insert("max_segments".into(), toml::Value::Integer(1));
    // Explicit classes cannot be checked against a budget not yet known.
    bucketing.remove("size_classes");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pipeline file shipped in the repository loads.
    #[test]
    fn every_shipped_pipeline_file_loads() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut loaded = 0;
        for dir in ["pipelines", "benches/gpu"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "toml") {
                    PipelineConfig::load(&path)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    loaded += 1;
                }
            }
        }
        assert!(loaded >= 4, "found only {loaded} pipeline files");
    }

    const MINIMAL: &str = r#"
        [readers]
        path = "in.parquet"
        [readers.columns]
        id = "id"
        segments = { name = "s", shape = [1, 8, 8] }
        [model]
        path = "m.pt"
        labels = "m.txt"
        [writers]
        dir = "out"
    "#;

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let text = MINIMAL.replace("[writers]", "[writers]\ncompresion = \"zstd\"");
        let error = PipelineConfig::parse(&text).unwrap_err().to_string();
        assert!(error.contains("compresion"), "{error}");
        // The key sits on line 11 of the text (which starts with a newline).
        assert!(error.starts_with("line 11:"), "{error}");
    }

    #[test]
    fn auto_budget_is_recognised_and_overridden_by_a_number() {
        let text = MINIMAL.replace(
            "[model]",
            "[bucketing]\nmax_segments = \"auto\"\ngpu_memory = \"8GiB\"\n[model]",
        );
        let mut config = PipelineConfig::parse(&text).unwrap();
        assert!(config.auto_budget);
        assert_eq!(config.bucketing.gpu_memory.as_deref(), Some("8GiB"));
        config.apply(&Overrides {
            max_segments: Some(2048),
            ..Overrides::default()
        });
        assert!(!config.auto_budget);
        assert_eq!(config.bucketing.max_segments, 2048);
    }

    #[test]
    fn the_budget_defaults_by_device_unless_the_file_or_command_line_sets_it() {
        use segpredict_bucketing::CPU_MAX_SEGMENTS;
        let settled = |text: &str, on_cuda: bool, cli: Option<usize>| {
            let mut config = PipelineConfig::parse(text).unwrap();
            config.apply(&Overrides {
                max_segments: cli,
                ..Overrides::default()
            });
            config.bucketing.settle_for_device(on_cuda);
            config.bucketing.max_segments
        };
        assert_eq!(settled(MINIMAL, true, None), 4096);
        assert_eq!(settled(MINIMAL, false, None), CPU_MAX_SEGMENTS);
        let given = MINIMAL.replace("[model]", "[bucketing]\nmax_segments = 4096\n[model]");
        assert_eq!(settled(&given, false, None), 4096);
        assert_eq!(settled(MINIMAL, false, Some(8192)), 8192);
    }

    #[test]
    fn relative_paths_are_resolved_against_the_pipeline_folder_and_tidied() {
        assert_eq!(
            lexically_normal(Path::new("pipelines/../out/sample")),
            Path::new("out/sample")
        );
        assert_eq!(lexically_normal(Path::new("./a/./b")), Path::new("a/b"));
        assert_eq!(lexically_normal(Path::new("../x")), Path::new("../x"));
        assert_eq!(lexically_normal(Path::new("a/..")), Path::new("."));
        assert_eq!(
            lexically_normal(Path::new("/srv/p/../data")),
            Path::new("/srv/data")
        );
    }

    #[test]
    fn model_format_defaults_to_auto_and_names_are_checked() {
        use segpredict_worker::ModelFormat;
        let config = PipelineConfig::parse(MINIMAL).unwrap();
        assert_eq!(config.model.format, ModelFormat::Auto);
        let text = MINIMAL.replace("[model]", "[model]\nformat = \"torchscript\"");
        let config = PipelineConfig::parse(&text).unwrap();
        assert_eq!(config.model.format, ModelFormat::TorchScript);
        let text = MINIMAL.replace("[model]", "[model]\nformat = \"onnx\"");
        let error = PipelineConfig::parse(&text).unwrap_err().to_string();
        assert!(error.contains("onnx"), "{error}");
    }

    #[test]
    fn a_word_other_than_auto_is_an_error() {
        let text = MINIMAL.replace("[model]", "[bucketing]\nmax_segments = \"lots\"\n[model]");
        assert!(PipelineConfig::parse(&text).is_err());
    }
}
