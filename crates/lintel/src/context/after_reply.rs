//! Work a handler leaves for after its reply ([`after_reply`]): the server
//! thread runs it once the reply is published and before it looks for
//! the next request, so the caller goes on while it runs.
//!
//! What it is for: work the caller will want soon but not now, such as a
//! file service filling the next pipeful of a sequential read while the
//! client drains the last. On a machine with a CPU each, the server thread
//! does that work on its CPU while the caller uses its own; the caller's
//! next call waits only for what is left of it.

use std::cell::{Cell, RefCell};

type Work = Box<dyn FnOnce()>;

thread_local! {
    /// Whether this thread is a server thread of the pool (set once).
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
    /// Whether [`WORK`] holds anything: the one word a request's end reads.
    static QUEUED: Cell<bool> = const { Cell::new(false) };
    static WORK: RefCell<Vec<Work>> = const { RefCell::new(Vec::new()) };
}

/// Run `work` after the reply of the call this thread is serving has gone
/// out, on this thread, before it serves another call.
///
/// On a server thread of the pool (a call from another domain) the work
/// waits for the handler to return and its reply to be published; the
/// caller's next call on the same connection slot waits for it in turn.
/// Anywhere else (a co-located call runs on its caller's thread, an async
/// handler on its runtime, or no call at all) there is no later point
/// that is still this call's, so `work` runs at once: take locks the work
/// needs only after letting go of those the handler holds. A panic in
/// `work` is caught and dropped; the caller has its reply already.
///
/// ```
/// // In a handler: reply now, tidy up after.
/// let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
/// let l = log.clone();
/// lintel::after_reply(move || l.lock().unwrap().push("after"));
/// // Outside a server thread it ran at once.
/// assert_eq!(*log.lock().unwrap(), ["after"]);
/// ```
pub fn after_reply(work: impl FnOnce() + 'static) {
    if !ON_WORKER.get() {
        run_caught(Box::new(work));
        return;
    }
    WORK.with_borrow_mut(|w| w.push(Box::new(work)));
    QUEUED.set(true);
}

/// This thread serves calls from other domains: [`after_reply`] queues.
pub(crate) fn mark_worker() {
    ON_WORKER.set(true);
}

/// Run what handlers queued (a server thread, between requests).
#[inline(always)]
pub(crate) fn run_queued() {
    if QUEUED.get() {
        run_all();
    }
}

#[cold]
fn run_all() {
    // Work may queue more work: run until none is left.
    while QUEUED.replace(false) {
        for work in WORK.take() {
            run_caught(work);
        }
    }
}

fn run_caught(work: Work) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
        tracing::warn!("work queued after a reply panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn off_a_server_thread_work_runs_at_once() {
        let ran = Rc::new(Cell::new(0));
        let r = ran.clone();
        after_reply(move || r.set(r.get() + 1));
        assert_eq!(ran.get(), 1);
    }

    #[test]
    fn on_a_server_thread_work_waits_for_the_request_to_end() {
        std::thread::spawn(|| {
            mark_worker();
            let ran = Rc::new(RefCell::new(Vec::new()));
            let (a, b) = (ran.clone(), ran.clone());
            after_reply(move || {
                a.borrow_mut().push(1);
                // Queued by queued work: runs in the same turn.
                after_reply(move || b.borrow_mut().push(2));
            });
            assert!(ran.borrow().is_empty(), "ran before the request ended");
            run_queued();
            assert_eq!(*ran.borrow(), [1, 2]);
            // A panic is contained, and what follows still runs.
            let c = ran.clone();
            after_reply(|| panic!("deliberate"));
            after_reply(move || c.borrow_mut().push(3));
            run_queued();
            assert_eq!(*ran.borrow(), [1, 2, 3]);
        })
        .join()
        .unwrap();
    }
}
