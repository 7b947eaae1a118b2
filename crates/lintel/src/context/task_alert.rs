//! The alert of one call served by an async handler's task: a flag and
//! the task to wake, set from whatever thread learns of the alert (the
//! connection's, a server thread's, or the calling thread's shuttle for a
//! co-located blocking call).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// The alert of one call served by a task: a flag and the task to wake.
pub(crate) struct CallAlert {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl CallAlert {
    pub fn new(set: bool) -> Arc<CallAlert> {
        Arc::new(CallAlert {
            set: AtomicBool::new(set),
            waker: Mutex::new(None),
        })
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Acquire)
    }

    /// Alert the call: its [`Alerted`] futures end.
    pub fn alert(&self) {
        self.set.store(true, Release);
        if let Some(w) = self.waker.lock().take() {
            w.wake();
        }
    }
}

/// The future of [`crate::AsyncRequest::alerted`].
pub struct Alerted(pub(crate) Arc<CallAlert>);

impl Future for Alerted {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.is_set() {
            return Poll::Ready(());
        }
        *self.0.waker.lock() = Some(cx.waker().clone());
        // Looked at again under the waker's lock's release: an alert set
        // before the waker was stored is seen here.
        match self.0.is_set() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}
