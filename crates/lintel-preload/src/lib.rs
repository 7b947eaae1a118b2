//! The emulation library a program runs with (`LD_PRELOAD`, set up by
//! `lintel-run`): connect to the file service the launcher names, arm the
//! main thread (`lintel_unix::trap`), and arm each thread the program
//! makes. A library of its own, so that its `pthread_create` wrapper is
//! in no other program.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![cfg(target_arch = "x86_64")]

use std::sync::OnceLock;

use lintel_unix::emulate::Emulation;
use lintel_unix::paths::Prefix;
use lintel_unix::trap;
use lintel_unix::{ENV_PREFIX, ENV_SOCKET};

static EMULATION: OnceLock<Emulation> = OnceLock::new();

/// Run when the library is loaded: if the launcher set the environment,
/// connect and arm the main thread. Any failure leaves the program
/// running unemulated, and says why on stderr.
extern "C" fn start() {
    let (Some(sock), Some(prefix)) = (std::env::var_os(ENV_SOCKET), std::env::var_os(ENV_PREFIX)) else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let Some(prefix) = Prefix::new(prefix.as_bytes()) else {
        eprintln!("lintel-unix: {ENV_PREFIX} must be an absolute path other than /");
        return;
    };
    let doors = match lintel::boot::connect(std::path::Path::new(&sock), &[]) {
        Ok(d) if !d.is_empty() => d,
        Ok(_) => return eprintln!("lintel-unix: the service offered no door"),
        Err(e) => return eprintln!("lintel-unix: cannot reach the file service: {e}"),
    };
    let fs = lintel_fs::Fs::from_door(doors[0].clone());
    let emulation = EMULATION.get_or_init(|| Emulation::new(fs, prefix));
    if let Err(e) = trap::arm(emulation) {
        eprintln!("lintel-unix: cannot arm syscall user dispatch: {e}");
    }
}

// A constructor: the loader runs it before the program's `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static START: extern "C" fn() = start;

type StartRoutine = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut libc::c_void,
) -> i32;

fn real_pthread_create() -> PthreadCreate {
    static REAL: OnceLock<usize> = OnceLock::new();
    let f = *REAL.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; the
        // symbol found is libc's pthread_create.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) as usize }
    });
    // SAFETY: the address is libc's pthread_create, of this type.
    unsafe { std::mem::transmute::<usize, PthreadCreate>(f) }
}

struct Start {
    routine: StartRoutine,
    arg: *mut libc::c_void,
}

extern "C" fn armed_start(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `p` is the `Start` boxed by `pthread_create` below, given to
    // this thread alone.
    let s = unsafe { Box::from_raw(p as *mut Start) };
    if let Some(e) = EMULATION.get() {
        let _ = trap::arm(e);
    }
    (s.routine)(s.arg)
}

/// The program's threads are emulated like its main thread: a thread made
/// from the program's code (its creator trapping) is armed before it runs
/// the program's routine. Threads the library makes itself (the lintel
/// runtime's) are not.
///
/// # Safety
///
/// As `pthread_create(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: StartRoutine,
    arg: *mut libc::c_void,
) -> i32 {
    let real = real_pthread_create();
    if !trap::trapping() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(thread, attr, routine, arg) };
    }
    let boxed = Box::into_raw(Box::new(Start { routine, arg })) as *mut libc::c_void;
    // The clone must not be made from trapped code.
    // SAFETY: the caller's thread handle and attributes, our start routine
    // and its box.
    let r = trap::allowed(|| unsafe { real(thread, attr, armed_start, boxed) });
    if r != 0 {
        // SAFETY: the thread was not made: the box is still ours.
        drop(unsafe { Box::from_raw(boxed as *mut Start) });
    }
    r
}
