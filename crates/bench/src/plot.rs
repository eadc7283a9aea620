//! SVG charts drawn by the bench itself (plotters, SVG backend only, no font files).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(31, 119, 180),
    RGBColor(23, 190, 207),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(188, 189, 34),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn err<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow!("drawing the chart: {error:?}")
}

/// The latency distribution (CDF, log-scale latency) of every target, one panel per concurrency.
pub fn peers_cdf(
    path: &Path,
    results: &BTreeMap<u32, BTreeMap<&'static str, crate::peers::Measured>>,
) -> Result<()> {
    let panels = results.len().max(1);
    let root = SVGBackend::new(path, (620 * panels as u32, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((1, panels));
    for (panel, ((concurrency, per), area)) in results.iter().zip(areas.iter()).enumerate() {
        let all: Vec<f64> = per
            .values()
            .flat_map(|m| m.latencies_ms.iter().copied())
            .collect();
        let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01) * 0.9;
        let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 10.0) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("echo 1 KiB, concurrency {concurrency}: share of calls faster than x"),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(44)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("latency per call, ms (log scale)")
            .y_desc("fraction of calls")
            .draw()
            .map_err(err)?;
        for (i, id) in crate::peers::ALL.iter().enumerate() {
            let Some(m) = per.get(id) else { continue };
            let mut sorted = m.latencies_ms.to_vec();
            if sorted.is_empty() {
                continue;
            }
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len();
            let step = (n / 500).max(1);
            let points: Vec<(f64, f64)> = (0..n)
                .step_by(step)
                .chain(std::iter::once(n - 1))
                .map(|k| (sorted[k], (k + 1) as f64 / n as f64))
                .collect();
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(err)?
                .label(*id)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        // One legend (the colours are the same in every panel), where the first panel is empty.
        if panel == 0 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The recovery timeline of a restart storm: servers ready and fault-server processes alive.
pub fn storm_timeline(
    path: &Path,
    servers: usize,
    ready: &[(f64, usize)],
    alive: &[(f64, usize)],
) -> Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let x_max = ready
        .iter()
        .chain(alive.iter())
        .map(|p| p.0)
        .fold(0.1, f64::max)
        * 1.05;
    let y_max = (servers as f64 * 1.1).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("restart storm: kill -9 of all {servers} servers at t = 0"),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds after the kill")
        .y_desc("count")
        .draw()
        .map_err(err)?;
    type Series<'a> = (&'a str, &'a [(f64, usize)], RGBColor);
    let series: [Series; 2] = [
        ("servers ready (GET /status)", ready, PALETTE[6]),
        ("fault-server processes alive (/proc)", alive, PALETTE[3]),
    ];
    for (label, points, color) in series {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(t, n)| (t, n as f64)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One recovery as a timeline: each event at its time after the kill, labelled.
pub fn recovery_timeline(path: &Path, events: &[(f64, String)]) -> Result<()> {
    let root = SVGBackend::new(path, (900, 60 + 34 * events.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let x_max = events.iter().map(|e| e.0).fold(1.0, f64::max) * 1.35;
    let rows = events.len() as f64 + 1.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "one recovery after kill -9 (ms after the kill)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..x_max, 0.0..rows)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ms after the kill")
        .draw()
        .map_err(err)?;
    for (i, (t, label)) in events.iter().enumerate() {
        let y = rows - 1.0 - i as f64;
        let color = PALETTE[(i + 1) % PALETTE.len()];
        chart
            .draw_series(std::iter::once(Circle::new((*t, y), 5, color.filled())))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{t:.1} ms  {label}"),
                (*t + x_max * 0.01, y + 0.15),
                ("sans-serif", 13),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
