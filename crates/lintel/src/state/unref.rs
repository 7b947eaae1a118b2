//! The one thread that runs `unreferenced` handlers, in the order doors
//! fell to no holders, off the thread that dropped the last reference
//! (which may hold locks, or be a peer's death being torn down). Started on
//! first use; a forked child starts its own ([`after_fork`]).

use std::sync::mpsc::{self, Receiver, Sender};

use parking_lot::Mutex;

use crate::state::leaked::Leaked;

/// One `unreferenced` to deliver.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    tx: Sender<Job>,
    /// Taken by the thread when it starts.
    rx: Mutex<Option<Receiver<Job>>>,
}

static QUEUE: Leaked<Queue> = Leaked::new();

/// Run `job` on the unreferenced thread, after every job queued before it.
/// A job that panics is dropped; the thread goes on.
pub(crate) fn queue(job: Job) {
    let q = QUEUE.get_or_make(make, start);
    let _ = q.tx.send(job);
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
            for job in rx {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
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
