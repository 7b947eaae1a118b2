//! Call statistics (Spring Tables 2–4): how many calls this domain made on
//! each path, how big their arguments and results were, how many carried
//! doors, and how many calls it served for other domains.
//!
//! Counting must not cost the call path a shared cache line or a lookup:
//! each caller's slot lease and each server worker owns a block of counters
//! (one writer: a relaxed load and store, no locked instruction); co-located
//! calls count in a block of the calling thread's. [`snapshot`] sums every
//! block. Blocks outlive their owners (the next owner takes over a released
//! one), so no count is lost.
//!
//! ```
//! use lintel::{Door, Reply, Request};
//! let d = Door::create(0, |_: Request<'_>, _: &mut Reply| Ok(()));
//! let before = lintel::stats::snapshot();
//! d.call_bytes(b"hi").unwrap();
//! let after = lintel::stats::snapshot();
//! let p = lintel::stats::Path::Colocated as usize;
//! assert_eq!(after.calls[p] - before.calls[p], 1);
//! ```

use crate::state::leaked::Leaked;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The path a call took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Served in the caller's own domain: a direct call.
    Colocated = 0,
    /// Across domains, ≤ 16 bytes each way and no doors.
    Fast = 1,
    /// Across domains, larger data or doors.
    Vanilla = 2,
}

/// Number of paths.
pub const PATHS: usize = 3;
/// Path names, indexed by `Path as usize`.
pub const PATH_NAMES: [&str; PATHS] = ["colocated", "fast", "vanilla"];
/// Number of size buckets.
pub const BUCKETS: usize = 5;
/// Size bucket labels (bytes): Spring's Table 3 ranges.
pub const BUCKET_NAMES: [&str; BUCKETS] = ["0-16", "16-100", "100-1000", "1000-4000", "4000+"];

/// The largest size in the first bucket.
pub const BUCKET_0_MAX: usize = 16;

/// Number of size classes in which sleeps are counted.
pub const CLASSES: usize = 4;
/// Size class labels (bytes of arguments): how long a call's copies take,
/// and so whether its caller may wait for it spinning.
pub const CLASS_NAMES: [&str; CLASSES] = ["0-4000", "4000-64K", "64K-1M", "1M+"];

/// The largest size in the first class: the top of Spring's fourth bucket,
/// so that class's calls are counted by the buckets already.
const CLASS_0_MAX: usize = 4000;

/// The size class of a call with `len` bytes of arguments.
#[inline]
pub fn class(len: usize) -> usize {
    match len {
        0..=CLASS_0_MAX => 0,
        4001..=0xFFFF => 1,
        0x1_0000..=0xF_FFFF => 2,
        _ => 3,
    }
}

/// The size bucket of `len` bytes.
#[inline]
pub fn bucket(len: usize) -> usize {
    match len {
        0..=BUCKET_0_MAX => 0,
        17..=100 => 1,
        101..=1000 => 2,
        1001..=4000 => 3,
        _ => 4,
    }
}

/// Counts for one domain (or their difference between two snapshots).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStats {
    /// Calls made, per path.
    pub calls: [u64; PATHS],
    /// Calls made that returned an error, per path.
    pub failed: [u64; PATHS],
    /// Argument sizes of calls made: `[path][bucket]`.
    pub args: [[u64; BUCKETS]; PATHS],
    /// Result sizes of calls that returned: `[path][bucket]`.
    pub results: [[u64; BUCKETS]; PATHS],
    /// Calls that passed doors, per path.
    pub calls_with_doors: [u64; PATHS],
    /// Returns that carried doors, per path.
    pub returns_with_doors: [u64; PATHS],
    /// Calls this domain served for other domains, per path.
    pub served: [u64; PATHS],
    /// Calls made to other domains, per size class of their arguments
    /// ([`class`]).
    pub sized: [u64; CLASSES],
    /// Of those, the calls whose caller slept for the reply (rather than
    /// spinning until it came), per size class.
    pub slept: [u64; CLASSES],
}

impl CallStats {
    /// Encode for sending through a door.
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Decode what [`CallStats::to_bytes`] made; `None` for anything else.
    pub fn from_bytes(b: &[u8]) -> Option<CallStats> {
        postcard::from_bytes(b).ok()
    }

    /// Counts since `earlier` (saturating, so a restarted domain shows zeros).
    pub fn since(&self, earlier: &CallStats) -> CallStats {
        let mut out = self.clone();
        let sub = |a: &mut [u64], b: &[u64]| a.iter_mut().zip(b).for_each(|(x, y)| *x = x.saturating_sub(*y));
        sub(&mut out.calls, &earlier.calls);
        sub(&mut out.failed, &earlier.failed);
        sub(&mut out.calls_with_doors, &earlier.calls_with_doors);
        sub(&mut out.returns_with_doors, &earlier.returns_with_doors);
        sub(&mut out.served, &earlier.served);
        sub(&mut out.sized, &earlier.sized);
        sub(&mut out.slept, &earlier.slept);
        for p in 0..PATHS {
            sub(&mut out.args[p], &earlier.args[p]);
            sub(&mut out.results[p], &earlier.results[p]);
        }
        out
    }
}

impl std::fmt::Display for CallStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: u64 = self.calls.iter().sum();
        let pct = |n: u64| {
            if total == 0 {
                0.0
            } else {
                100.0 * n as f64 / total as f64
            }
        };
        writeln!(
            f,
            "{:<10} {:>10} {:>6} {:>8} {:>10} {:>10} {:>9}",
            "path", "calls", "%", "failed", "w/ doors", "ret doors", "served"
        )?;
        for (p, name) in PATH_NAMES.iter().enumerate() {
            writeln!(
                f,
                "{:<10} {:>10} {:>5.1}% {:>8} {:>10} {:>10} {:>9}",
                name,
                self.calls[p],
                pct(self.calls[p]),
                self.failed[p],
                self.calls_with_doors[p],
                self.returns_with_doors[p],
                self.served[p]
            )?;
        }
        write!(f, "{:<18}", "bytes")?;
        for b in BUCKET_NAMES {
            write!(f, " {b:>10}")?;
        }
        writeln!(f)?;
        for p in 0..PATHS {
            for (what, rows) in [("args", &self.args), ("results", &self.results)] {
                write!(f, "{:<18}", format!("{} {what}", PATH_NAMES[p]))?;
                for n in rows[p] {
                    write!(f, " {n:>10}")?;
                }
                writeln!(f)?;
            }
        }
        write!(f, "{:<18}", "slept/calls")?;
        for c in CLASS_NAMES {
            write!(f, " {c:>14}")?;
        }
        writeln!(f)?;
        write!(f, "{:<18}", "cross-domain")?;
        for (slept, calls) in self.slept.iter().zip(self.sized) {
            write!(f, " {:>14}", format!("{slept}/{calls}"))?;
        }
        writeln!(f)
    }
}

// Offsets of the counters in a thread's block.
const CALLS: usize = 0;
const FAILED: usize = CALLS + PATHS;
const ARGS: usize = FAILED + PATHS;
const RESULTS: usize = ARGS + PATHS * BUCKETS;
const CALL_DOORS: usize = RESULTS + PATHS * BUCKETS;
const RET_DOORS: usize = CALL_DOORS + PATHS;
const SERVED: usize = RET_DOORS + PATHS;
/// Per path, calls of ≤ 16 bytes and no doors that returned ≤ 16 bytes and
/// no doors: one count stands for a call, an argument and a result in
/// bucket 0 of the path (the common call, counted with one store).
const INLINE_OK: usize = SERVED + PATHS;
/// Cross-domain calls with more than `CLASS_0_MAX` bytes of arguments, per
/// size class (the first class is read off the argument buckets instead).
const SIZED: usize = INLINE_OK + PATHS;
const SLEPT: usize = SIZED + CLASSES;
const WORDS: usize = SLEPT + CLASSES;

/// One owner's counters; only the owner writes them. Line-aligned, so two
/// owners' blocks never share a cache line.
#[repr(align(64))]
struct Block([AtomicU64; WORDS]);

/// Every block ever made (they are never freed), and those whose owner is
/// gone, ready for the next one: counts are the domain's, so a block may
/// change hands.
struct Registry {
    all: Mutex<Vec<&'static Block>>,
    free: Mutex<Vec<&'static Block>>,
}

/// The domain's registry. A forked child leaves its parent's behind
/// ([`after_fork`]): a parent thread may have held its locks at the fork,
/// and would hold them in the child for ever.
static REGISTRY: Leaked<Registry> = Leaked::new();

fn registry() -> &'static Registry {
    REGISTRY.get_or_make(
        || Registry {
            all: Mutex::new(Vec::new()),
            free: Mutex::new(Vec::new()),
        },
        |_| {},
    )
}

/// In a forked child, before it uses lintel: its counts start anew, in a
/// registry of its own (its domain is new too).
pub(crate) fn after_fork() {
    REGISTRY.abandon();
}

/// A block owned by one thread's object that is on the call path anyway (a
/// caller's lease of a slot, a server worker), so counting needs no
/// thread-local lookup. Not `Sync`: one writer.
pub(crate) struct Counters {
    block: &'static Block,
    _one_writer: std::marker::PhantomData<Cell<()>>,
}

impl Counters {
    pub fn new() -> Counters {
        let r = registry();
        let block = r.free.lock().pop().unwrap_or_else(|| {
            let b: &'static Block = Box::leak(Box::new(Block(std::array::from_fn(|_| AtomicU64::new(0)))));
            r.all.lock().push(b);
            b
        });
        Counters {
            block,
            _one_writer: std::marker::PhantomData,
        }
    }

    #[inline(always)]
    fn bump(&self, i: usize) {
        let c = &self.block.0[i];
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Count a call made on `path`, once it returned: `args` bytes and
    /// `doors` doors in, and the result's size and door count, or `None` if
    /// it failed. An inline call that returned inline is counted in one store
    /// ([`Counters::inline_ok`]).
    #[inline]
    pub fn call(&self, path: Path, args: usize, doors: usize, result: Option<(usize, usize)>) {
        if inline_ok(args, doors, result) {
            return self.inline_ok(path);
        }
        self.count_each(path, args, doors, result)
    }

    /// [`Counters::call`] field by field.
    #[inline]
    fn count_each(&self, path: Path, args: usize, doors: usize, result: Option<(usize, usize)>) {
        let p = path as usize;
        self.bump(CALLS + p);
        self.bump(ARGS + p * BUCKETS + bucket(args));
        if path != Path::Colocated && args > CLASS_0_MAX {
            self.bump(SIZED + class(args));
        }
        if doors > 0 {
            self.bump(CALL_DOORS + p);
        }
        match result {
            Some((len, doors)) => {
                self.bump(RESULTS + p * BUCKETS + bucket(len));
                if doors > 0 {
                    self.bump(RET_DOORS + p);
                }
            }
            None => self.bump(FAILED + p),
        }
    }

    /// Count a call of ≤ 16 bytes and no doors on `path` that returned
    /// ≤ 16 bytes and no doors (the same as `call(path, ≤ 16, 0,
    /// Some((≤ 16, 0)))`, in one store).
    #[inline(always)]
    pub fn inline_ok(&self, path: Path) {
        self.bump(INLINE_OK + path as usize);
    }

    /// Count a caller that slept for the reply to a call with arguments of
    /// size class `class`.
    #[inline]
    pub fn slept(&self, class: usize) {
        self.bump(SLEPT + class.min(CLASSES - 1));
    }

    /// Count a call served here for another domain.
    #[inline]
    pub fn served(&self, path: Path) {
        self.bump(SERVED + path as usize);
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        registry().free.lock().push(self.block);
    }
}

thread_local! {
    /// For calls with no lease or worker at hand (co-located calls, calls
    /// that fail before taking a slot).
    static MINE: Counters = Counters::new();
}

/// Whether a call is counted in one store ([`Counters::inline_ok`]): inline
/// in and inline out, no doors either way.
#[inline(always)]
fn inline_ok(args: usize, doors: usize, result: Option<(usize, usize)>) -> bool {
    let small = |len: usize, doors: usize| bucket(len) == 0 && doors == 0;
    small(args, doors) && result.is_some_and(|(len, d)| small(len, d))
}

/// Count a small call that returned small ([`Counters::inline_ok`]) on this
/// thread's own counters.
#[inline(always)]
pub(crate) fn count_inline_ok(path: Path) {
    let _ = MINE.try_with(|c| c.inline_ok(path));
}

/// Count a call on this thread's own counters (see [`Counters::call`]).
/// Decided before the thread-local lookup, so that the common case's
/// lookup is small enough for the compiler to inline (the co-located call:
/// 213 to 188 instructions).
#[inline(always)]
pub(crate) fn call(path: Path, args: usize, doors: usize, result: Option<(usize, usize)>) {
    if inline_ok(args, doors, result) {
        count_inline_ok(path);
    } else {
        let _ = MINE.try_with(|c| c.count_each(path, args, doors, result));
    }
}

/// This domain's counts so far.
pub fn snapshot() -> CallStats {
    let mut s = CallStats::default();
    for b in registry().all.lock().iter() {
        add(&mut s, b);
    }
    s
}

/// Add one block's counts to `s`.
fn add(s: &mut CallStats, b: &Block) {
    let w = |i: usize| b.0[i].load(Relaxed);
    for p in 0..PATHS {
        s.calls[p] += w(CALLS + p);
        s.failed[p] += w(FAILED + p);
        s.calls_with_doors[p] += w(CALL_DOORS + p);
        s.returns_with_doors[p] += w(RET_DOORS + p);
        s.served[p] += w(SERVED + p);
        for k in 0..BUCKETS {
            s.args[p][k] += w(ARGS + p * BUCKETS + k);
            s.results[p][k] += w(RESULTS + p * BUCKETS + k);
        }
        let small = w(INLINE_OK + p);
        s.calls[p] += small;
        s.args[p][0] += small;
        s.results[p][0] += small;
    }
    for c in 0..CLASSES {
        s.sized[c] += w(SIZED + c);
        s.slept[c] += w(SLEPT + c);
    }
    // Cross-domain calls in the first class: their buckets.
    let cross = [Path::Fast as usize, Path::Vanilla as usize];
    let small: u64 = cross
        .iter()
        .flat_map(|&p| (0..=bucket(CLASS_0_MAX)).map(move |k| w(ARGS + p * BUCKETS + k)))
        .sum();
    s.sized[0] += small + cross.iter().map(|&p| w(INLINE_OK + p)).sum::<u64>();
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// A forked child counts its calls though a thread of its parent held
    /// the registry's lock at the fork (it once hung there for ever).
    #[test]
    fn a_forked_child_counts_though_the_parent_held_the_lock() {
        let (held, hold) = std::sync::mpsc::channel();
        let (done, finish) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _free = registry().free.lock();
            held.send(()).unwrap();
            let _ = finish.recv();
        });
        hold.recv().unwrap();
        // SAFETY: the child runs only the code below and leaves with
        // _exit; it takes no lock of the parent's but through lintel.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            after_fork();
            drop(Counters::new());
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        let mut waited = 0;
        // SAFETY: polls our own child.
        while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 && waited < 3000 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
        let finished = waited < 3000;
        if !finished {
            // SAFETY: our own child, stuck.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
        done.send(()).unwrap();
        holder.join().unwrap();
        assert!(finished, "the child hung on its parent's lock");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }

    #[test]
    fn size_classes_start_where_springs_last_bucket_does() {
        assert_eq!(
            [0, 4000, 4001, 65535, 65536, (1 << 20) - 1, 1 << 20, usize::MAX].map(class),
            [0, 0, 1, 1, 2, 2, 3, 3]
        );
    }

    /// Calls are counted in their size class, the small ones off their
    /// buckets; sleeps in theirs.
    #[test]
    fn sleeps_are_counted_beside_the_calls_of_their_size() {
        let _alone = REGISTRY.lock();
        let c = Counters::new();
        let read = || {
            let mut s = CallStats::default();
            add(&mut s, c.block);
            s
        };
        let before = read();
        c.call(Path::Fast, 8, 0, Some((8, 0)));
        c.call(Path::Vanilla, 3000, 0, None);
        c.call(Path::Vanilla, 65536, 0, Some((0, 0)));
        c.call(Path::Vanilla, 1 << 20, 0, Some((0, 0)));
        c.call(Path::Colocated, 1 << 20, 0, Some((0, 0)));
        c.slept(class(65536));
        c.slept(class(1 << 20));
        let d = read().since(&before);
        assert_eq!(d.sized, [2, 0, 1, 1], "a co-located call is no cross-domain call");
        assert_eq!(d.slept, [0, 0, 1, 1]);
        assert!(d.to_string().contains("1/1"), "{d}");
    }

    #[test]
    fn buckets_follow_springs_ranges() {
        assert_eq!(
            [0, 16, 17, 100, 101, 1000, 1001, 4000, 4001].map(bucket),
            [0, 0, 1, 1, 2, 2, 3, 3, 4]
        );
    }

    /// Held by the tests that count into the process's registry, which
    /// the test of its totals reads: its deltas would include theirs.
    static REGISTRY: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    #[test]
    fn a_small_call_counted_in_one_store_reads_as_a_full_count() {
        let _alone = REGISTRY.lock();
        let (one, full) = (Counters::new(), Counters::new());
        let read = |c: &Counters| {
            let mut s = CallStats::default();
            add(&mut s, c.block);
            s
        };
        for p in [Path::Colocated, Path::Fast, Path::Vanilla] {
            let (one0, full0) = (read(&one), read(&full));
            one.call(p, 16, 0, Some((16, 0)));
            full.count_each(p, 16, 0, Some((16, 0)));
            let d = read(&one).since(&one0);
            assert_eq!(d, read(&full).since(&full0), "{p:?}");
            assert_eq!((d.calls[p as usize], d.args[p as usize][0]), (1, 1), "{p:?}");
            assert_eq!(
                one.block.0[INLINE_OK + p as usize].load(Relaxed),
                1,
                "{p:?}: one store"
            );
        }
    }

    #[test]
    fn counts_from_several_threads_add_up_and_round_trip() {
        let _alone = REGISTRY.lock();
        let before = snapshot();
        let ts: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    let c = Counters::new();
                    for _ in 0..10 {
                        c.call(Path::Vanilla, 200, 1, Some((5000, 0)));
                    }
                    c.served(Path::Fast);
                })
            })
            .collect();
        ts.into_iter().for_each(|t| t.join().unwrap());
        let d = snapshot().since(&before);
        let v = Path::Vanilla as usize;
        assert_eq!(d.calls[v], 30);
        assert_eq!(d.args[v][2], 30);
        assert_eq!(d.results[v][4], 30);
        assert_eq!(d.calls_with_doors[v], 30);
        assert_eq!(d.served[Path::Fast as usize], 3, "counts outlive their owners");
        assert_eq!(CallStats::from_bytes(&d.to_bytes()), Some(d.clone()));
        assert!(d.to_string().contains("vanilla"));
    }
}
