//! Charts as SVG files (plotters' SVG backend: text stays text, no fonts or image libraries):
//! cumulative distributions of a latency per series, and one bar per series of a measure.

use anyhow::{anyhow, Context};
use plotters::prelude::*;
use std::path::Path;

/// Width and height of every chart, in SVG pixels.
const SIZE: (u32, u32) = (900, 560);
/// Series colours, in order (a palette that stays apart in print and for common colour blindness).
const COLOURS: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
];

fn failed(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("{}: cannot draw the chart: {e}", path.display())
}

/// The empirical CDF of each series' values (`x` in `unit`), one line each.
pub fn cdf(
    path: &Path,
    title: &str,
    unit: &str,
    series: &[(&str, Vec<f64>)],
) -> anyhow::Result<()> {
    let mut max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max);
    if max <= 0.0 {
        max = 1.0;
    }
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..max * 1.02, 0.0..1.0)
        .map_err(|e| failed(path, e))?;
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_desc("fraction of requests")
        .draw()
        .map_err(|e| failed(path, e))?;
    for (i, (name, values)) in series.iter().enumerate() {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len().max(1) as f64;
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                sorted
                    .iter()
                    .enumerate()
                    .map(|(k, &x)| (x, (k + 1) as f64 / n)),
                colour.stroke_width(2),
            ))
            .map_err(|e| failed(path, e))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| failed(path, e))?;
    root.present().map_err(|e| failed(path, e))?;
    Ok(())
}

/// One bar per series (name, value), each named under its bar.
pub fn bars(path: &Path, title: &str, unit: &str, bars: &[(&str, f64)]) -> anyhow::Result<()> {
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(path, e))?;
    let n = bars.len().max(1) as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        // A segmented range holds its end too: `0..n − 1` is n bars.
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..max * 1.15)
        .map_err(|e| failed(path, e))?;
    let names: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc(unit)
        .draw()
        .map_err(|e| failed(path, e))?;
    for (i, (_, value)) in (0..).zip(bars) {
        let colour = COLOURS[i as usize % COLOURS.len()];
        chart
            .draw_series(std::iter::once(
                Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *value),
                    ],
                    colour.filled(),
                )
                .into_dyn(),
            ))
            .map_err(|e| failed(path, e))?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{value:.1}"),
                (SegmentValue::CenterOf(i), value + max * 0.03),
                ("sans-serif", 16),
            )))
            .map_err(|e| failed(path, e))?;
    }
    root.present().map_err(|e| failed(path, e))?;
    Ok(())
}

/// Makes `dir` (and its parents) for charts.
pub fn ensure_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_files_naming_their_series() {
        let dir = std::env::temp_dir().join(format!("flashlane-plot-{}", std::process::id()));
        ensure_dir(&dir).unwrap();
        let cdf_path = dir.join("cdf.svg");
        cdf(
            &cdf_path,
            "TTFT",
            "ms",
            &[
                ("flashlane", vec![1.0, 5.0, 3.0]),
                ("equal", vec![2.0, 9.0]),
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&cdf_path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("flashlane") && svg.contains("equal"));
        let bars_path = dir.join("bars.svg");
        bars(
            &bars_path,
            "streams per GiB",
            "streams",
            &[("a", 3.0), ("b", 0.0)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&bars_path).unwrap();
        assert!(svg.contains("3.0") && svg.contains("<rect"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
