//! The launcher's contract with the program it runs: the variables it
//! sets in the program's environment, and where the program's runtime
//! keeps its descriptors.

/// Where the launcher's file service listens (set in the program's
/// environment).
pub const ENV_SOCKET: &str = "LINTEL_UNIX_SOCKET";
/// The name of the file service to look up through the name service that
/// answers at [`ENV_SOCKET`] (a running system's supervisor), instead of
/// taking the first door offered there (set by `lintel-run --manifest`).
pub const ENV_SERVICE: &str = "LINTEL_UNIX_SERVICE";
/// The served prefix (set in the program's environment).
pub const ENV_PREFIX: &str = "LINTEL_UNIX_PREFIX";
/// The descriptor floor of a program's lintel runtime (set in the
/// program's environment by the launcher, so every image it `exec`s uses
/// the same): see [`choose_descriptor_floor`].
pub const ENV_FD_FLOOR: &str = "LINTEL_UNIX_FD_FLOOR";
/// The statically linked program to load and run in static mode
/// ([`crate::image`]), set by the launcher for the process it starts as the
/// program's host (the preload library's constructor loads it, and takes
/// it out of the program's environment).
pub const ENV_STATIC: &str = "LINTEL_UNIX_STATIC";
/// The launcher's own path, set in the program's environment: an `execve`
/// of a static program starts it again as the program's host.
pub const ENV_HOST: &str = "LINTEL_UNIX_HOST";
/// A served program to `exec`, set for a process started as its host by
/// a forked child that cannot reach the service itself (see
/// `emulate`'s `exec`): the preload library's constructor starts it, with
/// the process's arguments and environment (less this variable).
pub const ENV_EXEC: &str = "LINTEL_UNIX_EXEC";
/// Set by the launcher for the process it starts: that process holds no
/// served descriptor, so its runtime skips the look through
/// `/proc/self/fd` for inherited ones (about 0.1 ms in a new process).
/// The preload library's constructor takes it out of the environment
/// before the program runs, so no image the program `exec`s sees it.
pub const ENV_FRESH: &str = "LINTEL_UNIX_FRESH";
/// Set to `0` by whoever starts the program: glibc's own calls are left
/// to trap instead of being bound to the preload library's wrappers (a
/// switch for comparing the two; the answers are the same).
pub const ENV_REBIND: &str = "LINTEL_UNIX_REBIND";

/// Descriptors kept free for the runtime above the floor, where the
/// kernel's hard limit allows.
const RUNTIME_ROOM: u64 = 4096;

/// Where a program's lintel runtime keeps its descriptors: at this
/// process's soft limit, which the program goes on seeing as its limit
/// (the emulation caps what `getrlimit` shows at the floor), with the
/// kernel's soft limit raised so the runtime has room above it. With no
/// room under the hard limit, the top 256 descriptors below it are
/// taken instead. The runtime's sockets and memfds then sit where a
/// program's `dup2`, `exec 3<file` or `closefrom` never reach.
pub fn choose_descriptor_floor() -> std::io::Result<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let hard = lim.maximum.unwrap_or(1 << 20);
    let soft = lim.current.unwrap_or(hard);
    let floor = if hard >= soft.saturating_add(256) {
        soft
    } else {
        soft.saturating_sub(256).max(64)
    };
    let want = floor.saturating_add(RUNTIME_ROOM).min(hard);
    if want > soft {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: lim.maximum,
            },
        )?;
    }
    Ok(floor)
}
