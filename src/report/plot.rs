//! `_report.svg`: device memory and segments per batch over the run, the
//! picture the seed's author drew by hand with print statements.

use std::path::Path;

use plotters::prelude::*;

use crate::worker::BatchRecord;

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 360;

/// Draws the memory panel (CUDA runs only) above the segments panel.
pub fn write_svg(path: &Path, title: &str, records: &[BatchRecord]) -> Result<(), String> {
    let has_memory = records.iter().any(|r| r.memory.is_some());
    let panels = if has_memory { 2 } else { 1 };
    let root = SVGBackend::new(path, (WIDTH, PANEL_HEIGHT * panels + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    let areas = root.split_evenly((panels as usize, 1));
    let mut areas = areas.iter();
    if has_memory {
        if let Some(area) = areas.next() {
            draw_memory(area, records)?;
        }
    }
    if let Some(area) = areas.next() {
        draw_segments(area, records)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / 1048576.0
}

fn draw_memory<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    records: &[BatchRecord],
) -> Result<(), String> {
    let series = |f: fn(&crate::worker::MemoryStats) -> i64| -> Vec<(usize, f64)> {
        records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.memory.as_ref().map(|m| (i, mib(f(m)))))
            .collect()
    };
    let reserved = series(|m| m.reserved_peak);
    let allocated = series(|m| m.allocated_peak);
    let top = reserved.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .caption("device memory per batch (MiB)", ("sans-serif", 16))
        .build_cartesian_2d(0..records.len().max(1), 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .y_desc("MiB")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(reserved, &RED))
        .map_err(|e| e.to_string())?
        .label("peak reserved")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .draw_series(LineSeries::new(allocated, &BLUE))
        .map_err(|e| e.to_string())?
        .label("peak allocated")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

fn draw_segments<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    records: &[BatchRecord],
) -> Result<(), String> {
    let padded: Vec<(usize, f64)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.padded_segments as f64))
        .collect();
    let real: Vec<(usize, f64)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.segments as f64))
        .collect();
    let top = padded.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .caption(
            "segments per batch (model input's first dimension)",
            ("sans-serif", 16),
        )
        .build_cartesian_2d(0..records.len().max(1), 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("batch")
        .y_desc("segments")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(padded, &GREEN))
        .map_err(|e| e.to_string())?
        .label("padded (what the model sees)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
    chart
        .draw_series(LineSeries::new(real, &BLACK))
        .map_err(|e| e.to_string())?
        .label("real")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
