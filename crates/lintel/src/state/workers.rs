//! Server threads. The pool grows on demand up to the domain's limit; a call
//! that finds every thread busy waits in the queue (it is never refused),
//! counts as a shortage, and asks one bound-but-idle thread to let go of its
//! slot. An application can watch shortages and raise the limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use parking_lot::{Condvar, Mutex};

/// What a worker thread serves (a slot of a peer's call area), as far as
/// the pool needs to know it: the pool is generic over it, so its policy
/// stands apart from serving.
pub(crate) trait Work: Clone + Send + 'static {
    /// Whether `self` and `other` are the same slot.
    fn same(&self, other: &Self) -> bool;
    /// Whether the thread serving it was already asked to let go.
    fn unbind_requested(&self) -> bool;
    /// Ask the thread serving it to let go (other slots wait for a thread).
    fn request_unbind(&self);
}

/// A snapshot of the pool, passed to the shortage watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Server threads running.
    pub threads: usize,
    /// Of those, waiting for work.
    pub idle: usize,
    /// Calls waiting for a thread.
    pub queued: usize,
    /// Most threads the pool may have (`LINTEL_MAX_THREADS`).
    pub limit: usize,
    /// Times a call found no thread and the pool could not grow.
    pub shortages: u64,
}

type Watcher = Arc<dyn Fn(PoolStats) + Send + Sync>;

/// The domain's server threads: started on demand, each running `worker`.
pub(crate) struct Pool<W: Work> {
    /// What each thread runs: take work from the pool, serve it, repeat.
    worker: fn(&'static Pool<W>),
    /// Most threads it may have.
    limit: AtomicUsize,
    st: Mutex<State<W>>,
    cv: Condvar,
    shortages: AtomicU64,
    watcher: Mutex<Option<Watcher>>,
    /// Whether some worker holds the spinning role (see `server`).
    spinning: AtomicBool,
    /// Slots waiting in the queue for a thread (mirrors `State::queue.len()`),
    /// read by bound threads between calls to know they should let go.
    queued: AtomicUsize,
}

struct State<W> {
    threads: usize,
    idle: usize,
    queue: VecDeque<W>,
    bound: Vec<W>,
}

impl<W: Work> Pool<W> {
    /// A pool of at most `limit` threads (the setting `LINTEL_MAX_THREADS`),
    /// each running `worker`.
    pub fn new(limit: usize, worker: fn(&'static Pool<W>)) -> Pool<W> {
        Pool {
            worker,
            limit: AtomicUsize::new(limit.max(1)),
            st: Mutex::new(State {
                threads: 0,
                idle: 0,
                queue: VecDeque::new(),
                bound: Vec::new(),
            }),
            cv: Condvar::new(),
            shortages: AtomicU64::new(0),
            watcher: Mutex::new(None),
            spinning: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
        }
    }

    fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Queue `w` for a thread (starting one if the limit allows).
    pub fn submit(&'static self, w: W) {
        let mut st = self.st.lock();
        st.queue.push_back(w);
        self.queued.store(st.queue.len(), SeqCst);
        let short = self.grow(&mut st);
        self.cv.notify_one();
        if short {
            // Every thread is taken: those waiting on a quiet slot let go now,
            // those running a call let go when it returns (`has_queued`), so
            // queued slots are served in turn rather than starved.
            self.shortages.fetch_add(1, Relaxed);
            for w in st.bound.iter().filter(|w| !w.unbind_requested()) {
                w.request_unbind();
            }
            let stats = self.snapshot(&st);
            drop(st);
            let w = self.watcher.lock().clone();
            if let Some(w) = w {
                w(stats);
            }
        }
    }

    /// Start threads while work outnumbers idle threads; true if the limit
    /// (or a failed spawn) leaves work waiting.
    fn grow(&'static self, st: &mut State<W>) -> bool {
        let (start, short) = growth(st.threads, st.idle, st.queue.len(), self.limit());
        for _ in 0..start {
            if !self.start_thread(st) {
                return true;
            }
        }
        short
    }

    /// Work is on its way (a caller's call area arrived): if no thread is
    /// idle, start one now, within the limit, so that the first call finds
    /// a thread waiting rather than waits for one to start (60–70 µs here).
    pub fn expect_work(&'static self) {
        let mut st = self.st.lock();
        let (start, _) = growth(st.threads, st.idle, st.queue.len() + 1, self.limit());
        if start > 0 {
            self.start_thread(&mut st);
        }
    }

    /// Start one worker thread, counted idle; false if it could not start.
    fn start_thread(&'static self, st: &mut State<W>) -> bool {
        let spawned = std::thread::Builder::new()
            .name("lintel-server".into())
            .spawn(move || (self.worker)(self));
        if spawned.is_ok() {
            st.threads += 1;
            st.idle += 1;
        }
        spawned.is_ok()
    }

    /// Next slot to serve; blocks while there is none.
    pub fn take(&self) -> W {
        let mut st = self.st.lock();
        loop {
            if let Some(w) = st.queue.pop_front() {
                self.queued.store(st.queue.len(), SeqCst);
                st.idle = st.idle.saturating_sub(1);
                return w;
            }
            self.cv.wait(&mut st);
        }
    }

    /// Take the domain's one spinning role, if free.
    #[inline]
    pub fn try_spin(&self) -> bool {
        !self.spinning.load(Relaxed) && !self.spinning.swap(true, Acquire)
    }

    pub fn give_up_spinning(&self) {
        self.spinning.store(false, Release);
    }

    /// Whether slots wait for a thread: a bound thread then lets go of its
    /// slot after the call it is running.
    #[inline]
    pub fn has_queued(&self) -> bool {
        self.queued.load(Relaxed) != 0
    }

    /// A worker finished with its slot and is about to wait for more.
    pub fn went_idle(&self) {
        self.st.lock().idle += 1;
    }

    /// A thread serves `w` now (and may be asked to let go of it).
    pub fn bound(&self, w: &W) {
        self.st.lock().bound.push(w.clone());
    }

    /// The thread serving `w` let go of it.
    pub fn unbound(&self, w: &W) {
        let mut st = self.st.lock();
        if let Some(i) = st.bound.iter().position(|b| b.same(w)) {
            st.bound.swap_remove(i);
        }
    }

    /// Allow at most `n` threads from now on.
    pub fn set_limit(&'static self, n: usize) {
        self.limit.store(n.max(1), Relaxed);
        let mut st = self.st.lock();
        self.grow(&mut st);
        self.cv.notify_all();
    }

    /// How the pool stands now.
    pub fn stats(&self) -> PoolStats {
        self.snapshot(&self.st.lock())
    }

    /// Call `f` each time work has to wait for a thread.
    pub fn on_shortage(&self, f: impl Fn(PoolStats) + Send + Sync + 'static) {
        *self.watcher.lock() = Some(Arc::new(f));
    }

    fn snapshot(&self, st: &State<W>) -> PoolStats {
        PoolStats {
            threads: st.threads,
            idle: st.idle,
            queued: st.queue.len(),
            limit: self.limit(),
            shortages: self.shortages.load(Relaxed),
        }
    }
}

/// The pool's policy, as a plain value: with `threads` running, `idle` of
/// them waiting and `queued` slots waiting for one, how many threads to
/// start under `limit`, and whether work is left waiting (a shortage).
pub(crate) fn growth(threads: usize, idle: usize, queued: usize, limit: usize) -> (usize, bool) {
    let wanted = queued.saturating_sub(idle);
    let room = limit.saturating_sub(threads);
    (wanted.min(room), wanted > room)
}

#[cfg(test)]
mod tests {
    use super::{Pool, Work, growth};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Work that counts itself done.
    #[derive(Clone)]
    struct Count(&'static AtomicUsize);

    impl Work for Count {
        fn same(&self, _: &Self) -> bool {
            false
        }
        fn unbind_requested(&self) -> bool {
            false
        }
        fn request_unbind(&self) {}
    }

    fn serve_counts(pool: &'static Pool<Count>) {
        loop {
            let w = pool.take();
            w.0.fetch_add(1, SeqCst);
            pool.went_idle();
        }
    }

    /// Work announced ahead (a caller's call area) starts a thread only if
    /// none is idle, and the work that follows takes it without starting
    /// another.
    #[test]
    fn expected_work_finds_one_thread_waiting_and_starts_no_more() {
        let pool: &'static Pool<Count> = Box::leak(Box::new(Pool::new(4, serve_counts)));
        let done: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
        pool.expect_work();
        pool.expect_work();
        let s = pool.stats();
        assert_eq!((s.threads, s.idle), (1, 1), "one thread, waiting: {s:?}");
        pool.submit(Count(done));
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while done.load(SeqCst) == 0 {
            assert!(std::time::Instant::now() < end, "the work was never taken");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.stats().threads, 1, "the waiting thread took it");
        assert_eq!(pool.stats().shortages, 0);
    }

    #[test]
    fn threads_start_for_work_beyond_the_idle_ones_up_to_the_limit() {
        assert_eq!(growth(0, 0, 1, 16), (1, false), "first call: one thread");
        assert_eq!(growth(4, 2, 2, 16), (0, false), "idle threads take it");
        assert_eq!(growth(4, 1, 3, 16), (2, false));
        assert_eq!(growth(15, 0, 3, 16), (1, true), "one more, then short");
        assert_eq!(growth(16, 0, 1, 16), (0, true), "at the limit: a shortage");
        assert_eq!(growth(20, 0, 1, 16), (0, true), "limit lowered below the count");
        assert_eq!(growth(3, 3, 0, 16), (0, false), "nothing queued");
    }
}
