//! `_report.svg`: device memory and segments per batch over the run, the
//! picture the seed's author drew by hand with print statements. It draws
//! the model worker's bounded sample of the last attempt's batches (every
//! batch up to 2048, evenly spaced ones beyond), not the records.

use plotters::coord::Shift;
use plotters::prelude::*;

use segpredict_core::message::{BatchRecord, MemoryStats};
use segpredict_core::stats::PlotSample;

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 360;

/// What drawing the SVG can fail with (its file is written through io).
pub type PlotError = DrawingAreaErrorKind<std::io::Error>;

/// One line of a panel: its legend, colour and (batch, value) points.
type Series = (&'static str, RGBColor, Vec<(usize, f64)>);

/// Draws the memory panel (CUDA runs only) above the segments panel.
pub fn svg(title: &str, sample: &PlotSample) -> Result<String, PlotError> {
    let mut text = String::new();
    draw(&mut text, title, sample)?;
    Ok(text)
}

fn draw(text: &mut String, title: &str, sample: &PlotSample) -> Result<(), PlotError> {
    let records = sample.points.as_slice();
    let (stride, n_batches) = (sample.stride as usize, sample.seen as usize);
    let has_memory = records.iter().any(|r| r.memory.is_some());
    let panels = if has_memory { 2 } else { 1 };
    let root =
        SVGBackend::with_string(text, (WIDTH, PANEL_HEIGHT * panels + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let areas = root.split_evenly((panels as usize, 1));
    let mut areas = areas.iter();
    if has_memory {
        if let Some(area) = areas.next() {
            let memory = vec![
                (
                    "peak reserved",
                    RED,
                    memory_series(records, stride, |m| m.reserved_peak),
                ),
                (
                    "peak allocated",
                    BLUE,
                    memory_series(records, stride, |m| m.allocated_peak),
                ),
            ];
            draw_panel(
                area,
                "device memory per batch (MiB)",
                "MiB",
                n_batches,
                memory,
            )?;
        }
    }
    if let Some(area) = areas.next() {
        let per_batch = |f: fn(&BatchRecord) -> usize| -> Vec<(usize, f64)> {
            records
                .iter()
                .enumerate()
                .map(|(i, r)| (i * stride, f(r) as f64))
                .collect()
        };
        let segments = vec![
            (
                "padded (what the model sees)",
                GREEN,
                per_batch(|r| r.padded_segments),
            ),
            ("real", BLACK, per_batch(|r| r.segments)),
        ];
        let caption = "segments per batch (model input's first dimension)";
        draw_panel(area, caption, "segments", n_batches, segments)?;
    }
    root.present()
}

fn memory_series(
    records: &[BatchRecord],
    stride: usize,
    field: fn(&MemoryStats) -> i64,
) -> Vec<(usize, f64)> {
    records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.memory
                .as_ref()
                .map(|m| (i * stride, field(m) as f64 / 1048576.0))
        })
        .collect()
}

fn draw_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    caption: &str,
    y_desc: &str,
    n_batches: usize,
    series: Vec<Series>,
) -> Result<(), PlotError> {
    let top = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .caption(caption, ("sans-serif", 16))
        .build_cartesian_2d(0..n_batches.max(1), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .y_desc(y_desc)
        .draw()?;
    for (label, colour, points) in series {
        chart
            .draw_series(LineSeries::new(points, colour))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}
