//! Timing loops and the statistics they report.
//!
//! p99 here is the 99th percentile of *samples*: for [`measure_batched`] a sample is the mean of
//! one batch of operations, so p99 smooths single-operation outliers by the batch size (the JSON
//! line says the batch size in its `batch` field). Percentiles use the nearest-rank method.

use super::clock::{ticks, ticks_to_ns};

/// Summary of one case, in nanoseconds per operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub median_ns: f64,
    /// 99th percentile of the samples (batch means for [`measure_batched`]).
    pub p99_ns: f64,
    pub min_ns: f64,
    /// Operations measured (warm-up excluded).
    pub iters: u64,
    /// Operations per sample: 1 for [`measure_single`].
    pub batch: u64,
    /// The samples, sorted: kept so that rounds of one case can be pooled.
    pub samples: Vec<f64>,
}

impl Stats {
    /// One summary of several rounds of the same case (same batch size): the median and p99
    /// of all their samples together, not a mean of the rounds' medians.
    pub fn pooled(rounds: &[Stats]) -> Stats {
        assert!(!rounds.is_empty(), "pooling no rounds");
        let batch = rounds[0].batch;
        assert!(
            rounds.iter().all(|r| r.batch == batch),
            "pooled rounds differ in batch size"
        );
        let samples = rounds.iter().flat_map(|r| r.samples.iter().copied()).collect();
        summarize(samples, batch)
    }
}

/// Times `iters` calls of `f` (rounded up to whole batches) in batches of `batch` calls, after a
/// warm-up of a tenth as many (at least one batch). `f` performs ONE operation, e.g. a round trip.
///
/// Each batch is timed with the cheap clock as a whole and gives one sample, its mean per call;
/// median and p99 are over those batch means, not over single calls.
pub fn measure_batched(iters: u64, batch: u64, mut f: impl FnMut()) -> Stats {
    assert!(
        iters > 0 && batch > 0,
        "measure_batched needs iters > 0 and batch > 0"
    );
    let batches = iters.div_ceil(batch);
    for _ in 0..(iters / 10).max(batch) {
        f();
    }
    let mut samples = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let t0 = ticks();
        for _ in 0..batch {
            f();
        }
        let t1 = ticks();
        samples.push(ticks_to_ns(t1.wrapping_sub(t0)) / batch as f64);
    }
    summarize(samples, batch)
}

/// Summarizes batches timed by the caller: each sample the mean per operation of one batch of
/// `batch` operations (as [`measure_batched`] takes them, for loops it cannot run, such as
/// awaited ones).
pub fn measure_batches(samples: Vec<f64>, batch: u64) -> Stats {
    assert!(!samples.is_empty(), "measure_batches needs at least one sample");
    summarize(samples, batch)
}

/// Summarizes operations measured one at a time; `samples` are in nanoseconds (convert a
/// millisecond measurement with `ms * 1e6`). Panics on an empty slice.
pub fn measure_single(samples: &[f64]) -> Stats {
    assert!(!samples.is_empty(), "measure_single needs at least one sample");
    summarize(samples.to_vec(), 1)
}

fn summarize(mut samples: Vec<f64>, batch: u64) -> Stats {
    samples.sort_by(f64::total_cmp);
    Stats {
        median_ns: median(&samples),
        p99_ns: percentile(&samples, 99.0),
        min_ns: samples[0],
        iters: samples.len() as u64 * batch,
        batch,
        samples,
    }
}

/// Median of sorted samples: the middle one, or the mean of the two middle ones.
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    assert!(n > 0, "median of no samples");
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The `p`-th percentile (0 < p ≤ 100) of sorted samples by nearest rank: the smallest sample
/// with at least `p`% of the samples at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    assert!(n > 0, "percentile of no samples");
    let rank = (p / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_to(n: u32) -> Vec<f64> {
        (1..=n).map(f64::from).collect()
    }

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[1.0, 2.0, 10.0]), 2.0);
        assert_eq!(median(&one_to(100)), 50.5);
    }

    #[test]
    fn p99_nearest_rank() {
        assert_eq!(percentile(&one_to(100), 99.0), 99.0);
        assert_eq!(percentile(&one_to(1000), 99.0), 990.0);
        assert_eq!(percentile(&one_to(10), 99.0), 10.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(percentile(&one_to(100), 50.0), 50.0);
    }

    #[test]
    fn pooled_rounds_summarize_all_samples() {
        let low = measure_single(&one_to(100));
        let high = measure_single(&(101..=200).map(f64::from).collect::<Vec<_>>());
        let both = Stats::pooled(&[high, low]);
        assert_eq!(both.median_ns, 100.5);
        assert_eq!(both.p99_ns, 198.0);
        assert_eq!(both.min_ns, 1.0);
        assert_eq!((both.iters, both.batch), (200, 1));
    }

    #[test]
    fn single_sorts_its_samples() {
        let mut v = one_to(200);
        v.reverse();
        let s = measure_single(&v);
        assert_eq!(s.median_ns, 100.5);
        assert_eq!(s.p99_ns, 198.0);
        assert_eq!(s.min_ns, 1.0);
        assert_eq!((s.iters, s.batch), (200, 1));
    }

    #[test]
    fn batched_counts_whole_batches() {
        let mut calls = 0u64;
        let s = measure_batched(95, 10, || calls += 1);
        assert_eq!((s.iters, s.batch), (100, 10));
        assert_eq!(calls, 100 + 10, "100 timed calls plus a warm-up of one batch");
        assert!(s.median_ns >= 0.0 && s.p99_ns >= s.median_ns && s.min_ns <= s.median_ns);
    }
}
