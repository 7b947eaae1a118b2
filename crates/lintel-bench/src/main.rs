//! `lintel-bench`: runs benchmark suites and reports one JSON object per case per line.
//!
//! `lintel-bench [--json FILE] [--quick] [--pin] [--plots DIR] [--markdown FILE [--readme FILE]]
//! [SUITE...]`; see `harness` for the API suites use, `markdown` for the generated document.
//! To add a suite, write `fn(&Config, &mut Report) -> anyhow::Result<()>` in the library and list
//! it in [`SUITES`]; to add a child process role, add an arm to [`run_child`].
#![forbid(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser;
use clap::builder::PossibleValuesParser;

use lintel_bench::harness::{self, CHILD_ARG, Config, PARENT_CPU, Report, Suite};
use lintel_bench::{
    awaited, baseline, bulk, door, echo, fs, lrpc, markdown, net, placement, recovery, scale, unix,
};

/// Every suite, by name, in the order a run without SUITE arguments takes them.
const SUITES: &[(&str, Suite)] = &[
    (baseline::SUITE, baseline::run),
    (door::SUITE, door::run),
    (placement::SUITE, placement::run),
    (lrpc::SUITE, lrpc::run),
    (bulk::SUITE, bulk::run),
    (echo::SUITE, echo::run),
    (fs::SUITE, fs::run),
    (unix::SUITE, unix::run),
    (recovery::SUITE, recovery::run),
    (awaited::SUITE, awaited::run),
    (net::SUITE, net::run),
    (scale::SUITE, scale::run),
];

/// The body of a child process re-executed as `__child ROLE ARGS..` (see `harness::spawn_self`).
fn run_child(role: &str, args: &[String]) -> anyhow::Result<()> {
    match role {
        baseline::ROLE => baseline::child(args),
        door::ROLE => door::child(args),
        door::INSTRUCTIONS_CLIENT | door::INSTRUCTIONS_SERVER => door::instructions_child(role, args),
        placement::ROLE => placement::child(args),
        lrpc::ROLE => lrpc::child(args),
        bulk::ROLE => bulk::child(args),
        bulk::UDS_ROLE => bulk::uds_child(args),
        echo::ROLE => echo::child(args),
        echo::iceoryx2::ROLE => echo::iceoryx2::child(args),
        fs::ROLE => fs::child(args),
        recovery::ROLE => recovery::child(args),
        awaited::ROLE => awaited::child(args),
        awaited::EVENTFD_ROLE => awaited::eventfd_child(args),
        awaited::TARPC_ROLE => awaited::tarpc_child(args),
        net::HOST_ROLE => net::host_child(args),
        net::ECHO_ROLE => net::echo_child(args),
        scale::ROLE => scale::child(args),
        scale::CALLER_ROLE => scale::caller_child(args),
        other => bail!("unknown child role {other:?}"),
    }
}

/// Benchmarks of lintel against its baselines, measured in the same run.
#[derive(Parser, Debug)]
#[command(name = "lintel-bench", version)]
struct Cli {
    /// Write one JSON object per case per line to FILE (created or truncated).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// About 10× fewer iterations: the whole program finishes in well under 30 s.
    #[arg(long)]
    quick: bool,
    /// Pin this process to CPU 0 and its child processes to CPU 1 (default: unpinned).
    #[arg(long)]
    pin: bool,
    /// Write SVG charts of the bulk suite (latency and throughput against size) and of the scale
    /// suite (latency and memory against callers and doors) into DIR.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Write the measurements document (markdown, stamped with commit, date, machine and this
    /// command line) to FILE: `docs/measurements.md`, never edited by hand.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Also rewrite the headline table between the markers in FILE (the README). Needs --markdown.
    #[arg(long, value_name = "FILE", requires = "markdown")]
    readme: Option<PathBuf>,
    /// Suites to run, in this order (default: all).
    #[arg(value_name = "SUITE", value_parser = PossibleValuesParser::new(SUITES.iter().map(|s| s.0)))]
    suites: Vec<String>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // A domain of the recovery suite's system (its supervisor starts them
    // from this binary).
    if lintel_system::is_domain(&args) {
        return lintel_system::run(&recovery::registry(), args);
    }
    if args.get(1).map(String::as_str) == Some(CHILD_ARG) {
        return child_main(&args[2..]);
    }
    match parent_main(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lintel-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn child_main(args: &[String]) -> ExitCode {
    let Some((role, rest)) = args.split_first() else {
        eprintln!("lintel-bench {CHILD_ARG}: missing role");
        return ExitCode::FAILURE;
    };
    match harness::init_child().and_then(|()| run_child(role, rest)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lintel-bench child {role}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the suites; `Ok(false)` if some suite failed (the others still run and are reported).
fn parent_main(cli: Cli) -> anyhow::Result<bool> {
    let cfg = Config {
        quick: cli.quick,
        pin: cli.pin,
    };
    if cfg.pin {
        harness::pin_self(PARENT_CPU)?;
    }
    eprintln!("clock: {}", harness::clock_description());
    // Stamped before the run: the tree as it was built and measured.
    let stamp = cli.markdown.as_ref().map(|_| stamp(&cli, &cfg));
    let selected: Vec<&(&str, Suite)> = if cli.suites.is_empty() {
        SUITES.iter().collect()
    } else {
        cli.suites
            .iter()
            .filter_map(|name| SUITES.iter().find(|s| s.0 == name))
            .collect()
    };
    let mut report = Report::with_progress();
    let mut all_ok = true;
    for (name, suite) in selected {
        eprintln!("suite {name}:");
        if let Some((fills, per_line)) = harness::probe_phase() {
            let far = per_line > f64::from(lintel_sys::distance::SMALL_FAR_ABOVE);
            report.push(
                harness::CaseResult::new("phase", &format!("at_{name}"), &fills)
                    .with_field("ticks_per_line", per_line)
                    .with_field("far", f64::from(u8::from(far)))
                    .with_note(format!(
                        "{}: a plain 4 KiB fill of lines the other CPU just read, {per_line:.1} \
                         ticks a line as the suite began",
                        if far { "far" } else { "near" }
                    )),
            );
        }
        let started = std::time::Instant::now();
        match suite(&cfg, &mut report) {
            Ok(()) => eprintln!("suite {name}: done in {:.1} s", started.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("suite {name} FAILED: {e:#}");
                all_ok = false;
            }
        }
    }
    print!("{}", report.table(&cfg));
    if let Some(path) = &cli.json {
        report.write_json(path).context("writing the JSON report")?;
    }
    let mut charts = Vec::new();
    if let Some(dir) = &cli.plots {
        if report
            .cases()
            .iter()
            .any(|c| c.suite == lintel_bench::bulk::SUITE)
        {
            charts = lintel_bench::plot::write_bulk_charts(&report, dir)?;
        }
        charts.extend(lintel_bench::plot::write_scale_charts(&report, dir)?);
        for p in &charts {
            eprintln!("chart: {}", p.display());
        }
    }
    if let (Some(path), Some(stamp)) = (&cli.markdown, &stamp) {
        write_markdown(&report, stamp, path, cli.readme.as_deref(), &charts)?;
    }
    Ok(all_ok)
}

/// The stamp of this run: mode, pinning and command line, and the files it will write (so
/// that regenerating them does not count as a change to the tree).
fn stamp(cli: &Cli, cfg: &Config) -> markdown::Stamp {
    let mode = format!(
        "{} mode, {}",
        if cfg.quick { "quick" } else { "full" },
        if cfg.pin { "pinned" } else { "unpinned" }
    );
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let outputs: Vec<&Path> = [
        cli.markdown.as_deref(),
        cli.readme.as_deref(),
        cli.plots.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    markdown::Stamp::here(&mode, &command, &outputs)
}

/// Renders the run's JSON lines into the measurements document at `path`, and the headline
/// table into `readme` if given; `charts` are linked relative to the document.
fn write_markdown(
    report: &Report,
    stamp: &markdown::Stamp,
    path: &Path,
    readme: Option<&Path>,
    charts: &[PathBuf],
) -> anyhow::Result<()> {
    let lines = markdown::parse_lines(&report.json_lines())?;
    let dir = path.parent().unwrap_or(Path::new(""));
    if !dir.as_os_str().is_empty() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let links: Vec<String> = charts.iter().map(|c| markdown::relative_link(dir, c)).collect();
    std::fs::write(path, markdown::render(&lines, stamp, &links))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("measurements: {}", path.display());
    if let Some(readme) = readme {
        let text =
            std::fs::read_to_string(readme).with_context(|| format!("reading {}", readme.display()))?;
        let text = markdown::replace_headline(&text, &lines, stamp)
            .with_context(|| format!("updating {}", readme.display()))?;
        std::fs::write(readme, text).with_context(|| format!("writing {}", readme.display()))?;
        eprintln!("headline: {}", readme.display());
    }
    Ok(())
}
