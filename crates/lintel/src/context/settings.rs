//! Per-domain settings: spin policy, the server-thread limit and the
//! message limit. Read from the environment at start (`LINTEL_SPIN=off`
//! (or `0`, `false`, `no`), `LINTEL_MAX_THREADS=N`, `LINTEL_SPIN_NS=N`,
//! `LINTEL_PATH=vanilla`, `LINTEL_MAX_MESSAGE=BYTES`), changeable at run
//! time.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

pub(crate) struct Settings {
    pub spin: AtomicBool,
    pub spin_ns: AtomicU64,
    /// The server-thread limit at start; the pool keeps the current one.
    pub max_threads: usize,
    pub force_vanilla: AtomicBool,
}

/// Default bound on spinning before sleeping on the futex. A blocking
/// wake-up costs several microseconds here, so spinning a little longer than
/// that wins whenever the peer answers within it.
pub const DEFAULT_SPIN_NS: u64 = 50_000;
/// Default server-thread limit per domain.
pub const DEFAULT_MAX_THREADS: usize = 16;

/// Default message limit: the largest arguments or results a call carries
/// (1 GiB).
pub const DEFAULT_MAX_MESSAGE: usize = 1 << 30;
/// The highest message limit a domain can set: lengths travel as 32-bit
/// words in the slot header.
pub const MAX_MESSAGE_CEILING: usize = u32::MAX as usize;

/// The lowest message limit a domain can set: the fast path's inline
/// payload, which every call may carry (so a small result needs no check).
pub const MIN_MAX_MESSAGE: usize = crate::abi::INLINE;

/// This domain's message limit. A plain process-wide value (a domain is a
/// process) rather than a field of the domain, so the size checks of every
/// path, co-located ones included, read it without the runtime.
static MAX_MESSAGE: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_MESSAGE);

/// The largest arguments or results a call made or served here may carry.
/// Larger ones fail with [`crate::CallError::TooLarge`], which names the
/// limit; nothing is allocated for them.
///
/// ```
/// assert_eq!(lintel::max_message(), 1 << 30); // unless LINTEL_MAX_MESSAGE says otherwise
/// ```
#[inline]
pub fn max_message() -> usize {
    MAX_MESSAGE.load(Relaxed)
}

/// Set this domain's message limit (at least 16 bytes, at most 4 GiB − 1;
/// see [`max_message`]). Returns the limit now in force.
pub fn set_max_message(bytes: usize) -> usize {
    let n = limit_of(bytes);
    MAX_MESSAGE.store(n, Relaxed);
    n
}

/// The limit in force when `bytes` is asked for.
fn limit_of(bytes: usize) -> usize {
    bytes.clamp(MIN_MAX_MESSAGE, MAX_MESSAGE_CEILING)
}

impl Settings {
    pub fn from_env() -> Settings {
        let num = |k: &str| {
            let v = std::env::var(k).ok()?;
            let n = v.parse::<u64>().ok();
            if n.is_none() {
                tracing::warn!("{k}={v:?} is not a number; using the default");
            }
            n
        };
        Settings {
            spin: AtomicBool::new(std::env::var("LINTEL_SPIN").map_or(true, |v| switch("LINTEL_SPIN", &v))),
            spin_ns: AtomicU64::new(num("LINTEL_SPIN_NS").unwrap_or(DEFAULT_SPIN_NS)),
            max_threads: num("LINTEL_MAX_THREADS")
                .map(|n| n.max(1) as usize)
                .unwrap_or(DEFAULT_MAX_THREADS),
            force_vanilla: AtomicBool::new(std::env::var("LINTEL_PATH").is_ok_and(|v| v == "vanilla")),
        }
        .with_max_message(num("LINTEL_MAX_MESSAGE"))
    }

    fn with_max_message(self, bytes: Option<u64>) -> Settings {
        if let Some(n) = bytes {
            set_max_message(usize::try_from(n).unwrap_or(usize::MAX));
        }
        self
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

/// An on/off setting: `off`, `0`, `false` or `no` turn it off; anything
/// else leaves it on (with a warning unless it is `on`, `1`, `true` or `yes`).
fn switch(key: &str, v: &str) -> bool {
    match v.to_ascii_lowercase().as_str() {
        "off" | "0" | "false" | "no" => false,
        "on" | "1" | "true" | "yes" => true,
        _ => {
            tracing::warn!("{key}={v:?} is neither on nor off; leaving it on");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_MESSAGE_CEILING, limit_of, switch};

    #[test]
    fn a_message_limit_is_never_below_the_inline_payload() {
        assert_eq!(limit_of(0), 16);
        assert_eq!(limit_of(15), 16);
        assert_eq!(limit_of(16), 16);
        assert_eq!(limit_of(4096), 4096);
        assert_eq!(limit_of(usize::MAX), MAX_MESSAGE_CEILING);
    }

    #[test]
    fn switches_read_the_usual_spellings() {
        for off in ["off", "0", "false", "no", "OFF", "False"] {
            assert!(!switch("K", off), "{off}");
        }
        for on in ["on", "1", "true", "yes", "whatever"] {
            assert!(switch("K", on), "{on}");
        }
    }
}
