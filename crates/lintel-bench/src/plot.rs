//! Charts of the `bulk` suite: latency and throughput against payload size, one line per path
//! and baseline, written as SVG with `plotters` (`lintel-bench --plots DIR`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use plotters::prelude::*;

use crate::bulk::SIZES;
use crate::harness::Report;

/// The lines of both charts: (label, suite, case prefix, case suffix, colour).
const SERIES: [(&str, &str, &str, &str, RGBColor); 8] = [
    (
        "echo, cross-process (copy path)",
        "bulk",
        "echo_",
        "",
        RGBColor(31, 119, 180),
    ),
    (
        "echo, co-located",
        "bulk",
        "echo_",
        "_colocated",
        RGBColor(174, 199, 232),
    ),
    (
        "loan handoff, cross-process",
        "bulk",
        "handoff_",
        "",
        RGBColor(44, 160, 44),
    ),
    (
        "sealed snapshot, cross-process",
        "bulk",
        "sealed_",
        "",
        RGBColor(214, 39, 40),
    ),
    (
        "sealed snapshot, co-located",
        "bulk",
        "sealed_",
        "_colocated",
        RGBColor(255, 152, 150),
    ),
    (
        "memcpy (one copy, one process)",
        "baseline",
        "memcpy_",
        "",
        RGBColor(127, 127, 127),
    ),
    (
        "echo over a Unix socket",
        "baseline",
        "uds_echo_",
        "",
        RGBColor(148, 103, 189),
    ),
    (
        "loan handoff, co-located",
        "bulk",
        "handoff_",
        "_colocated",
        RGBColor(152, 223, 138),
    ),
];

/// A line of a chart: its label, colour and (bytes, median ns) points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// One series: (bytes, median ns) for each size the report has.
fn points(report: &Report, suite: &str, prefix: &str, suffix: &str) -> Vec<(f64, f64)> {
    SIZES
        .iter()
        .filter_map(|(name, bytes)| {
            let r = report.lookup(suite, &format!("{prefix}{name}{suffix}"))?;
            (r.median_ns > 0.0).then_some((*bytes as f64, r.median_ns))
        })
        .collect()
}

/// Writes `bulk-latency.svg` and `bulk-throughput.svg` into `dir`; the paths written.
pub fn write_bulk_charts(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let series: Vec<Series<'_>> = SERIES
        .iter()
        .map(|(label, suite, pre, suf, colour)| (*label, *colour, points(report, suite, pre, suf)))
        .filter(|s| !s.2.is_empty())
        .collect();
    ensure!(!series.is_empty(), "the report has no bulk cases to plot");
    let latency = dir.join("bulk-latency.svg");
    chart(
        &latency,
        "Latency against payload size (median)",
        "latency (µs)",
        SeriesLabelPosition::UpperLeft,
        &series,
        |_, ns| ns / 1e3,
    )?;
    let throughput = dir.join("bulk-throughput.svg");
    let moving: Vec<_> = series
        .iter()
        .filter(|s| !s.0.contains("handoff") && !s.0.contains("sealed"))
        .cloned()
        .collect();
    chart(
        &throughput,
        "Throughput of the copying paths against payload size (median)",
        "GB/s (payload bytes per second, each way)",
        SeriesLabelPosition::LowerRight,
        &moving,
        |b, ns| b / ns,
    )?;
    Ok(vec![latency, throughput])
}

/// A log-log chart of `y(bytes, median_ns)` against bytes, one line per series.
fn chart(
    path: &Path,
    title: &str,
    y_label: &str,
    legend: SeriesLabelPosition,
    series: &[Series<'_>],
    y: impl Fn(f64, f64) -> f64,
) -> anyhow::Result<()> {
    let series: Vec<Series<'_>> = series
        .iter()
        .map(|(label, colour, pts)| {
            (
                *label,
                *colour,
                pts.iter().map(|&(b, ns)| (b, y(b, ns))).collect(),
            )
        })
        .collect();
    let axes = Axes {
        x: "payload size",
        y: y_label,
        x_keys: SIZES.iter().map(|s| s.1 as f64).collect(),
        x_tick: size_label,
    };
    log_chart(path, title, &axes, legend, &series)
}

/// A chart's axes: their labels, the x values that get a tick, and how a tick reads.
struct Axes<'a> {
    x: &'a str,
    y: &'a str,
    x_keys: Vec<f64>,
    x_tick: fn(f64) -> String,
}

/// A log-log chart of `series` (points as drawn), one line per series, written to `path`.
fn log_chart(
    path: &Path,
    title: &str,
    axes: &Axes<'_>,
    legend: SeriesLabelPosition,
    series: &[Series<'_>],
) -> anyhow::Result<()> {
    let (y0, y1) = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (x0, x1) = axes
        .x_keys
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x0 / 1.5..x1 * 1.5)
                .log_scale()
                .with_key_points(axes.x_keys.clone()),
            (y0 / 2.0..y1 * 2.0).log_scale(),
        )?;
    c.configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&|v| (axes.x_tick)(*v))
        .y_label_formatter(&|v| number_label(*v))
        .draw()?;
    for (label, colour, pts) in series {
        let colour = *colour;
        c.draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        c.draw_series(pts.iter().map(|p| Circle::new(*p, 3, colour.filled())))?;
    }
    c.configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A tick value with as many digits as it needs.
fn number_label(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 1.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

/// A count: `1`, `256`, `1000000`.
fn count_label(v: f64) -> String {
    format!("{v:.0}")
}

/// `4 KiB`, `1 MiB`, …
fn size_label(b: f64) -> String {
    match b {
        b if b >= (1u64 << 30) as f64 => format!("{:.0} GiB", b / (1u64 << 30) as f64),
        b if b >= (1 << 20) as f64 => format!("{:.0} MiB", b / (1 << 20) as f64),
        b if b >= 1024.0 => format!("{:.0} KiB", b / 1024.0),
        b => format!("{b:.0} B"),
    }
}

/// Writes the `scale` suite's charts into `dir` (none if the report has no `scale` cases):
/// latency and memory against callers, and against doors held. The paths written.
pub fn write_scale_charts(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let counted = |prefix: &str| -> Vec<(f64, &crate::harness::CaseResult)> {
        report
            .cases()
            .iter()
            .filter(|c| c.suite == crate::scale::SUITE)
            .filter_map(|c| Some((c.case.strip_prefix(prefix)?.parse::<f64>().ok()?, c)))
            .collect()
    };
    let field = |c: &crate::harness::CaseResult, name: &str| {
        c.fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    };
    let (callers, doors) = (counted("callers_"), counted("doors_"));
    if callers.is_empty() && doors.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let blue = RGBColor(31, 119, 180);
    let red = RGBColor(214, 39, 40);
    let line = |pts: &[(f64, &crate::harness::CaseResult)],
                y: &dyn Fn(&crate::harness::CaseResult) -> Option<f64>| {
        pts.iter()
            .filter_map(|(x, c)| y(c).filter(|v| *v > 0.0).map(|v| (*x, v)))
            .collect::<Vec<_>>()
    };
    let mut written = Vec::new();
    let mut draw =
        |name: &str, title: &str, x: &str, y: &str, series: Vec<Series<'_>>| -> anyhow::Result<()> {
            let series: Vec<Series<'_>> = series.into_iter().filter(|s| !s.2.is_empty()).collect();
            if series.is_empty() {
                return Ok(());
            }
            let path = dir.join(name);
            let mut keys: Vec<f64> = series.iter().flat_map(|s| s.2.iter().map(|p| p.0)).collect();
            keys.sort_by(f64::total_cmp);
            keys.dedup();
            let axes = Axes {
                x,
                y,
                x_keys: keys,
                x_tick: count_label,
            };
            log_chart(&path, title, &axes, SeriesLabelPosition::UpperLeft, &series)?;
            written.push(path);
            Ok(())
        };
    draw(
        "scale-callers-latency.svg",
        "A null call's latency against callers of one server",
        "caller processes",
        "latency (µs)",
        vec![
            ("median", blue, line(&callers, &|c| Some(c.median_ns / 1e3))),
            ("p99", red, line(&callers, &|c| Some(c.p99_ns / 1e3))),
        ],
    )?;
    draw(
        "scale-callers-memory.svg",
        "Memory against callers of one server (PSS)",
        "caller processes",
        "KiB",
        vec![
            ("server", blue, line(&callers, &|c| field(c, "server_pss_kib"))),
            (
                "one caller (median)",
                red,
                line(&callers, &|c| field(c, "caller_pss_kib")),
            ),
        ],
    )?;
    draw(
        "scale-doors-latency.svg",
        "A null call's latency against doors held",
        "doors held",
        "latency (µs)",
        vec![
            ("median", blue, line(&doors, &|c| Some(c.median_ns / 1e3))),
            ("p99", red, line(&doors, &|c| Some(c.p99_ns / 1e3))),
        ],
    )?;
    draw(
        "scale-doors-memory.svg",
        "Memory grown against doors held (PSS)",
        "doors held",
        "KiB",
        vec![
            (
                "server (exports them)",
                blue,
                line(&doors, &|c| field(c, "server_pss_kib")),
            ),
            ("holder", red, line(&doors, &|c| field(c, "holder_pss_kib"))),
        ],
    )?;
    Ok(written)
}
