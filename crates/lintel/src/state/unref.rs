//! The one thread that runs `unreferenced` handlers, in the order doors
//! fell to no holders, off the thread that dropped the last reference
//! (which may hold locks, or be a peer's death being torn down). Started on
//! first use; a forked child starts its own ([`after_fork`]).
//!
//! Jobs travel in batches: a thread that lets go of many doors at once (a
//! peer's batch of releases, its death) queues their jobs inside
//! [`batched`], and the thread is woken once for all of them. Woken once
//! per door, it ran each job and slept again, and being newly woken it
//! took the CPU from the releasing thread every time: some 290 switches
//! a millisecond between the two, during which a caller on that CPU waited
//! (seen with `perf sched` as 1 ms stalls of a served `open`).

use std::cell::RefCell;
use std::sync::mpsc::{self, Receiver, Sender};

use parking_lot::Mutex;

use crate::state::leaked::Leaked;

/// One `unreferenced` to deliver.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    tx: Sender<Vec<Job>>,
    /// Taken by the thread when it starts.
    rx: Mutex<Option<Receiver<Vec<Job>>>>,
}

static QUEUE: Leaked<Queue> = Leaked::new();

thread_local! {
    /// Jobs this thread queued inside [`batched`], sent when it ends.
    static HELD: RefCell<Option<Vec<Job>>> = const { RefCell::new(None) };
}

/// Run `job` on the unreferenced thread, after every job queued before it
/// (inside [`batched`]: when the batch ends). A job that panics is dropped;
/// the thread goes on.
pub(crate) fn queue(job: Job) {
    let mut job = Some(job);
    let _ = HELD.try_with(|held| {
        if let Some(batch) = held.borrow_mut().as_mut() {
            batch.extend(job.take());
        }
    });
    // Not in a batch (or this thread's thread-locals are gone): alone.
    if let Some(job) = job {
        send(vec![job]);
    }
}

/// Run `f`, holding the jobs it queues until it returns (or unwinds), then
/// send them to the thread together: one wake-up for all. Inside another
/// batch, the outer one sends them.
pub(crate) fn batched<R>(f: impl FnOnce() -> R) -> R {
    /// Sends what was held, whichever way `f` ends.
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            if let Ok(Some(jobs)) = HELD.try_with(|h| h.borrow_mut().take())
                && !jobs.is_empty()
            {
                send(jobs);
            }
        }
    }
    let outermost = HELD
        .try_with(|h| {
            let mut h = h.borrow_mut();
            let outermost = h.is_none();
            if outermost {
                *h = Some(Vec::new());
            }
            outermost
        })
        .unwrap_or(false);
    // (Made only when it is to flush: a `Flush` dropped unused would
    // send the outer batch's jobs.)
    let _flush = if outermost { Some(Flush) } else { None };
    f()
}

fn send(jobs: Vec<Job>) {
    let q = QUEUE.get_or_make(make, start);
    let _ = q.tx.send(jobs);
}

fn make() -> Queue {
    let (tx, rx) = mpsc::channel();
    Queue {
        tx,
        rx: Mutex::new(Some(rx)),
    }
}

fn start(q: &'static Queue) {
    let Some(rx) = q.rx.lock().take() else { return };
    std::thread::Builder::new()
        .name("lintel-unref".into())
        .spawn(move || {
            for jobs in rx {
                for job in jobs {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            }
        })
        .expect("lintel: cannot start the unreferenced thread");
}

/// In a forked child: the parent's thread is not here; leave its queue
/// behind, and start a new one on next use.
pub(crate) fn after_fork() {
    QUEUE.abandon();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Jobs queued in a batch (nested ones too) wait for its end, then
    /// run in order after the jobs queued before it.
    #[test]
    fn a_batch_is_sent_whole_when_it_ends() {
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (done, wait) = std::sync::mpsc::channel();
        let push = |i: u32| {
            let seen = seen.clone();
            Box::new(move || seen.lock().push(i)) as super::Job
        };
        super::queue(push(0));
        super::batched(|| {
            super::queue(push(1));
            super::batched(|| super::queue(push(2)));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!seen.lock().contains(&1), "held until the batch ends");
            assert!(
                !seen.lock().contains(&2),
                "a nested batch waits for the outer one"
            );
            super::queue(push(3));
        });
        super::queue(Box::new(move || done.send(()).unwrap()));
        wait.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        let seen = seen.lock();
        let mine: Vec<u32> = seen.iter().copied().filter(|i| *i <= 3).collect();
        assert_eq!(mine, vec![0, 1, 2, 3]);
    }

    #[test]
    fn jobs_run_in_order_and_a_panic_stops_only_its_own() {
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (done, wait) = std::sync::mpsc::channel();
        for i in 0..5 {
            let seen = seen.clone();
            super::queue(Box::new(move || {
                seen.lock().push(i);
                assert_ne!(i, 2, "this one panics");
            }));
        }
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        super::queue(Box::new(move || {
            c.fetch_add(1, SeqCst);
            done.send(()).unwrap();
        }));
        wait.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        assert_eq!(*seen.lock(), vec![0, 1, 2, 3, 4]);
        assert_eq!(count.load(SeqCst), 1);
    }
}
