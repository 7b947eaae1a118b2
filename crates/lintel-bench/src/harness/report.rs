//! Results of a run: one [`CaseResult`] per case, written as JSON lines and as a table.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use super::{Config, Stats, clock_description};

/// What p99 means in every report (also printed under the table).
pub const P99_DEFINITION: &str = "p99 is the 99th percentile (nearest rank) of samples, a sample \
     being the mean of one batch of `batch` operations timed together; batch = 1 means single \
     operations";

/// One measured case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    pub suite: String,
    pub case: String,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub iters: u64,
    /// Operations per sample (see [`P99_DEFINITION`]).
    pub batch: u64,
    /// `(suite, case)` to compare to: the report shows median / that case's median.
    pub ref_case: Option<(String, String)>,
    pub note: Option<String>,
    /// Case-specific numbers, written as extra JSON fields after the contract ones.
    pub fields: Vec<(String, f64)>,
}

impl CaseResult {
    pub fn new(suite: &str, case: &str, stats: &Stats) -> Self {
        CaseResult {
            suite: suite.to_string(),
            case: case.to_string(),
            median_ns: stats.median_ns,
            p99_ns: stats.p99_ns,
            iters: stats.iters,
            batch: stats.batch,
            ref_case: None,
            note: None,
            fields: Vec::new(),
        }
    }

    /// Adds a number written as the JSON field `name`.
    pub fn with_field(mut self, name: &str, value: f64) -> Self {
        self.fields.push((name.to_string(), value));
        self
    }

    /// Compares this case's median to the median of `suite/case` (which may run later).
    pub fn compare_to(mut self, suite: &str, case: &str) -> Self {
        self.ref_case = Some((suite.to_string(), case.to_string()));
        self
    }

    /// Adds a free-form note (written as the JSON `note` field).
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// The JSON line: the contract fields first, then optional extras.
#[derive(Serialize)]
struct JsonLine<'a> {
    suite: &'a str,
    case: &'a str,
    median_ns: f64,
    p99_ns: f64,
    iters: u64,
    batch: u64,
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    #[serde(flatten)]
    fields: std::collections::BTreeMap<&'a str, f64>,
}

/// All cases of a run, in the order they were pushed.
#[derive(Debug, Default)]
pub struct Report {
    cases: Vec<CaseResult>,
    progress: bool,
}

impl Report {
    /// An empty report that prints nothing until asked.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty report that also prints each case to stderr as it is pushed.
    pub fn with_progress() -> Self {
        Report {
            cases: Vec::new(),
            progress: true,
        }
    }

    pub fn push(&mut self, result: CaseResult) {
        if self.progress {
            eprintln!(
                "  {}/{}: median {}, p99 {}",
                result.suite,
                result.case,
                fmt_ns(result.median_ns),
                fmt_ns(result.p99_ns)
            );
        }
        self.cases.push(result);
    }

    pub fn lookup(&self, suite: &str, case: &str) -> Option<&CaseResult> {
        self.cases.iter().find(|c| c.suite == suite && c.case == case)
    }

    pub fn cases(&self) -> &[CaseResult] {
        &self.cases
    }

    /// `result`'s median over its reference case's median, if both exist.
    pub fn ratio(&self, result: &CaseResult) -> Option<f64> {
        let (suite, case) = result.ref_case.as_ref()?;
        let reference = self.lookup(suite, case)?;
        (reference.median_ns > 0.0).then(|| result.median_ns / reference.median_ns)
    }

    /// One JSON object per case, one per line.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for c in &self.cases {
            let line = JsonLine {
                suite: &c.suite,
                case: &c.case,
                median_ns: round_to(c.median_ns, 1),
                p99_ns: round_to(c.p99_ns, 1),
                iters: c.iters,
                batch: c.batch,
                reference: c.ref_case.as_ref().map(|(s, k)| format!("{s}/{k}")),
                ratio: self.ratio(c).map(significant),
                note: c.note.as_deref(),
                fields: c.fields.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
            };
            out.push_str(&serde_json::to_string(&line).expect("a JsonLine always serializes"));
            out.push('\n');
        }
        out
    }

    /// Writes [`Report::json_lines`] to `path`, creating or truncating it.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let mut file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        file.write_all(self.json_lines().as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The human-readable table: a header saying pinning and clock, aligned columns, then notes.
    pub fn table(&self, cfg: &Config) -> String {
        let header = ["suite", "case", "median", "p99", "iters", "batch", "ratio"];
        let rows: Vec<[String; 7]> = self
            .cases
            .iter()
            .map(|c| {
                [
                    c.suite.clone(),
                    c.case.clone(),
                    fmt_ns(c.median_ns),
                    fmt_ns(c.p99_ns),
                    c.iters.to_string(),
                    c.batch.to_string(),
                    self.ratio_text(c),
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let pinning = if cfg.pin {
            format!(
                "pinned: parent cpu {}, children cpu {}",
                super::PARENT_CPU,
                super::CHILD_CPU
            )
        } else {
            "unpinned".to_string()
        };
        let mode = if cfg.quick { "quick" } else { "full" };
        let mut out = format!(
            "lintel-bench: {pinning}; {mode} mode; clock {}\n",
            clock_description()
        );
        let header = header.map(str::to_string);
        for row in std::iter::once(&header).chain(&rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
                // Left-align text columns, right-align numbers; the ratio column is last, unpadded.
                match i {
                    0 | 1 => write!(line, "{cell:<w$}  "),
                    6 => write!(line, "{cell}"),
                    _ => write!(line, "{cell:>w$}  "),
                }
                .expect("writing to a String cannot fail");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        for c in self.cases.iter().filter(|c| c.note.is_some()) {
            let note = c.note.as_deref().unwrap_or_default();
            writeln!(out, "note {}/{}: {note}", c.suite, c.case).expect("String write");
        }
        writeln!(out, "{P99_DEFINITION}.").expect("String write");
        out
    }

    fn ratio_text(&self, c: &CaseResult) -> String {
        let Some((suite, case)) = &c.ref_case else {
            return String::new();
        };
        let name = if *suite == c.suite {
            case.clone()
        } else {
            format!("{suite}/{case}")
        };
        match self.ratio(c) {
            // A ratio far below one reads better turned over.
            Some(r) if r > 0.0 && r < 0.1 => format!("{:.1}× faster than {name}", 1.0 / r),
            Some(r) => format!("{r:.2}× {name}"),
            None => format!("? ({name} not measured)"),
        }
    }
}

/// `ns` with a unit chosen for readability: "240.5 ns", "12.31 µs", "4.20 ms".
pub fn fmt_ns(ns: f64) -> String {
    match ns {
        n if n < 1e3 => format!("{n:.1} ns"),
        n if n < 1e6 => format!("{:.2} µs", n / 1e3),
        n if n < 1e9 => format!("{:.2} ms", n / 1e6),
        n => format!("{:.2} s", n / 1e9),
    }
}

/// `x` rounded to `decimals` places (divided last, so it prints short: 15419.9, not 15419.900000000001).
/// `x` to four significant digits: a ratio of 0.0028 keeps enough to be
/// turned over (357×) without rounding to 0.003 (333×).
fn significant(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let decimals = 3 - x.abs().log10().floor() as i32;
    round_to(x, decimals)
}

fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn stats(median_ns: f64) -> Stats {
        Stats {
            median_ns,
            p99_ns: 410.0,
            min_ns: 200.0,
            iters: 200_000,
            batch: 100,
            samples: Vec::new(),
        }
    }

    fn sample_report() -> Report {
        let mut r = Report::new();
        r.push(CaseResult::new("baseline", "spin_pingpong", &stats(240.5)));
        r.push(
            CaseResult::new("door", "null_cross_fast", &stats(481.0))
                .compare_to("baseline", "spin_pingpong")
                .with_note("hello"),
        );
        r
    }

    #[test]
    fn a_small_ratio_keeps_enough_digits_to_be_turned_over() {
        let mut r = Report::new();
        r.push(CaseResult::new("a", "slow", &stats(2_230_000.0)));
        r.push(CaseResult::new("a", "fast", &stats(6_170.0)).compare_to("a", "slow"));
        let line = r.json_lines().lines().nth(1).unwrap().to_owned();
        let ratio = serde_json::from_str::<Value>(&line).unwrap()["ratio"]
            .as_f64()
            .unwrap();
        assert!((1.0 / ratio - 2_230_000.0 / 6_170.0).abs() < 0.5, "{ratio}");
        assert_eq!(significant(1.16159), 1.162);
        assert_eq!(significant(0.0), 0.0);
    }

    #[test]
    fn json_line_has_contract_fields_first() {
        let text = sample_report().json_lines();
        let first = text.lines().next().unwrap();
        assert!(first.starts_with(
            r#"{"suite":"baseline","case":"spin_pingpong","median_ns":240.5,"p99_ns":410.0,"iters":200000"#
        ));
    }

    #[test]
    fn json_lines_parse_back_with_types() {
        let text = sample_report().json_lines();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        for v in &lines {
            let o = v.as_object().unwrap();
            assert!(o["suite"].is_string() && o["case"].is_string());
            assert!(o["median_ns"].is_f64() && o["p99_ns"].is_f64());
            assert!(o["iters"].is_u64());
        }
        let door = &lines[1];
        assert_eq!(door["suite"], "door");
        assert_eq!(door["median_ns"].as_f64(), Some(481.0));
        assert_eq!(door["iters"].as_u64(), Some(200_000));
        assert_eq!(door["ref"], "baseline/spin_pingpong");
        assert_eq!(door["ratio"].as_f64(), Some(2.0));
        assert_eq!(door["note"], "hello");
        let mut r = Report::new();
        r.push(CaseResult::new("s", "c", &stats(15_419.900_000_000_001)));
        assert!(r.json_lines().contains(r#""median_ns":15419.9,"#));
        assert!(lines[0].get("note").is_none() && lines[0].get("ratio").is_none());
    }

    #[test]
    fn lookup_and_table_ratio() {
        let r = sample_report();
        assert_eq!(r.lookup("door", "null_cross_fast").unwrap().median_ns, 481.0);
        assert!(r.lookup("door", "nope").is_none());
        let table = r.table(&Config::default());
        assert!(table.contains("2.00× baseline/spin_pingpong"), "{table}");
        assert!(table.contains("unpinned"));
    }

    #[test]
    fn time_formatting() {
        assert_eq!(fmt_ns(240.54), "240.5 ns");
        assert_eq!(fmt_ns(12_310.0), "12.31 µs");
        assert_eq!(fmt_ns(4_200_000.0), "4.20 ms");
    }
}
