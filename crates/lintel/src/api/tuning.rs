//! The domain's settings as the public reads and sets them (the values
//! live in `context::settings`).

/// Whether this domain spins before sleeping (`LINTEL_SPIN`, [`set_spin`]).
pub fn spinning() -> bool {
    crate::domain::get()
        .settings
        .spin
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Turn spinning on or off for this domain (off: every wait sleeps on the futex).
pub fn set_spin(on: bool) {
    crate::domain::get()
        .settings
        .spin
        .store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Most server threads this domain runs; calls beyond it wait for a thread.
pub fn set_max_server_threads(n: usize) {
    crate::domain::get().pool.set_limit(n);
}

/// Make this domain's cross-domain calls take the vanilla path even when
/// they would fit the fast path (the INKS "message" configuration; for
/// measurement).
pub fn set_force_vanilla(on: bool) {
    crate::domain::get()
        .settings
        .force_vanilla
        .store(on, std::sync::atomic::Ordering::Relaxed);
}
