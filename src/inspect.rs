//! `segpredict inspect`: what the input holds and how a pipeline would
//! batch it, answered from Parquet footers and the segments column alone,
//! before any model is loaded or any row decoded.
//!
//! The batch plan is the real [`Bucketer`] fed with the rows' segment
//! counts, so it follows the run's rules exactly; only the arrival order
//! differs (file order here, row groups interleaved by reader threads in a
//! run).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use segpredict_core::exit::{Classify, Context, Error, Failure, Result};
use segpredict_reader::image::survey::ImageSurvey;
use serde::Deserialize;

use crate::config::PipelineConfig;

mod images;
use segpredict_bucketing::{BatchingStrategy, Bucketer, BucketingConfig};
use segpredict_core::message::Segmented;
use segpredict_reader::{self as reader, ColumnRole, FileSurvey, SegmentCounts};

/// What to inspect.
#[derive(Debug, Clone, Default)]
pub struct InspectRequest {
    /// Files, directories or globs; empty means the pipeline's input.
    pub paths: Vec<PathBuf>,
    /// With a pipeline, its batch plan is shown.
    pub pipeline: Option<PipelineConfig>,
    /// A calibration saved by `segpredict calibrate --json`: its fit gives
    /// the expected peak memory, and its budget serves `max_segments = "auto"`.
    pub calibration: Option<PathBuf>,
}

/// The fields of a saved calibration that a plan needs.
#[derive(Debug, Clone, Deserialize)]
struct SavedCalibration {
    target_bytes: u64,
    fit: SavedFit,
    max_segments: usize,
    size_classes: Vec<usize>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct SavedFit {
    intercept: f64,
    slope: f64,
}

/// Files listed one by one up to this many; beyond, a count.
const LISTED_FILES: usize = 20;
/// Width of the longest histogram bar, in characters.
const BAR_WIDTH: usize = 40;

/// The whole report, as printed.
pub fn inspect(request: &InspectRequest) -> Result<String> {
    let files = survey(request)?;
    let mut out = String::new();
    describe_files(&files, &mut out);
    let roles = reader::column_roles(&files[0].schema);
    describe_schema(&files, &roles, &mut out);
    let suggestion = suggest_columns(&roles, request.pipeline.as_ref());
    out += &suggestion.block;
    let Some(segments) = suggestion.segments else {
        out += "\nno column can hold segments (a list of fixed_size_binary, binary or fixed-size lists of u8/f16/f32), so there is no histogram\n";
        return Ok(out);
    };
    // One pass over each file's segments column: list lengths and, for
    // encoded images, their headers (an object's column is fetched once).
    let surveys = files
        .iter()
        .map(|f| reader::survey_segments(&f.path, &segments))
        .collect::<Result<Vec<_>, _>>()?;
    let mut image_survey = ImageSurvey::default();
    let mut counts = Vec::with_capacity(surveys.len());
    for survey in surveys {
        image_survey.merge(survey.images);
        counts.push(survey.counts);
    }
    describe_histogram(&segments, &counts, &mut out);
    images::describe_images(
        &files,
        &segments,
        &image_survey,
        request.pipeline.as_ref(),
        &mut out,
    )?;
    if let Some(config) = &request.pipeline {
        let calibration = request
            .calibration
            .as_deref()
            .map(load_calibration)
            .transpose()?;
        describe_plan(config, calibration.as_ref(), &counts, &mut out)?;
    }
    Ok(out)
}

fn survey(request: &InspectRequest) -> Result<Vec<FileSurvey>> {
    let paths: Vec<PathBuf> = match (&request.paths[..], &request.pipeline) {
        ([], Some(config)) => vec![config.readers.path.clone()],
        ([], None) => {
            return Err(Error::permanent(
                "name a Parquet file, directory or glob, or pass --pipeline",
            ));
        }
        (paths, _) => paths.to_vec(),
    };
    let mut files = Vec::new();
    for path in &paths {
        files.extend(reader::survey_files(path)?);
    }
    Ok(files)
}

/// A calibration file (`inspect --calibration`) that cannot be read or
/// parsed: a usage error, which a retry of the same command meets again.
#[derive(Debug, thiserror::Error)]
enum CalibrationFile {
    #[error("reading calibration {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a calibration saved by `segpredict calibrate --json`")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for CalibrationFile {
    fn failure(&self) -> Failure {
        Failure::Permanent
    }
}

fn load_calibration(path: &Path) -> Result<SavedCalibration> {
    let text = std::fs::read_to_string(path).map_err(|source| CalibrationFile::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| {
        CalibrationFile::Parse {
            path: path.to_path_buf(),
            source,
        }
        .into()
    })
}

fn describe_files(files: &[FileSurvey], out: &mut String) {
    let rows: u64 = files.iter().map(|f| f.rows).sum();
    let row_groups: usize = files.iter().map(|f| f.row_groups).sum();
    let _ = writeln!(
        out,
        "{} file(s), {rows} rows, {row_groups} row groups",
        files.len()
    );
    for file in files.iter().take(LISTED_FILES) {
        let _ = writeln!(
            out,
            "  {}: {} rows, {} row groups",
            file.path.display(),
            file.rows,
            file.row_groups
        );
    }
    if files.len() > LISTED_FILES {
        let _ = writeln!(out, "  ... and {} more", files.len() - LISTED_FILES);
    }
}

fn describe_schema(files: &[FileSurvey], roles: &[(String, ColumnRole)], out: &mut String) {
    let schema = &files[0].schema;
    out.push_str("\nschema");
    if files.len() > 1 {
        let _ = write!(out, " (of {})", files[0].path.display());
    }
    out.push_str(":\n");
    for (field, (_, role)) in schema.fields().iter().zip(roles) {
        let _ = writeln!(
            out,
            "  {:<20} {:<44} {}",
            field.name(),
            field.data_type().to_string(),
            role.describe()
        );
    }
    for file in &files[1..] {
        if file.schema.fields() != schema.fields() {
            let _ = writeln!(
                out,
                "  note: {} has a different schema",
                file.path.display()
            );
        }
    }
}

/// The suggested `[readers.columns]` block and the segments column it names.
struct Suggestion {
    block: String,
    segments: Option<String>,
}

/// Picks id, segments and extras from the columns' possible roles. A
/// pipeline's own segments column (and its shape) wins when the input has it.
fn suggest_columns(
    roles: &[(String, ColumnRole)],
    pipeline: Option<&PipelineConfig>,
) -> Suggestion {
    let configured = pipeline.map(|p| &p.readers.columns);
    let segments = configured
        .map(|c| c.segments.name.clone())
        .filter(|name| roles.iter().any(|(n, _)| n == name))
        .or_else(|| {
            roles
                .iter()
                .find(|(_, role)| matches!(role, ColumnRole::Segments { .. } | ColumnRole::Images))
                .map(|(name, _)| name.clone())
        });
    let id = pick_id(roles);
    let mut block =
        String::from("\nsuggested columns (paste into the pipeline file):\n\n[readers.columns]\n");
    match &id {
        Some(id) => {
            let _ = writeln!(block, "id = {}", quoted(id));
        }
        None => block.push_str("# no string or integer column can be the id\n"),
    }
    let segments_line = segments.as_ref().and_then(|name| {
        let (_, role) = roles.iter().find(|(n, _)| n == name)?;
        let configured = configured.filter(|c| &c.segments.name == name);
        Some(segments_entry(name, role, configured))
    });
    match &segments_line {
        Some(line) => block += line,
        None => block.push_str("# no column can hold segments\n"),
    }
    let taken = [id.as_deref(), segments.as_deref()];
    block += &extras_lines(roles, &taken);
    Suggestion { block, segments }
}

/// Lists and vectors become extras; scalar numbers are only named, since a
/// label or weight column is as likely as a model input.
fn extras_lines(roles: &[(String, ColumnRole)], taken: &[Option<&str>]) -> String {
    let free = roles
        .iter()
        .filter(|(name, _)| !taken.contains(&Some(name.as_str())));
    let mut extras = Vec::new();
    let mut scalars = Vec::new();
    for (name, role) in free {
        let name = quoted(name);
        match role {
            ColumnRole::RaggedInts => {
                extras.push(format!("{{ name = {name}, kind = \"ragged\" }}"))
            }
            ColumnRole::Vector { width } => extras.push(format!(
                "{{ name = {name}, kind = \"vector\", width = {width} }}"
            )),
            ColumnRole::Int => scalars.push(format!("{{ name = {name}, kind = \"int\" }}")),
            ColumnRole::Float => scalars.push(format!("{{ name = {name}, kind = \"float\" }}")),
            _ => {}
        }
    }
    let mut lines = String::from("# the model is called forward(segments, segment_counts, *extras): keep the extras it takes, in its order\n");
    let _ = writeln!(lines, "extras = [{}]", extras.join(", "));
    if !scalars.is_empty() {
        let _ = writeln!(lines, "# also possible extras: {}", scalars.join(", "));
    }
    lines
}

/// An integer or string column named `id` first, then one ending in `id`,
/// then the first that can be an id.
fn pick_id(roles: &[(String, ColumnRole)]) -> Option<String> {
    let candidates: Vec<&String> = roles
        .iter()
        .filter(|(_, role)| role.can_be_id())
        .map(|(name, _)| name)
        .collect();
    let lower = |n: &&String| n.to_ascii_lowercase();
    candidates
        .iter()
        .find(|n| lower(n) == "id")
        .or_else(|| candidates.iter().find(|n| lower(n).ends_with("id")))
        .or_else(|| candidates.first())
        .map(|n| (*n).clone())
}

fn segments_entry(
    name: &str,
    role: &ColumnRole,
    configured: Option<&reader::ColumnMapping>,
) -> String {
    if let Some(columns) = configured {
        let shape = &columns.segments.shape;
        let dtype = format!("{:?}", columns.segments.dtype).to_lowercase();
        let images = if columns.segments.image.is_some() {
            ", with its [readers.columns.segments.image] section"
        } else {
            ""
        };
        return format!(
            "segments = {{ name = {}, dtype = \"{dtype}\", shape = {shape:?} }}  # dtype and shape from the pipeline{images}\n",
            quoted(name)
        );
    }
    match role {
        ColumnRole::Segments {
            dtype,
            elements: Some(elements),
        } => format!(
            "segments = {{ name = {}, dtype = \"{dtype}\", shape = {:?} }}  # shape guessed from {elements} values a segment: set the model's\n",
            quoted(name),
            guess_shape(*elements)
        ),
        ColumnRole::Images => format!(
            "segments = {{ name = {}, dtype = \"u8\", shape = [3, 224, 224], image = {{ resize = \"stretch\", filter = \"bilinear\" }} }}  # encoded images: set the model's [channels, height, width]\n",
            quoted(name)
        ),
        _ => format!(
            "segments = {{ name = {}, dtype = \"u8\", shape = [] }}  # variable-length binary: set dtype and the model's segment shape (encoded images: add image = {{ ... }})\n",
            quoted(name)
        ),
    }
}

/// A square single-channel or RGB image when the count allows, else flat.
fn guess_shape(elements: usize) -> Vec<usize> {
    let square_side = |n: usize| {
        let side = (n as f64).sqrt().round() as usize;
        (side > 0 && side * side == n).then_some(side)
    };
    if let Some(side) = square_side(elements) {
        return vec![1, side, side];
    }
    if elements.is_multiple_of(3) {
        if let Some(side) = square_side(elements / 3) {
            return vec![3, side, side];
        }
    }
    vec![elements]
}

/// TOML's quoting, so any column name pastes correctly.
fn quoted(name: &str) -> String {
    toml::Value::String(name.to_string()).to_string()
}

/// Rows per log2 bin of segment count: bin k holds counts in [2^k, 2^(k+1)).
fn log2_bins(counts: &[SegmentCounts]) -> BTreeMap<u32, u64> {
    let mut bins = BTreeMap::new();
    for n in counts.iter().flat_map(|c| &c.counts).filter(|&&n| n > 0) {
        *bins.entry(n.ilog2()).or_insert(0) += 1;
    }
    bins
}

fn describe_histogram(column: &str, counts: &[SegmentCounts], out: &mut String) {
    let mut all: Vec<usize> = counts
        .iter()
        .flat_map(|c| c.counts.iter().copied())
        .collect();
    all.sort_unstable();
    let nulls: u64 = counts.iter().map(|c| c.null_rows).sum();
    let empty = all.iter().take_while(|&&n| n == 0).count();
    let _ = writeln!(out, "\nsegments per row (`{column}`):");
    if let (Some(&max), false) = (all.last(), all.is_empty()) {
        let total: usize = all.iter().sum();
        let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
        let _ = writeln!(
            out,
            "  {} segments; min {}, median {}, p99 {}, max {}",
            total,
            all[0],
            at(0.5),
            at(0.99),
            max
        );
    }
    let bins = log2_bins(counts);
    let widest = bins.values().copied().max().unwrap_or(1).max(1);
    for (&k, &rows) in &bins {
        let low = 1usize << k;
        let high = (1usize << k).saturating_mul(2).saturating_sub(1);
        let range = if low == high {
            format!("{low}")
        } else {
            format!("{low}-{high}")
        };
        let bar = "#".repeat(((rows as f64 / widest as f64) * BAR_WIDTH as f64).ceil() as usize);
        let _ = writeln!(out, "  {range:>13} {rows:>9}  {bar}");
    }
    if empty > 0 || nulls > 0 {
        let _ = writeln!(
            out,
            "  a run rejects {empty} row(s) with no segments and {nulls} with a null list"
        );
    }
}

/// A row reduced to what bucketing looks at.
struct Count(usize);

impl Segmented for Count {
    fn n_segments(&self) -> usize {
        self.0
    }
}

/// The bucketing section the plan uses: the pipeline's, with a calibrated
/// budget for `max_segments = "auto"`.
fn plan_config(
    config: &PipelineConfig,
    calibration: Option<&SavedCalibration>,
) -> Result<BucketingConfig> {
    let mut bucketing = config.bucketing.clone();
    if config.auto_budget {
        let Some(calibration) = calibration else {
            return Err(Error::permanent("the pipeline calibrates its budget on the device (max_segments = \"auto\"): pass --calibration FILE, saved by `segpredict calibrate --json FILE`"));
        };
        bucketing.max_segments = calibration.max_segments;
        bucketing.size_classes = Some(calibration.size_classes.clone());
    }
    // Padding's default follows the device the run would choose (padded on
    // CUDA, not on CPU), so the plan is the run's plan on this machine.
    let on_cuda = segpredict_worker::choose_device(&config.model.device).is_ok_and(|d| d.is_cuda());
    bucketing.settle_for_device(on_cuda);
    Ok(bucketing)
}

/// What the bucketer made of the rows.
#[derive(Debug, Default)]
struct PlanSummary {
    batches: u64,
    rows: u64,
    segments: u64,
    padded_segments: u64,
    /// Batches per padded shape.
    shapes: BTreeMap<usize, u64>,
    /// Segment counts of rows over the budget, each sent alone.
    oversized: Vec<usize>,
    reasons: BTreeMap<&'static str, u64>,
}

fn plan(bucketing: &BucketingConfig, counts: &[SegmentCounts]) -> Result<PlanSummary> {
    let mut bucketer = Bucketer::<Count>::new(bucketing).context("invalid [bucketing] section")?;
    let mut summary = PlanSummary::default();
    // Rows with no segments are rejected by the readers and never batched.
    for &n in counts.iter().flat_map(|c| &c.counts).filter(|&&n| n > 0) {
        for batch in bucketer.push(Count(n)) {
            summary.add(&batch);
        }
    }
    for batch in bucketer.finish() {
        summary.add(&batch);
    }
    Ok(summary)
}

impl PlanSummary {
    fn add(&mut self, batch: &segpredict_bucketing::PlannedBatch<Count>) {
        self.batches += 1;
        self.rows += batch.rows.len() as u64;
        self.segments += batch.n_segments as u64;
        self.padded_segments += batch.padded_segments as u64;
        if batch.is_oversized() {
            self.oversized.push(batch.n_segments);
        } else {
            *self.shapes.entry(batch.padded_segments).or_insert(0) += 1;
        }
        *self.reasons.entry(batch.reason.as_str()).or_insert(0) += 1;
    }

    /// The largest batch the model will see, oversized rows included.
    fn largest_shape(&self) -> usize {
        let planned = self.shapes.keys().next_back().copied().unwrap_or(0);
        planned.max(self.oversized.iter().copied().max().unwrap_or(0))
    }
}

fn describe_plan(
    config: &PipelineConfig,
    calibration: Option<&SavedCalibration>,
    counts: &[SegmentCounts],
    out: &mut String,
) -> Result<()> {
    let bucketing = match plan_config(config, calibration) {
        Ok(bucketing) => bucketing,
        Err(e) => {
            let _ = writeln!(out, "\nno batch plan: {e:#}");
            return Ok(());
        }
    };
    let summary = plan(&bucketing, counts)?;
    describe_batches(&bucketing, &summary, out);
    match calibration {
        Some(c) => describe_memory(c, summary.largest_shape(), out),
        None => out.push_str(
            "  (for the expected peak memory, pass --calibration FILE saved by `segpredict calibrate --json FILE`)\n",
        ),
    }
    Ok(())
}

/// Padded, the few shapes the device sees; unpadded (the CPU default),
/// every batch is its own size, so their spread says more than a list.
fn describe_shapes(bucketing: &BucketingConfig, summary: &PlanSummary, out: &mut String) {
    if bucketing.pad_to_size_classes == Some(false) {
        let mut sizes: Vec<usize> = summary
            .shapes
            .iter()
            .flat_map(|(&shape, &n)| std::iter::repeat_n(shape, n as usize))
            .collect();
        sizes.sort_unstable();
        let at = |q: f64| sizes.get(((sizes.len() as f64 - 1.0) * q).round() as usize);
        if let (Some(min), Some(median), Some(max)) = (at(0.0), at(0.5), at(1.0)) {
            let _ = writeln!(
                out,
                "  batch sizes (unpadded: pad_to_size_classes = false): min {min}, median {median}, max {max} segments"
            );
        }
        return;
    }
    let shapes: Vec<String> = summary
        .shapes
        .iter()
        .rev()
        .map(|(shape, n)| format!("{shape} x{n}"))
        .collect();
    let _ = writeln!(
        out,
        "  padded shapes (segments x batches): {}",
        shapes.join(", ")
    );
}

fn describe_batches(bucketing: &BucketingConfig, summary: &PlanSummary, out: &mut String) {
    let strategy = match bucketing.strategy {
        BatchingStrategy::SegmentBudget => {
            format!("segment_budget, budget {} segments", bucketing.max_segments)
        }
        BatchingStrategy::Rows => format!("rows, {} rows a batch", bucketing.max_rows),
    };
    let _ = writeln!(
        out,
        "\nbatch plan ({strategy}, max_rows {}, max_held_rows {}; rows in file order):",
        bucketing.max_rows, bucketing.max_held_rows
    );
    let padding = summary.padded_segments.saturating_sub(summary.segments);
    let _ = writeln!(
        out,
        "  {} batches, {} rows, {} segments + {} padding ({:.1}% of the padded total)",
        summary.batches,
        summary.rows,
        summary.segments,
        padding,
        100.0 * padding as f64 / summary.padded_segments.max(1) as f64
    );
    describe_shapes(bucketing, summary, out);
    let reasons: Vec<String> = summary
        .reasons
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "  why batches left (as _report.json names it): {}",
        reasons.join(", ")
    );
    match summary.oversized.iter().max() {
        None => out.push_str("  no row is over the budget\n"),
        Some(largest) => {
            let _ = writeln!(
                out,
                "  {} row(s) over the budget run alone, the largest {largest} segments",
                summary.oversized.len()
            );
        }
    }
}

/// The calibration's line at the largest batch the plan sends.
fn describe_memory(c: &SavedCalibration, largest: usize, out: &mut String) {
    let expected = c.fit.intercept + c.fit.slope * largest as f64;
    let _ = writeln!(
        out,
        "  expected peak reserved device memory: {:.0} MiB at the largest batch ({largest} segments), target {} MiB (calibration's fit {:.0} MiB + {:.3} MiB a segment)",
        expected / 1048576.0,
        c.target_bytes >> 20,
        c.fit.intercept / 1048576.0,
        c.fit.slope / 1048576.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_guessed_as_square_images_when_they_can_be() {
        assert_eq!(guess_shape(64), vec![1, 8, 8]);
        assert_eq!(guess_shape(3 * 32 * 32), vec![3, 32, 32]);
        assert_eq!(guess_shape(10), vec![10]);
    }

    #[test]
    fn log2_bins_split_at_powers_of_two() {
        let counts = SegmentCounts {
            counts: vec![1, 2, 3, 4, 7, 8, 0],
            null_rows: 1,
        };
        let bins = log2_bins(&[counts]);
        assert_eq!(bins, BTreeMap::from([(0, 1), (1, 2), (2, 2), (3, 1)]));
    }

    #[test]
    fn the_plan_counts_every_row_once_and_sends_oversized_rows_alone() {
        let bucketing = BucketingConfig {
            max_segments: 64,
            ..BucketingConfig::default()
        };
        let counts = SegmentCounts {
            counts: vec![10, 20, 30, 100, 5, 0],
            null_rows: 0,
        };
        let summary = plan(&bucketing, &[counts]).unwrap();
        assert_eq!(summary.rows, 5);
        assert_eq!(summary.segments, 165);
        assert_eq!(summary.oversized, vec![100]);
        assert_eq!(summary.largest_shape(), 100);
    }

    #[test]
    fn unpadded_plans_give_the_spread_of_batch_sizes_padded_ones_the_shapes() {
        let counts = SegmentCounts {
            counts: vec![40, 40, 30, 30, 30, 5],
            null_rows: 0,
        };
        let describe = |pad| {
            let mut bucketing = BucketingConfig {
                max_segments: 64,
                ..BucketingConfig::default()
            };
            bucketing.settle_for_device(pad);
            let mut out = String::new();
            describe_shapes(
                &bucketing,
                &plan(&bucketing, std::slice::from_ref(&counts)).unwrap(),
                &mut out,
            );
            out
        };
        assert!(
            describe(false).contains("min 30, median 45, max 60 segments"),
            "{}",
            describe(false)
        );
        assert!(describe(true).contains("padded shapes (segments x batches): 64 x"));
    }

    #[test]
    fn names_that_need_quoting_are_quoted() {
        for name in ["a \"b\"", "it's", "back\\slash", "plain"] {
            let table: toml::Table = toml::from_str(&format!("x = {}", quoted(name))).unwrap();
            assert_eq!(table["x"].as_str(), Some(name));
        }
    }
}
