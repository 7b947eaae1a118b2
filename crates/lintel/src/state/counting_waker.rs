//! For the host tests of `calls` and `parked`: a waker that counts how
//! often it is woken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Wake, Waker};

/// The count of wakes.
pub(crate) struct Count(AtomicUsize);

impl Count {
    pub fn get(&self) -> usize {
        self.0.load(SeqCst)
    }
}

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A waker, and the count of its wakes.
pub(crate) fn counting_waker() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}
