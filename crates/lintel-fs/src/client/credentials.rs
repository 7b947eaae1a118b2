//! This process's changes of credentials and umask, counted, and each
//! service told of them before the next call that needs them
//! ([`crate::Fs::credentials_changed`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::proto::FsError;

/// How many times this process changed its credentials or umask
/// ([`Fs::credentials_changed`](crate::Fs::credentials_changed)).
static CREDENTIALS: AtomicU64 = AtomicU64::new(0);

/// Tell a service (`notice`) of the changes of credentials since `told`.
pub(crate) fn tell(told: &AtomicU64, notice: impl FnOnce() -> Result<(), FsError>) {
    let now = CREDENTIALS.load(Ordering::Acquire);
    if told.load(Ordering::Relaxed) != now {
        match notice() {
            Ok(()) => told.store(now, Ordering::Relaxed),
            // The call that follows fails as well, and says why.
            Err(e) => tracing::debug!(error = %e, "the file service was not told of new credentials"),
        }
    }
}

/// This process changed its credentials or umask. Only bumps a counter,
/// so a signal handler may call it.
pub(crate) fn changed() {
    CREDENTIALS.fetch_add(1, Ordering::Release);
}
