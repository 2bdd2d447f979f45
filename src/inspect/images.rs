//! `inspect`'s section on a segments column of encoded images: formats and
//! sizes from the headers (no pixel decoded), and what the pipeline's
//! resize does to each size.

use std::fmt::Write as _;

use segpredict_core::exit::{Error, Failure, Result};

use crate::config::PipelineConfig;
use segpredict_reader::image::survey::{can_hold_images, describe_resize, ImageSurvey};
use segpredict_reader::image::{ImageInput, Target, DEFAULT_MAX_PIXELS};
use segpredict_reader::FileSurvey;

/// Sizes listed one by one, the most common first.
const LISTED_SIZES: usize = 10;

/// The pipeline's image settings and target, when it decodes `column` as images.
fn pipeline_images<'a>(
    pipeline: Option<&'a PipelineConfig>,
    column: &str,
) -> Option<(&'a ImageInput, Target)> {
    let segments = &pipeline?.readers.columns.segments;
    let image = segments
        .image
        .as_ref()
        .filter(|_| segments.name == column)?;
    Some((image, Target::of(&segments.shape, segments.dtype).ok()?))
}

/// The images section, when `column` holds encoded images (or the pipeline
/// says it does); nothing for raw segments.
pub fn describe_images(
    files: &[FileSurvey],
    column: &str,
    survey: &ImageSurvey,
    pipeline: Option<&PipelineConfig>,
    out: &mut String,
) -> Result<()> {
    // A column the files do not have stays missing on a retry.
    let data_type = files[0]
        .schema
        .field_with_name(column)
        .map_err(|e| Error::classified(Failure::Permanent, e))?
        .data_type();
    let configured = pipeline_images(pipeline, column);
    if !can_hold_images(data_type) {
        return Ok(());
    }
    if survey.formats.is_empty() && configured.is_none() {
        // Binary segments that are not images: raw values.
        return Ok(());
    }
    // A run's limit: the pipeline's, else the default a run would use.
    let max_pixels = configured.map_or(DEFAULT_MAX_PIXELS, |(input, _)| input.max_pixels);
    describe_formats(column, survey, max_pixels, out);
    describe_sizes(survey, configured, max_pixels, out);
    if configured.is_none() {
        out.push_str("  (decoded only with [readers.columns.segments.image] in the pipeline; pass --pipeline to see what its resize does)\n");
    }
    Ok(())
}

/// Images whose header says more pixels than `max_pixels`.
fn over(survey: &ImageSurvey, max_pixels: u64) -> u64 {
    let pixels = |(w, h): &(u32, u32)| u64::from(*w) * u64::from(*h);
    survey
        .sizes
        .iter()
        .filter(|(size, _)| pixels(size) > max_pixels)
        .map(|(_, n)| n)
        .sum()
}

fn describe_formats(column: &str, survey: &ImageSurvey, max_pixels: u64, out: &mut String) {
    let formats: Vec<String> = survey
        .formats
        .iter()
        .map(|(format, n)| format!("{format} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "\nimages (`{column}`, read from each header; none decoded):\n  {} images: {}",
        survey.images(),
        formats.join(", ")
    );
    if survey.missing > 0 {
        let _ = writeln!(
            out,
            "  {} image(s) without bytes: a run rejects their rows",
            survey.missing
        );
    }
    if let Some(why) = &survey.first_unreadable {
        let _ = writeln!(
            out,
            "  {} image(s) a run rejects by their header (bad_image), e.g. {why}",
            survey.unreadable
        );
    }
    let over = over(survey, max_pixels);
    if over > 0 {
        let _ = writeln!(
            out,
            "  {over} image(s) over max_pixels = {max_pixels}: a run rejects their rows (bad_image)"
        );
    }
}

fn describe_sizes(
    survey: &ImageSurvey,
    configured: Option<(&ImageInput, Target)>,
    max_pixels: u64,
    out: &mut String,
) {
    let mut sizes: Vec<(&(u32, u32), &u64)> = survey.sizes.iter().collect();
    sizes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let widest = sizes.first().map_or(1, |s| *s.1).max(1);
    let _ = write!(out, "  sizes (width x height, the most common first");
    if let Some((input, target)) = configured {
        let _ = write!(
            out,
            "; to {}x{}x{} {} by {}, filter {}",
            target.channels,
            target.height,
            target.width,
            format!("{:?}", target.dtype).to_lowercase(),
            input.resize,
            input.filter
        );
    }
    out.push_str("):\n");
    for (&(width, height), &n) in sizes.iter().take(LISTED_SIZES) {
        let bar = "#".repeat(((n as f64 / widest as f64) * 40.0).ceil() as usize);
        let size = format!("{width}x{height}");
        let _ = write!(out, "  {size:>13} {n:>9}  {bar}");
        match configured {
            _ if u64::from(width) * u64::from(height) > max_pixels => {
                let _ = write!(
                    out,
                    "  over max_pixels: a run rejects these rows (bad_image)"
                );
            }
            Some((input, target)) => {
                let _ = write!(out, "  {}", describe_resize(width, height, input, &target));
            }
            None => {}
        }
        out.push('\n');
    }
    if sizes.len() > LISTED_SIZES {
        let rest: u64 = sizes[LISTED_SIZES..].iter().map(|s| *s.1).sum();
        let _ = writeln!(
            out,
            "  ... {rest} more images in {} other sizes",
            sizes.len() - LISTED_SIZES
        );
    }
}
