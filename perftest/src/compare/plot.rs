//! SVG plots of the comparison (plotters' SVG backend: text goes out as `<text>` elements
//! that the viewer renders, so no font files are read here): the headline number of each
//! benchmark against the message size, on log-log axes, MCAPI solid, raw libfabric dashed and
//! the MPI baseline dotted.
//! The scalar benchmarks have one size (8 bytes), so no plot: their numbers are in the
//! tables.

use super::{slug, Run};
use crate::cli::{Layer, Metric, Test};
use crate::error::{Error, Result};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::path::Path;

/// How a line is drawn: one style per layer, so that a provider keeps its colour.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stroke {
    Solid,
    Dashed,
    Dotted,
}

impl Stroke {
    /// Dash and gap lengths, in pixels.
    fn dashes(self) -> Option<(u32, u32)> {
        match self {
            Stroke::Solid => None,
            Stroke::Dashed => Some((8, 5)),
            Stroke::Dotted => Some((2, 4)),
        }
    }
}

/// One line of a plot.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    stroke: Stroke,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Writes `<test>.svg` (every provider) and `<test>-<provider>.svg` for each benchmark that
/// has results; returns the file names written.
pub fn write_all(dir: &Path, runs: &[Run]) -> Result<Vec<String>> {
    let mut files = Vec::new();
    let mut tests: Vec<Test> = Vec::new();
    for r in runs {
        if r.job.test.layer() != Layer::Scalars && !tests.contains(&r.job.test) {
            tests.push(r.job.test);
        }
    }
    for test in tests {
        let (what, unit) = match test.metric() {
            Metric::Latency => ("p50 latency", "p50 latency (us)"),
            Metric::Throughput => ("bandwidth", "bandwidth (MB/s)"),
        };
        let mut overview = Vec::new();
        let mut singles = Vec::new();
        let with_results = runs
            .iter()
            .filter(|r| r.job.test == test && !r.lines.is_empty());
        for (i, run) in with_results.enumerate() {
            let [mcapi, raw, mpi] = layers(run);
            let color = PALETTE[i % PALETTE.len()];
            let provider = run.provider();
            let name = format!("{test}-{}.svg", slug(provider));
            let title = format!("{test} over {provider}: {what}");
            let mpi_name = match &run.mpi {
                Some(m) if !m.transport.is_empty() => format!("MPI ({})", m.transport),
                _ => "MPI".into(),
            };
            let one = [
                Series {
                    name: "MCAPI".into(),
                    points: mcapi.clone(),
                    color: PALETTE[0],
                    stroke: Stroke::Solid,
                },
                Series {
                    name: "raw libfabric".into(),
                    points: raw.clone(),
                    color: PALETTE[1],
                    stroke: Stroke::Dashed,
                },
                Series {
                    name: mpi_name,
                    points: mpi.clone(),
                    color: PALETTE[2],
                    stroke: Stroke::Dotted,
                },
            ];
            if chart(&dir.join(&name), &title, unit, &one)? {
                singles.push(name);
            }
            for (layer, points, stroke) in [
                ("MCAPI", mcapi, Stroke::Solid),
                ("raw", raw, Stroke::Dashed),
                ("MPI", mpi, Stroke::Dotted),
            ] {
                overview.push(Series {
                    name: format!("{provider} {layer}"),
                    points,
                    color,
                    stroke,
                });
            }
        }
        let name = format!("{test}.svg");
        let title = if overview
            .iter()
            .any(|s| s.stroke == Stroke::Dotted && !s.points.is_empty())
        {
            format!("{test}: {what}, MCAPI (solid), raw libfabric (dashed), MPI (dotted)")
        } else {
            format!("{test}: {what}, MCAPI (solid) and raw libfabric (dashed)")
        };
        if chart(&dir.join(&name), &title, unit, &overview)? {
            files.push(name);
        }
        files.append(&mut singles);
    }
    Ok(files)
}

/// MCAPI's, raw's and MPI's (size, value) points of a run.
fn layers(run: &Run) -> [Vec<(f64, f64)>; 3] {
    let points = run.points();
    let pick = |f: fn(&super::Point) -> Option<f64>| {
        points
            .iter()
            .filter_map(|p| Some((p.size as f64, f(p)?)))
            .filter(|&(x, y)| x > 0.0 && y > 0.0)
            .collect::<Vec<_>>()
    };
    [pick(|p| p.mcapi), pick(|p| p.raw), pick(|p| p.mpi)]
}

fn plot_error(e: impl std::fmt::Display) -> Error {
    Error::failed(format!("drawing a plot: {e}"))
}

/// "8", "1k", "64k", "1m".
fn size_label(x: f64) -> String {
    let n = x.round() as u64;
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}m", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}k", n >> 10),
        n => n.to_string(),
    }
}

/// A value with a sensible number of digits for an axis label.
fn value_label(y: f64) -> String {
    match y.abs() {
        v if v >= 100.0 || (y - y.round()).abs() < 1e-9 => format!("{y:.0}"),
        v if v >= 1.0 => format!("{y:.1}"),
        _ => format!("{y:.2}"),
    }
}

/// Draws one log-log chart; false (and no file) when there is nothing to draw.
fn chart(path: &Path, title: &str, y_desc: &str, series: &[Series]) -> Result<bool> {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        return Ok(false);
    }
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 / 1.5..x1 * 1.5).log_scale().base(2.0),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| value_label(*y))
        .draw()
        .map_err(plot_error)?;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let style = s.color.stroke_width(2);
        let anno = match s.stroke.dashes() {
            Some((dash, gap)) => {
                chart.draw_series(DashedLineSeries::new(s.points.clone(), dash, gap, style))
            }
            None => chart.draw_series(LineSeries::new(s.points.clone(), style)),
        }
        .map_err(plot_error)?;
        anno.label(s.name.clone());
        match s.stroke.dashes() {
            Some((dash, gap)) => {
                anno.legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], dash, gap, style)
                });
            }
            None => {
                anno.legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
            }
        }
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, s.color.filled())),
            )
            .map_err(plot_error)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(size_label(8.0), "8");
        assert_eq!(size_label(65536.0), "64k");
        assert_eq!(size_label(1048576.0), "1m");
        assert_eq!(size_label(1536.0), "1536");
        assert_eq!(value_label(0.283), "0.28");
        assert_eq!(value_label(12.34), "12.3");
        assert_eq!(value_label(2500.0), "2500");
        assert_eq!(value_label(10.0), "10");
    }

    #[test]
    fn svg_without_fonts() {
        let dir = std::env::temp_dir().join(format!("perftest-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let s = [Series {
            name: "MCAPI".into(),
            points: vec![(8.0, 0.3), (64.0, 0.4), (65536.0, 9.0)],
            color: PALETTE[0],
            stroke: Stroke::Dashed,
        }];
        assert!(chart(&path, "title", "p50 latency (us)", &s).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains(">\n32k\n<") && svg.contains("MCAPI"), "{svg}");
        assert!(!chart(&dir.join("none.svg"), "t", "y", &[]).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
