//! Server threads. The pool grows on demand up to the domain's limit; a call
//! that finds every thread busy waits in the queue (it is never refused),
//! counts as a shortage, and asks one bound-but-idle thread to let go of its
//! slot. An application can watch shortages and raise the limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use parking_lot::{Condvar, Mutex};

use crate::conn::Conn;
use crate::server::InArea;

/// A slot with a request and no thread bound to it.
pub(crate) struct Work {
    pub conn: Arc<Conn>,
    pub area: Arc<InArea>,
    pub slot: u32,
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

pub(crate) struct Pool {
    /// Most threads it may have.
    limit: AtomicUsize,
    st: Mutex<State>,
    cv: Condvar,
    shortages: AtomicU64,
    watcher: Mutex<Option<Watcher>>,
    /// Whether some worker holds the spinning role (see `server`).
    spinning: AtomicBool,
    /// Slots waiting in the queue for a thread (mirrors `State::queue.len()`),
    /// read by bound threads between calls to know they should let go.
    queued: AtomicUsize,
}

#[derive(Default)]
struct State {
    threads: usize,
    idle: usize,
    queue: VecDeque<Work>,
    bound: Vec<(Arc<InArea>, u32)>,
}

impl Pool {
    /// A pool of at most `limit` threads (the setting `LINTEL_MAX_THREADS`).
    pub fn new(limit: usize) -> Pool {
        Pool {
            limit: AtomicUsize::new(limit.max(1)),
            st: Mutex::new(State::default()),
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

    /// A client says a request waits in `slot` with no thread bound.
    pub fn kick(&self, conn: Arc<Conn>, area: Arc<InArea>, slot: u32) {
        if area.claim_for_queue(slot) {
            self.submit(Work { conn, area, slot });
        }
    }

    pub fn submit(&self, w: Work) {
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
            for (area, slot) in st.bound.iter().filter(|(a, s)| !a.unbind_requested(*s)) {
                area.request_unbind(*slot);
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
    fn grow(&self, st: &mut State) -> bool {
        let (start, short) = growth(st.threads, st.idle, st.queue.len(), self.limit());
        for _ in 0..start {
            let spawned = std::thread::Builder::new()
                .name("lintel-server".into())
                .spawn(crate::server::run_worker);
            if spawned.is_err() {
                return true;
            }
            st.threads += 1;
            st.idle += 1;
        }
        short
    }

    /// Next slot to serve; blocks while there is none.
    pub fn take(&self) -> Work {
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

    pub fn bound(&self, area: &Arc<InArea>, slot: u32) {
        self.st.lock().bound.push((area.clone(), slot));
    }

    pub fn unbound(&self, area: &Arc<InArea>, slot: u32) {
        let mut st = self.st.lock();
        if let Some(i) = st
            .bound
            .iter()
            .position(|(a, s)| Arc::ptr_eq(a, area) && *s == slot)
        {
            st.bound.swap_remove(i);
        }
    }

    /// Allow at most `n` threads from now on.
    pub fn set_limit(&self, n: usize) {
        self.limit.store(n.max(1), Relaxed);
        let mut st = self.st.lock();
        self.grow(&mut st);
        self.cv.notify_all();
    }

    fn snapshot(&self, st: &State) -> PoolStats {
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

/// Current state of this domain's server-thread pool.
pub fn stats() -> PoolStats {
    let p = &crate::domain::get().pool;
    let st = p.st.lock();
    p.snapshot(&st)
}

/// Be told (on the thread that found the pool short) each time a call has
/// to wait for a server thread. The watcher may raise the limit with
/// [`crate::set_max_server_threads`].
pub fn on_shortage(f: impl Fn(PoolStats) + Send + Sync + 'static) {
    *crate::domain::get().pool.watcher.lock() = Some(Arc::new(f));
}

#[cfg(test)]
mod tests {
    use super::growth;

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
