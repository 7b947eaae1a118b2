//! This domain's server threads, as an application sees them: how many,
//! how busy, and a hook for shortages (the pool itself is `workers`).
//!
//! ```
//! let s = lintel::pool::stats();
//! assert!(s.idle <= s.threads);
//! ```

pub use crate::state::workers::PoolStats;

/// Current state of this domain's server-thread pool.
pub fn stats() -> PoolStats {
    crate::domain::get().pool.stats()
}

/// Be told (on the thread that found the pool short) each time a call has
/// to wait for a server thread. The watcher may raise the limit with
/// [`crate::set_max_server_threads`].
pub fn on_shortage(f: impl Fn(PoolStats) + Send + Sync + 'static) {
    crate::domain::get().pool.on_shortage(f);
}
