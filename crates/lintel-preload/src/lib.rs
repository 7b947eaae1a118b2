//! The emulation library a program runs with (`LD_PRELOAD`, set up by
//! `lintel-run`): connect to the file service the launcher names, arm the
//! main thread (`lintel_unix::trap`), and arm each thread the program
//! makes. A library of its own, so that its `pthread_create` wrapper is
//! in no other program.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![cfg(target_arch = "x86_64")]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use lintel_unix::emulate::Emulation;
use lintel_unix::paths::Prefix;
use lintel_unix::trap;
use lintel_unix::{ENV_EXEC, ENV_FD_FLOOR, ENV_FRESH, ENV_PREFIX, ENV_SERVICE, ENV_SOCKET, ENV_STATIC};

mod rebind;

/// This process's emulation: made by the constructor, made anew by a
/// forked child (the parent's is left behind, never freed).
static EMULATION: AtomicPtr<Emulation> = AtomicPtr::new(std::ptr::null_mut());

fn current() -> Option<&'static Emulation> {
    // SAFETY: a non-null pointer here came from `Box::leak` and is never
    // freed.
    unsafe { EMULATION.load(Ordering::Acquire).as_ref() }
}

/// A connection to the file service and an emulation on it: the first
/// door the launcher's socket offers, or (joining a running system) the
/// service of that name, looked up through the supervisor's name service.
fn connect(prefix: Prefix) -> Option<&'static Emulation> {
    let sock = std::env::var_os(ENV_SOCKET)?;
    let door = match lintel::boot::connect(std::path::Path::new(&sock), &[]) {
        Ok(d) if !d.is_empty() => d[0].clone(),
        Ok(_) => {
            eprintln!("lintel-unix: the service offered no door");
            return None;
        }
        Err(e) => {
            eprintln!("lintel-unix: cannot reach the file service: {e}");
            return None;
        }
    };
    let door = match std::env::var(ENV_SERVICE) {
        Ok(name) => match lintel_system::Names::new(door).lookup(&name) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("lintel-unix: no file service `{name}`: {e}");
                return None;
            }
        },
        Err(_) => door,
    };
    let fs = lintel_fs::Fs::from_door(door);
    Some(Box::leak(Box::new(Emulation::new(fs, prefix))))
}

/// Run when the library is loaded: if the launcher set the environment,
/// connect and arm the main thread. Any failure leaves the program
/// running unemulated, and says why on stderr.
extern "C" fn start(_argc: libc::c_int, argv: *const *const libc::c_char, envp: *const *const libc::c_char) {
    let (Some(_), Some(prefix)) = (std::env::var_os(ENV_SOCKET), std::env::var_os(ENV_PREFIX)) else {
        return;
    };
    // Started by the launcher itself: nothing served to take in. The mark
    // goes before the program can copy its environment, so an image it
    // `exec`s (which may inherit served descriptors) looks for them.
    // SAFETY: the C runtime passes the process's environment vector,
    // ending with a null pointer, and the process has one thread.
    let fresh = unsafe { take_from_environment(envp, ENV_FRESH) };
    // Hosting a static program: the runtime's threads, started below,
    // must never run the program's signal handlers (see `trap`).
    let static_program = std::env::var_os(ENV_STATIC);
    // Never SIGSYS: once armed, a trap while it is blocked kills the
    // process (the host's allocator may make a call at any time).
    let mask = static_program
        .is_some()
        .then(|| trap::set_signal_mask(!trap::SIGSYS_BIT));
    use std::os::unix::ffi::OsStrExt;
    let Some(prefix) = Prefix::new(prefix.as_bytes()) else {
        eprintln!("lintel-unix: {ENV_PREFIX} must be an absolute path other than /");
        return;
    };
    // The runtime's descriptors go above the program's (see
    // `choose_descriptor_floor`); the launcher chose the floor.
    let floor = match std::env::var(ENV_FD_FLOOR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(f) => Ok(f),
        None => lintel_unix::choose_descriptor_floor(),
    };
    match floor {
        Ok(f) => lintel::set_descriptor_floor(f.min(i32::MAX as u64) as i32),
        Err(e) => eprintln!("lintel-unix: no room kept for the runtime's descriptors: {e}"),
    }
    if static_program.is_none() {
        // Before `connect` starts the runtime's threads.
        rebind::bind(&libc_entries());
    }
    if let Some(text) = rebind::text_of(do_read as *const () as usize) {
        trap::exempt_text(text);
    }
    let Some(emulation) = connect(prefix) else { return };
    lintel_unix::emulate::set_reviver(revive);
    trap::set_fork(static_fork);
    // Served files this image inherits from the one that exec'd it.
    if !fresh {
        emulation.adopt_inherited();
    }
    EMULATION.store(emulation as *const Emulation as *mut Emulation, Ordering::Release);
    if let Err(e) = trap::arm(emulation) {
        eprintln!("lintel-unix: cannot arm syscall user dispatch: {e}");
        if static_program.is_some() {
            std::process::exit(127);
        }
    }
    if let Some(path) = static_program {
        run_static(std::path::Path::new(&path), argv, envp, mask.unwrap_or(0));
    }
    if let Some(path) = std::env::var_os(ENV_EXEC) {
        run_served(emulation, &path, argv, envp);
    }
}

/// Take the variable `name` out of the environment vector `envp` (the
/// process's, which `environ` and the program's `main` see), as
/// `unsetenv` would; whether it was there. Not `unsetenv` itself: a
/// program may define its own (bash does, over its table of variables,
/// which it fills from this vector only once its `main` runs).
///
/// # Safety
///
/// `envp` is a null-terminated vector of C strings that nothing else
/// reads or writes meanwhile.
unsafe fn take_from_environment(envp: *const *const libc::c_char, name: &str) -> bool {
    let envp = envp as *mut *const libc::c_char;
    let mut found = false;
    let (mut from, mut to) = (0usize, 0usize);
    loop {
        // SAFETY: up to and including its null pointer, the vector is
        // ours to read (the caller's promise).
        let entry = unsafe { *envp.add(from) };
        if entry.is_null() {
            break;
        }
        // SAFETY: a non-null entry is a C string.
        let bytes = unsafe { std::ffi::CStr::from_ptr(entry) }.to_bytes();
        let named = bytes
            .strip_prefix(name.as_bytes())
            .is_some_and(|r| r.first() == Some(&b'='));
        if named {
            found = true;
        } else {
            // SAFETY: `to` <= `from`, both within the vector.
            unsafe { *envp.add(to) = entry };
            to += 1;
        }
        from += 1;
    }
    // SAFETY: `to` <= `from`, the index of the null pointer.
    unsafe { *envp.add(to) = std::ptr::null() };
    found
}

/// `exec` the served program `path` with this process's arguments and
/// environment (less [`ENV_EXEC`]): a forked child that could not reach
/// the service started this process to do it (`lintel_unix::emulate`).
/// Never returns: a program that cannot be started ends the process with
/// status 127.
fn run_served(
    e: &Emulation,
    path: &std::ffi::OsStr,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> ! {
    use std::os::unix::ffi::OsStrExt;
    let r = trap::allowed(|| {
        // SAFETY: the C runtime passes the process's environment vector,
        // ending with a null pointer.
        let envs = unsafe { c_strings(envp) };
        let named = |v: &std::ffi::CString| v.as_bytes().starts_with(format!("{ENV_EXEC}=").as_bytes());
        let kept: Vec<std::ffi::CString> = envs.into_iter().filter(|v| !named(v)).collect();
        let mut words: Vec<*const libc::c_char> = kept.iter().map(|v| v.as_ptr()).collect();
        words.push(std::ptr::null());
        let Ok(p) = std::ffi::CString::new(path.as_bytes()) else {
            return -(libc::ENOENT as i64);
        };
        e.exec_program(&p, argv as u64, words.as_ptr() as u64)
    });
    let why = std::io::Error::from_raw_os_error((-r) as i32);
    eprintln!("lintel-unix: cannot run {}: {why}", path.to_string_lossy());
    std::process::exit(127)
}

/// Load the static program at `path` with this process's arguments and
/// environment (less [`ENV_STATIC`]) and run it in static mode, with the
/// signal mask `mask` this process started with. Never returns: a
/// program that cannot be run ends the process with status 127.
fn run_static(
    path: &std::path::Path,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    mask: u64,
) -> ! {
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("lintel-unix: cannot run {}: {e}", path.display());
        std::process::exit(127)
    };
    // Armed since the constructor: our own work goes to the kernel.
    let (args, envs) = trap::allowed(|| {
        // SAFETY: the C runtime passes the process's argument and
        // environment vectors, each ending with a null pointer.
        let (args, envs) = unsafe { (c_strings(argv), c_strings(envp)) };
        let named = |v: &std::ffi::CString| v.as_bytes().starts_with(format!("{ENV_STATIC}=").as_bytes());
        (args, envs.into_iter().filter(|v| !named(v)).collect::<Vec<_>>())
    });
    // A served program is opened through the service (the kernel cannot
    // open the prefix's paths), a host one by its path.
    let load = || match current().and_then(|e| e.open_program(path)) {
        Some(Ok(file)) => lintel_unix::image::load_file(path, file, &args, &envs),
        Some(Err(e)) => Err(e),
        None => lintel_unix::image::load(path, &args, &envs),
    };
    let loaded = match trap::allowed(load) {
        Ok(l) => l,
        Err(e) => fail(&e),
    };
    if let Err(e) = trap::allowed(trap::enter_static_mode) {
        fail(&e);
    }
    trap::set_signal_mask(mask);
    loaded.start()
}

/// The C strings of a null-terminated vector, copied.
///
/// # Safety
///
/// `v` points to valid C string pointers up to a null one.
unsafe fn c_strings(v: *const *const libc::c_char) -> Vec<std::ffi::CString> {
    let mut out = Vec::new();
    for i in 0.. {
        // SAFETY: up to the null pointer, as the caller promises.
        let p = unsafe { *v.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: a valid C string, as the caller promises.
        out.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_owned());
    }
    out
}

// A constructor: the loader runs it before the program's `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static START: extern "C" fn(libc::c_int, *const *const libc::c_char, *const *const libc::c_char) = start;

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
    if let Some(e) = current() {
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
    if !trap::trapping() || trap::forked_child() {
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

// ---- the fast path: file calls the program makes through libc ----
//
// Trapping costs about 2.5 µs a call. For the calls programs make most,
// this library's own definitions of the libc functions take them first:
// a served descriptor is answered here (a read from the mapped window is
// a memcpy, no system call at all), any other one is a system call made
// directly, without the trap. A buffer is checked through the kernel the
// first time it is used (and again after the program changes its
// mappings), so a bad pointer gets EFAULT, as read(2) would give.

/// The emulation, if this thread runs the program's code under it.
fn emulation() -> Option<&'static Emulation> {
    if trap::trapping() && !trap::forked_child() {
        current()
    } else {
        None
    }
}

/// A libc-style result: the value, or -1 with `errno` set.
fn libc_ret(r: i64) -> isize {
    if r < 0 {
        // SAFETY: __errno_location returns this thread's errno.
        unsafe { *libc::__errno_location() = (-r) as i32 };
        -1
    } else {
        r as isize
    }
}

/// A call the fast path does not serve, made directly; in a forked child
/// the emulation looks at it first (a served descriptor gets `EIO` there,
/// see `Emulation::emulate`).
fn raw(nr: i64, args: [u64; 6]) -> isize {
    if trap::trapping()
        && trap::forked_child()
        && let Some(r) = current().and_then(|e| trap::allowed(|| e.emulate_call(nr, args)))
    {
        return libc_ret(r);
    }
    libc_ret(trap::raw_syscall(nr, args))
}

fn do_read(fd: i32, buf: *mut libc::c_void, count: usize, at: Option<u64>) -> isize {
    let nr = if at.is_some() {
        libc::SYS_pread64
    } else {
        libc::SYS_read
    };
    let args = [fd as u64, buf as u64, count as u64, at.unwrap_or(0), 0, 0];
    let Some(e) = emulation() else {
        return raw(nr, args);
    };
    if let Some(at) = at {
        e.prefetch(fd, at);
    }
    if !e.serves(fd) {
        return raw(nr, args);
    }
    match trap::allowed(|| lintel_unix::user::with_writable(buf as u64, count, |b| e.read_to(fd, b, at))) {
        Err(e) => libc_ret(-(e as i64)),
        Ok(Some(r)) => libc_ret(r),
        Ok(None) => raw(nr, args),
    }
}

fn do_write(fd: i32, buf: *const libc::c_void, count: usize, at: Option<u64>) -> isize {
    let nr = if at.is_some() {
        libc::SYS_pwrite64
    } else {
        libc::SYS_write
    };
    let args = [fd as u64, buf as u64, count as u64, at.unwrap_or(0), 0, 0];
    let Some(e) = emulation() else {
        return raw(nr, args);
    };
    if !e.serves(fd) {
        return raw(nr, args);
    }
    if !trap::allowed(|| lintel_unix::user::readable(buf as u64, count)) {
        return libc_ret(-(libc::EFAULT as i64));
    }
    // SAFETY: the kernel reads all `count` bytes at `buf` (checked above).
    let slice = unsafe { std::slice::from_raw_parts(buf as *const u8, count) };
    match trap::allowed(|| e.write_from(fd, slice, at)) {
        Some(r) => libc_ret(r),
        None => raw(nr, args),
    }
}

/// read(2), answered here for served descriptors.
///
/// # Safety
///
/// As `read(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: i32, buf: *mut libc::c_void, count: usize) -> isize {
    do_read(fd, buf, count, None)
}

/// pread64(2), answered here for served descriptors.
///
/// # Safety
///
/// As `pread(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: i32, buf: *mut libc::c_void, count: usize, off: i64) -> isize {
    if off < 0 {
        return libc_ret(-(libc::EINVAL as i64));
    }
    do_read(fd, buf, count, Some(off as u64))
}

/// pread(2) (the same function as `pread64` on x86-64).
///
/// # Safety
///
/// As `pread(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: i32, buf: *mut libc::c_void, count: usize, off: i64) -> isize {
    // SAFETY: the same contract.
    unsafe { pread64(fd, buf, count, off) }
}

/// write(2), answered here for served descriptors.
///
/// # Safety
///
/// As `write(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: i32, buf: *const libc::c_void, count: usize) -> isize {
    do_write(fd, buf, count, None)
}

/// pwrite64(2), answered here for served descriptors.
///
/// # Safety
///
/// As `pwrite(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(fd: i32, buf: *const libc::c_void, count: usize, off: i64) -> isize {
    if off < 0 {
        return libc_ret(-(libc::EINVAL as i64));
    }
    do_write(fd, buf, count, Some(off as u64))
}

/// pwrite(2) (the same function as `pwrite64` on x86-64).
///
/// # Safety
///
/// As `pwrite(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: i32, buf: *const libc::c_void, count: usize, off: i64) -> isize {
    // SAFETY: the same contract.
    unsafe { pwrite64(fd, buf, count, off) }
}

/// lseek(2), answered here for served descriptors (without a call while
/// the file's token is here).
///
/// # Safety
///
/// As `lseek(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek64(fd: i32, off: i64, whence: i32) -> i64 {
    let args = [fd as u64, off as u64, whence as u64, 0, 0, 0];
    match emulation() {
        Some(e) if e.serves(fd) => {
            let r = trap::allowed(|| e.emulate_call(libc::SYS_lseek, args));
            libc_ret(r.unwrap_or(-(libc::EBADF as i64))) as i64
        }
        _ => raw(libc::SYS_lseek, args) as i64,
    }
}

/// lseek(2) (the same function as `lseek64` on x86-64).
///
/// # Safety
///
/// As `lseek(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek(fd: i32, off: i64, whence: i32) -> i64 {
    // SAFETY: the same contract.
    unsafe { lseek64(fd, off, whence) }
}

// ---- calls on paths and descriptors, answered as the trap path does ----
//
// Opening, closing, `stat`ing and unlinking are what metadata-heavy
// programs (a build, Python's imports, a package manager) make most after
// reads and writes. Taken here, the emulation answers them as it answers
// the trapped call (the same `emulate_call`), without the signal: a served
// `open`+`close` pays two traps fewer. Calls glibc makes internally (not
// through these symbols) still trap and get the same answers.

/// System call `nr` as the emulation answers it when trapped, or made
/// directly when it does not serve it (or this thread is not the
/// program's).
fn emulated(nr: i64, args: [u64; 6]) -> isize {
    match emulation().and_then(|e| trap::allowed(|| e.emulate_call(nr, args))) {
        Some(r) => libc_ret(r),
        None => raw(nr, args),
    }
}

/// The mode an `open` passes: its third argument counts only when the call
/// may create (as glibc reads its variadic argument).
fn open_mode(flags: i32, mode: libc::mode_t) -> u64 {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        u64::from(mode)
    } else {
        0
    }
}

/// openat(2), answered by the emulation for served paths. (Declared with
/// the mode as a plain third argument: on x86-64 a variadic argument comes
/// in the same register, and it is read only when the flags say there is
/// one.)
///
/// # Safety
///
/// As `openat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: i32,
    path: *const libc::c_char,
    flags: i32,
    mode: libc::mode_t,
) -> i32 {
    let args = [
        dirfd as u64,
        path as u64,
        flags as u64,
        open_mode(flags, mode),
        0,
        0,
    ];
    emulated(libc::SYS_openat, args) as i32
}

/// openat64(2) (the same function as `openat` on x86-64).
///
/// # Safety
///
/// As `openat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: i32,
    path: *const libc::c_char,
    flags: i32,
    mode: libc::mode_t,
) -> i32 {
    // SAFETY: the same contract.
    unsafe { openat(dirfd, path, flags, mode) }
}

/// open(2), as glibc makes it: an `openat` from the working directory.
///
/// # Safety
///
/// As `open(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const libc::c_char, flags: i32, mode: libc::mode_t) -> i32 {
    // SAFETY: the same contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

/// open64(2) (the same function as `open` on x86-64).
///
/// # Safety
///
/// As `open(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const libc::c_char, flags: i32, mode: libc::mode_t) -> i32 {
    // SAFETY: the same contract.
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

/// close(2), answered by the emulation for served descriptors.
///
/// # Safety
///
/// As `close(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: i32) -> i32 {
    emulated(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]) as i32
}

/// fstatat(2) (`newfstatat`), answered by the emulation for served paths
/// and descriptors. glibc's `struct stat` is the kernel's on x86-64.
///
/// # Safety
///
/// As `fstatat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat(
    dirfd: i32,
    path: *const libc::c_char,
    buf: *mut libc::stat,
    flags: i32,
) -> i32 {
    let args = [dirfd as u64, path as u64, buf as u64, flags as u64, 0, 0];
    emulated(libc::SYS_newfstatat, args) as i32
}

/// fstatat64(2) (the same function as `fstatat` on x86-64).
///
/// # Safety
///
/// As `fstatat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat64(
    dirfd: i32,
    path: *const libc::c_char,
    buf: *mut libc::stat,
    flags: i32,
) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstatat(dirfd, path, buf, flags) }
}

/// stat(2), as glibc makes it: an `fstatat` from the working directory.
///
/// # Safety
///
/// As `stat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat(path: *const libc::c_char, buf: *mut libc::stat) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstatat(libc::AT_FDCWD, path, buf, 0) }
}

/// stat64(2) (the same function as `stat` on x86-64).
///
/// # Safety
///
/// As `stat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat64(path: *const libc::c_char, buf: *mut libc::stat) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstatat(libc::AT_FDCWD, path, buf, 0) }
}

/// lstat(2), as glibc makes it: an `fstatat` that does not follow.
///
/// # Safety
///
/// As `lstat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat(path: *const libc::c_char, buf: *mut libc::stat) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstatat(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

/// lstat64(2) (the same function as `lstat` on x86-64).
///
/// # Safety
///
/// As `lstat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat64(path: *const libc::c_char, buf: *mut libc::stat) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstatat(libc::AT_FDCWD, path, buf, libc::AT_SYMLINK_NOFOLLOW) }
}

/// fstat(2), answered by the emulation for served descriptors.
///
/// # Safety
///
/// As `fstat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat(fd: i32, buf: *mut libc::stat) -> i32 {
    emulated(libc::SYS_fstat, [fd as u64, buf as u64, 0, 0, 0, 0]) as i32
}

/// fstat64(2) (the same function as `fstat` on x86-64).
///
/// # Safety
///
/// As `fstat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat64(fd: i32, buf: *mut libc::stat) -> i32 {
    // SAFETY: the same contract.
    unsafe { fstat(fd, buf) }
}

/// unlinkat(2), answered by the emulation for served paths.
///
/// # Safety
///
/// As `unlinkat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlinkat(dirfd: i32, path: *const libc::c_char, flags: i32) -> i32 {
    emulated(
        libc::SYS_unlinkat,
        [dirfd as u64, path as u64, flags as u64, 0, 0, 0],
    ) as i32
}

/// unlink(2), as glibc makes it: an `unlinkat` from the working directory.
///
/// # Safety
///
/// As `unlink(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlink(path: *const libc::c_char) -> i32 {
    // SAFETY: the same contract.
    unsafe { unlinkat(libc::AT_FDCWD, path, 0) }
}

type Fork = unsafe extern "C" fn() -> libc::pid_t;

fn real_fork() -> Fork {
    static REAL: OnceLock<usize> = OnceLock::new();
    let f = *REAL.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; the
        // symbol found is libc's fork.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"fork".as_ptr()) as usize }
    });
    // SAFETY: the address is libc's fork, of this type.
    unsafe { std::mem::transmute::<usize, Fork>(f) }
}

/// Before a fork, each served file's placeholder records it (a call to the
/// service, allocation included: here, before glibc takes malloc's locks
/// for the fork), so a child that `exec`s hands its served descriptors to
/// the new image.
fn before_fork(e: Option<&Emulation>) {
    if let Some(e) = e {
        trap::allowed(|| e.record_all());
    }
}

/// In the child of a fork made through the `fork` wrapper, on its first
/// use of a served file (a fork that `exec`s at once pays nothing): a
/// lintel runtime of its own, connected to the service anew, and an
/// emulation that takes over the served files the parent recorded before
/// the fork (by key: the same open files, offsets shared) and its working
/// directory. If the service cannot be reached, the child stays as the
/// trap path left it: its use of served files fails with EIO.
fn revive() -> Option<&'static Emulation> {
    let parent = current()?;
    // Only once, and only in the child of a fork whose served files were
    // recorded (not a raw `clone` the wrappers did not see).
    if !trap::forked_child() || !RECORDED_FORK.swap(false, Ordering::AcqRel) {
        return None;
    }
    trap::allowed(|| {
        lintel::after_fork();
        let e = connect(parent.prefix().clone())?;
        e.inherit_cwd(parent);
        e.adopt_inherited();
        EMULATION.store(e as *const Emulation as *mut Emulation, Ordering::Release);
        trap::adopted_child(e);
        Some(e)
    })
}

/// A static program's fork (see `trap`), made as the `fork` wrapper makes
/// one: served files recorded, then libc's fork. (Called from the SIGSYS
/// handler, whose calls go to the kernel.)
fn static_fork() -> i64 {
    // SAFETY: libc's fork, as the program asked.
    let pid = unsafe { recorded_fork(current()) };
    if pid < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EAGAIN) as i64)
    } else {
        pid as i64
    }
}

/// Set (in the parent, copied into the child) while a wrapped fork is
/// made: its child may revive.
static RECORDED_FORK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// fork(2), with served files recorded for the child first (it gets a
/// runtime of its own when it first needs one: see `revive`).
///
/// # Safety
///
/// As `fork(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    // SAFETY: as fork(2), the caller's contract.
    unsafe { recorded_fork(emulation()) }
}

/// libc's fork, with `e`'s served files recorded first and the child
/// marked as one that may revive (see `revive`).
///
/// # Safety
///
/// As `fork(2)`.
unsafe fn recorded_fork(e: Option<&Emulation>) -> libc::pid_t {
    // A forked child that has not used a served file yet gets its own
    // runtime first: it records what its child inherits, and the fork
    // below would otherwise take its right to revive (a child that ran
    // `sh -c` and then opened a served file got a deferred placeholder).
    let e = match trap::forked_child() {
        true => revive().or(e),
        false => e,
    };
    before_fork(e);
    RECORDED_FORK.store(true, Ordering::Release);
    // SAFETY: libc's fork, as the caller asked.
    let pid = unsafe { real_fork()() };
    if pid != 0 {
        RECORDED_FORK.store(false, Ordering::Release);
    }
    pid
}

/// vfork(2), made a fork (POSIX allows it; a child sharing this memory
/// could not run through the library).
///
/// # Safety
///
/// As `vfork(2)`: the child may only `exec` or `_exit`, which a forked
/// child may do too.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: libc's fork in place of vfork, made as the `fork` wrapper
    // makes it. (Its child may only `exec` or `_exit`; the trap path
    // carries its served files and redirections to the image it `exec`s,
    // and an `exec` of a served program gives it a runtime first.)
    unsafe { recorded_fork(emulation()) }
}

// ---- more calls glibc makes as one system call each ----
//
// Answered as their traps would be (`emulated`): a served descriptor by
// the emulation, anything else directly. Wrapped so that a program's call
// and glibc's own (bound to these by `rebind`) make no trap.

macro_rules! one_call {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $nr:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As the system call's.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let mut args = [0u64; 6];
            let given = [$($arg as u64),*];
            args[..given.len()].copy_from_slice(&given);
            emulated($nr, args) as $ret
        }
    )*};
}

one_call! {
    /// fcntl(2) (the third argument, when there is one, is read as a
    /// word, as glibc reads it).
    fn fcntl64(fd: i32, cmd: i32, arg: u64) -> i32 = libc::SYS_fcntl;
    /// fcntl(2) (the same function as `fcntl64` on x86-64).
    fn fcntl(fd: i32, cmd: i32, arg: u64) -> i32 = libc::SYS_fcntl;
    /// fsync(2).
    fn fsync(fd: i32) -> i32 = libc::SYS_fsync;
    /// fdatasync(2).
    fn fdatasync(fd: i32) -> i32 = libc::SYS_fdatasync;
    /// ftruncate(2).
    fn ftruncate64(fd: i32, len: i64) -> i32 = libc::SYS_ftruncate;
    /// ftruncate(2) (the same function as `ftruncate64` on x86-64).
    fn ftruncate(fd: i32, len: i64) -> i32 = libc::SYS_ftruncate;
    /// fchown(2).
    fn fchown(fd: i32, uid: u32, gid: u32) -> i32 = libc::SYS_fchown;
    /// mmap(2) (the offset's alignment is the kernel's to check, as
    /// glibc's own check answers).
    fn mmap64(addr: *mut libc::c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut libc::c_void = libc::SYS_mmap;
    /// mmap(2) (the same function as `mmap64` on x86-64).
    fn mmap(addr: *mut libc::c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut libc::c_void = libc::SYS_mmap;
    /// munmap(2).
    fn munmap(addr: *mut libc::c_void, len: usize) -> i32 = libc::SYS_munmap;
    /// ioctl(2) (the third argument read as a word, as glibc reads it).
    fn ioctl(fd: i32, request: u64, arg: u64) -> i32 = libc::SYS_ioctl;
    /// dup(2).
    fn dup(fd: i32) -> i32 = libc::SYS_dup;
    /// dup2(2).
    fn dup2(fd: i32, to: i32) -> i32 = libc::SYS_dup2;
    /// dup3(2).
    fn dup3(fd: i32, to: i32, flags: i32) -> i32 = libc::SYS_dup3;
    /// access(2).
    fn access(path: *const libc::c_char, mode: i32) -> i32 = libc::SYS_access;
    /// statx(2).
    fn statx(dirfd: i32, path: *const libc::c_char, flags: i32, mask: u32, buf: *mut libc::c_void) -> i32 = libc::SYS_statx;
    /// getxattr(2).
    fn getxattr(path: *const libc::c_char, name: *const libc::c_char, value: *mut libc::c_void, size: usize) -> isize = libc::SYS_getxattr;
    /// lgetxattr(2).
    fn lgetxattr(path: *const libc::c_char, name: *const libc::c_char, value: *mut libc::c_void, size: usize) -> isize = libc::SYS_lgetxattr;
    /// fgetxattr(2).
    fn fgetxattr(fd: i32, name: *const libc::c_char, value: *mut libc::c_void, size: usize) -> isize = libc::SYS_fgetxattr;
    /// readlink(2).
    fn readlink(path: *const libc::c_char, buf: *mut libc::c_char, size: usize) -> isize = libc::SYS_readlink;
    /// mkdir(2).
    fn mkdir(path: *const libc::c_char, mode: u32) -> i32 = libc::SYS_mkdir;
    /// rmdir(2).
    fn rmdir(path: *const libc::c_char) -> i32 = libc::SYS_rmdir;
    /// rename(2).
    fn rename(from: *const libc::c_char, to: *const libc::c_char) -> i32 = libc::SYS_rename;
    /// chmod(2).
    fn chmod(path: *const libc::c_char, mode: u32) -> i32 = libc::SYS_chmod;
    /// fchmod(2).
    fn fchmod(fd: i32, mode: u32) -> i32 = libc::SYS_fchmod;
    /// getpid(2): nothing to emulate, but a trap costs what a hundred
    /// calls do. (glibc's own entries of these are too short to bind.)
    fn getpid() -> i32 = libc::SYS_getpid;
    /// getppid(2).
    fn getppid() -> i32 = libc::SYS_getppid;
    /// getuid(2).
    fn getuid() -> u32 = libc::SYS_getuid;
    /// geteuid(2).
    fn geteuid() -> u32 = libc::SYS_geteuid;
    /// getgid(2).
    fn getgid() -> u32 = libc::SYS_getgid;
    /// getegid(2).
    fn getegid() -> u32 = libc::SYS_getegid;
}

/// getdents64(2), with glibc's cap on the buffer's size (the kernel's
/// count is an `int`).
///
/// # Safety
///
/// As getdents64(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdents64(fd: i32, buf: *mut libc::c_void, len: usize) -> isize {
    let len = len.min(i32::MAX as usize);
    emulated(libc::SYS_getdents64, [fd as u64, buf as u64, len as u64, 0, 0, 0])
}

/// How many system calls this process has trapped so far (each a
/// SIGSYS, about 1.7 µs against 0.1 µs for a call a wrapper here takes):
/// for tests and tuning, found with `dlsym(RTLD_DEFAULT,
/// "lintel_unix_traps")` by a program that runs under `lintel-run`.
#[unsafe(no_mangle)]
pub extern "C" fn lintel_unix_traps() -> u64 {
    trap::traps()
}

/// The entries of glibc that `rebind` points at this library's wrappers:
/// each call's exported name (its aliases share its code), then the
/// internal ones glibc's own code calls (`GLIBC_PRIVATE`), each with the
/// wrapper it goes to.
fn libc_entries() -> Vec<rebind::Entry> {
    macro_rules! entries {
        ($($f:ident),* ; $($private:ident => $to:ident),*) => {
            vec![
                $(rebind::Entry { name: c_name!($f), version: None, to: $f as *const () as usize },)*
                $(rebind::Entry {
                    name: c_name!($private),
                    version: Some(c"GLIBC_PRIVATE"),
                    to: $to as *const () as usize,
                },)*
            ]
        };
    }
    macro_rules! c_name {
        ($f:ident) => {
            const {
                match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($f), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a name without a NUL inside"),
                }
            }
        };
    }
    entries![
        read, write, pread64, pwrite64, lseek64, open64, openat64, close, fstatat64, fstat64, stat64,
        lstat64, unlinkat, unlink, fcntl64, fsync, fdatasync, ftruncate64, fchown, mmap64, munmap,
        getdents64, ioctl, dup, dup2, dup3, access, statx, getxattr, lgetxattr, fgetxattr, readlink,
        mkdir, rmdir, rename, chmod, fchmod;
        __read_nocancel => read, __write_nocancel => write, __pread64_nocancel => pread64,
        __open64_nocancel => open64, __close_nocancel => close, __mmap => mmap64
    ]
}
