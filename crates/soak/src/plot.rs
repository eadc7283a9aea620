//! An SVG chart of a run (plotters, SVG backend only, no font files): calls per second and
//! outcomes per window over time, with the chaos actions marked.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::WINDOW_SECS;
use crate::analysis::Report;

const PALETTE: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn err<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow!("drawing the chart: {error:?}")
}

/// Draw the chart of `report` to `path`.
pub fn write_svg(report: &Report, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, bottom) = root.split_vertically(380);
    let window = WINDOW_SECS as f64;
    let x_max = report
        .windows
        .last()
        .map_or(window, |w| w.t_s as f64 + window);

    // Calls per second, and successes per second.
    let y_max = report
        .windows
        .iter()
        .map(|w| w.calls_per_sec)
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!(
                "mcp-supervisor soak: calls/s per {WINDOW_SECS} s window (seed {})",
                report.seed
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("calls/s")
        .draw()
        .map_err(err)?;
    let mid = |t: u64| t as f64 + window / 2.0;
    chart
        .draw_series(LineSeries::new(
            report.windows.iter().map(|w| (mid(w.t_s), w.calls_per_sec)),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?
        .label("calls/s (ended)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            report
                .windows
                .iter()
                .map(|w| (mid(w.t_s), w.ok as f64 / window)),
            GREEN.stroke_width(2),
        ))
        .map_err(err)?
        .label("successes/s (started)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN.stroke_width(2)));
    chart
        .draw_series(
            report
                .chaos
                .iter()
                .map(|e| Circle::new((e.t_ms / 1000.0, y_max * 0.02), 3, BLACK.mix(0.6).filled())),
        )
        .map_err(err)?
        .label("chaos action")
        .legend(|(x, y)| Circle::new((x + 10, y), 3, BLACK.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;

    // Errors per window, by kind.
    let kinds: BTreeSet<&String> = report
        .windows
        .iter()
        .flat_map(|w| w.errors.keys())
        .collect();
    let e_max = report
        .windows
        .iter()
        .flat_map(|w| w.errors.values())
        .copied()
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.15;
    let mut chart = ChartBuilder::on(&bottom)
        .caption(
            format!("errors per {WINDOW_SECS} s window, by outcome (calls by start time)"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..e_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("calls")
        .draw()
        .map_err(err)?;
    for (i, kind) in kinds.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                report
                    .windows
                    .iter()
                    .map(|w| (mid(w.t_s), w.errors.get(*kind).copied().unwrap_or(0) as f64)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(kind.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(
            report
                .chaos
                .iter()
                .map(|e| Circle::new((e.t_ms / 1000.0, e_max * 0.02), 3, BLACK.mix(0.6).filled())),
        )
        .map_err(err)?;
    if !kinds.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
