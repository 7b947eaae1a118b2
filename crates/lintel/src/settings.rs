//! Per-domain settings: spin policy and the server-thread limit. Read from
//! the environment at start (`LINTEL_SPIN=off`, `LINTEL_MAX_THREADS=N`,
//! `LINTEL_SPIN_NS=N`, `LINTEL_PATH=vanilla`), changeable at run time.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

pub(crate) struct Settings {
    pub spin: AtomicBool,
    pub spin_ns: AtomicU64,
    pub max_threads: AtomicUsize,
    pub force_vanilla: AtomicBool,
}

/// Default bound on spinning before sleeping on the futex. A blocking
/// wake-up costs several microseconds here, so spinning a little longer than
/// that wins whenever the peer answers within it.
pub const DEFAULT_SPIN_NS: u64 = 50_000;
/// Default server-thread limit per domain.
pub const DEFAULT_MAX_THREADS: usize = 16;

impl Settings {
    pub fn from_env() -> Settings {
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Settings {
            spin: AtomicBool::new(std::env::var("LINTEL_SPIN").map(|v| v != "off").unwrap_or(true)),
            spin_ns: AtomicU64::new(num("LINTEL_SPIN_NS").unwrap_or(DEFAULT_SPIN_NS)),
            max_threads: AtomicUsize::new(
                num("LINTEL_MAX_THREADS")
                    .map(|n| n.max(1) as usize)
                    .unwrap_or(DEFAULT_MAX_THREADS),
            ),
            force_vanilla: AtomicBool::new(std::env::var("LINTEL_PATH").is_ok_and(|v| v == "vanilla")),
        }
    }

    #[inline]
    pub fn spin_budget_ns(&self) -> u64 {
        if self.spin.load(Relaxed) {
            self.spin_ns.load(Relaxed)
        } else {
            0
        }
    }
}

/// Turn spinning on or off for this domain (off: every wait sleeps on the futex).
pub fn set_spin(on: bool) {
    crate::domain::get().settings.spin.store(on, Relaxed);
}

/// Most server threads this domain runs; calls beyond it wait for a thread.
pub fn set_max_server_threads(n: usize) {
    let d = crate::domain::get();
    d.settings.max_threads.store(n.max(1), Relaxed);
    d.pool.limit_changed();
}

/// Make this domain's cross-domain calls take the vanilla path even when
/// they would fit the fast path (the INKS "message" configuration; for
/// measurement).
pub fn set_force_vanilla(on: bool) {
    crate::domain::get().settings.force_vanilla.store(on, Relaxed);
}

#[inline]
pub(crate) fn force_vanilla() -> bool {
    crate::domain::get().settings.force_vanilla.load(Relaxed)
}
