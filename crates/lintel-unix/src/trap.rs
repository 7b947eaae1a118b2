//! Trap emulation: a thread's system calls bounced back into the process
//! (Linux's syscall user dispatch, `PR_SET_SYSCALL_USER_DISPATCH`).
//!
//! An *armed* thread's `syscall` instructions raise SIGSYS instead of
//! entering the kernel, unless the thread's selector byte says ALLOW or
//! the instruction lies in the one exempt code range. The handler reads
//! the call from the signal context, answers it with the thread's
//! [`Emulator`] or makes it for real from the exempt range, and writes the
//! result where the caller expects it.
//!
//! What makes it safe to run anything in the handler:
//! - the selector is per thread (arming is per thread, and not inherited
//!   by threads, forks or exec), and the handler sets it to ALLOW while it
//!   runs, so its own calls (and the Rust code it runs) do not trap;
//! - the handler returns through a restorer of ours in the exempt range
//!   (glibc's lives in libc, whose `rt_sigreturn` would trap);
//! - SIGSYS is installed with `SA_NODEFER`, so a trap inside the handler
//!   (an application signal handler that interrupts it) is delivered, not
//!   fatal.
//!
//! A statically linked program (which no preload reaches) runs in
//! *static mode* ([`enter_static_mode`], [`crate::image`]): loaded into a
//! process the library already runs in, one thread, every call trapped.
//! Its C library points the FS register at thread data of its own, and
//! ours (Rust's thread-locals) is found through FS as well, so each way
//! in switches it: the SIGSYS handler's entry loads ours and its exit the
//! program's, the program's own signal handlers are entered through a
//! stub that loads the program's and restores whatever was there, and
//! `arch_prctl` on FS is answered by noting the program's value. Its
//! `brk` is answered from a region of its own (ours is the host's).
//!
//! x86-64 only.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

/// What an armed thread's trapped call becomes.
pub trait Emulator {
    /// `Some(result)` (a value, or `-errno`) to answer the call here;
    /// `None` to make it for real.
    fn emulate(&self, nr: i64, args: [u64; 6]) -> Option<i64>;

    /// Called just before the thread `exec`s (what the new image will need
    /// must be in place by then). Forks get no call here: glibc holds
    /// malloc's locks while it makes the system call; the preload library
    /// records what a child needs from its `fork` wrapper.
    fn before_fork_or_exec(&self) {}

    /// Called when an `exec` returned (it failed): undo what
    /// [`Emulator::before_fork_or_exec`] left for the new image.
    fn exec_failed(&self) {}

    /// An `execve` or `execveat` (`nr`, arguments `args` as trapped), after
    /// [`Emulator::before_fork_or_exec`]: `Some(-errno)` if the emulation
    /// made it and it failed (a program it serves, which the kernel cannot
    /// open; made, it never returns), `None` to make it as asked.
    fn exec(&self, _nr: i64, _args: [u64; 6]) -> Option<i64> {
        None
    }
}

const PR_SET_SYSCALL_USER_DISPATCH: i32 = 59;
const PR_SYS_DISPATCH_OFF: u64 = 0;
const PR_SYS_DISPATCH_ON: u64 = 1;
const ALLOW: u8 = 0;
const BLOCK: u8 = 1;
const SYS_USER_DISPATCH: i32 = 2;
const SA_RESTORER: u64 = 0x0400_0000;

// The exempt range: our signal restorer and a raw system call, in a
// section of their own so that nothing else lands between the labels.
std::arch::global_asm!(
    ".pushsection .text.lintel_trap,\"ax\",@progbits",
    ".globl lintel_trap_start",
    "lintel_trap_start:",
    ".globl lintel_trap_restorer",
    "lintel_trap_restorer:",
    "mov eax, 15",
    "syscall",
    "ud2",
    ".globl lintel_trap_syscall6",
    "lintel_trap_syscall6:",
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "mov r10, r8",
    "mov r8, r9",
    "mov r9, [rsp + 8]",
    "syscall",
    "ret",
    ".globl lintel_trap_end",
    "lintel_trap_end:",
    ".popsection",
);

// Static mode's ways in (outside the exempt range: they make no system
// call). FS bases are read and written with the FSGSBASE instructions.
std::arch::global_asm!(
    ".globl lintel_trap_sigsys_static",
    "lintel_trap_sigsys_static:",
    "push rbx",
    "mov rax, qword ptr [rip + {ours}]",
    "wrfsbase rax",
    "call {handler}",
    "mov rax, qword ptr [rip + {program}]",
    "wrfsbase rax",
    "pop rbx",
    "ret",
    ".globl lintel_trap_signal_static",
    "lintel_trap_signal_static:",
    "push rbx",
    "rdfsbase rbx",
    "mov rax, qword ptr [rip + {program}]",
    "wrfsbase rax",
    "lea rax, [rip + {handlers}]",
    "mov rax, qword ptr [rax + rdi * 8]",
    "call rax",
    "wrfsbase rbx",
    "pop rbx",
    "ret",
    ours = sym OUR_FS,
    program = sym PROGRAM_FS,
    handlers = sym PROGRAM_HANDLERS,
    handler = sym on_sigsys,
);

/// Static mode: our FS base, the program's, and the program's signal
/// handlers (entered through `lintel_trap_signal_static`). One thread.
static OUR_FS: AtomicU64 = AtomicU64::new(0);
static PROGRAM_FS: AtomicU64 = AtomicU64::new(0);
static PROGRAM_HANDLERS: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];
static STATIC_MODE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" {
    fn lintel_trap_sigsys_static();
    fn lintel_trap_signal_static();
    fn lintel_trap_start();
    fn lintel_trap_restorer();
    fn lintel_trap_syscall6(nr: i64, a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> i64;
    fn lintel_trap_end();
}

thread_local! {
    /// This thread's selector (read by the kernel at every system call
    /// once the thread is armed).
    static SELECTOR: Cell<u8> = const { Cell::new(ALLOW) };
    /// This thread's emulator, while armed.
    static EMULATOR: Cell<Option<&'static dyn Emulator>> = const { Cell::new(None) };
}

/// Set in a child forked by a trapped program: its copy of the lintel
/// runtime has no threads, and its calls must not go through it (until
/// the preload library gives it a runtime of its own, [`adopted_child`]).
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a child forked from a trapped program (it is
/// not armed: its calls go to the kernel until it `exec`s).
pub fn forked_child() -> bool {
    FORKED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The forked child has a lintel runtime and an emulator of its own now:
/// the calling thread (its only one) answers through `emulator`.
pub fn adopted_child(emulator: &'static dyn Emulator) {
    EMULATOR.with(|e| e.set(Some(emulator)));
    FORKED.store(false, std::sync::atomic::Ordering::SeqCst);
}

/// A system call made for real, from the exempt range: it never traps.
pub fn raw_syscall(nr: i64, args: [u64; 6]) -> i64 {
    // SAFETY: the stub passes the number and six words to the kernel as a
    // system call and returns its result; what the call does is the
    // caller's request, as with `libc::syscall`.
    unsafe { lintel_trap_syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5]) }
}

/// The kernel's `struct sigaction` for `rt_sigaction` on x86-64.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Whether this process runs a static program in static mode.
pub fn static_mode() -> bool {
    STATIC_MODE.load(Relaxed)
}

/// Whether the CPU and kernel let user space read and write the FS base
/// (FSGSBASE, reported in `AT_HWCAP2`): static mode needs it.
pub fn fs_base_switchable() -> bool {
    // SAFETY: getauxval reads the process's auxiliary vector.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    hwcap2 & 2 != 0
}

/// Enter static mode (see the module docs) on the calling thread, which
/// must be armed and stay the process's only trapped thread: SIGSYS is
/// entered through the stub that switches FS, and the program's FS
/// starts as ours (it sets its own before it uses one).
pub fn enter_static_mode() -> std::io::Result<()> {
    if !fs_base_switchable() {
        return Err(std::io::Error::other(
            "this CPU or kernel does not let user space switch the FS base (no FSGSBASE)",
        ));
    }
    let fs: u64;
    // SAFETY: reads this thread's FS base (FSGSBASE is enabled, checked
    // above); no memory is touched.
    unsafe { std::arch::asm!("rdfsbase {}", out(reg) fs, options(nomem, nostack, preserves_flags)) };
    OUR_FS.store(fs, SeqCst);
    PROGRAM_FS.store(fs, SeqCst);
    STATIC_MODE.store(true, SeqCst);
    let r = set_sigsys(lintel_trap_sigsys_static as *const () as usize);
    if r < 0 {
        return Err(std::io::Error::from_raw_os_error(-r as i32));
    }
    Ok(())
}

/// Static mode: what a trapped call becomes before the emulator sees it
/// (the FS base, the program's break), if anything.
fn static_call(nr: i64, a: [u64; 6]) -> Option<i64> {
    const ARCH_SET_FS: u64 = 0x1002;
    const ARCH_GET_FS: u64 = 0x1003;
    match nr {
        libc::SYS_arch_prctl if a[0] == ARCH_SET_FS => {
            if a[1] >= 1 << 47 {
                return Some(-(libc::EPERM as i64));
            }
            PROGRAM_FS.store(a[1], SeqCst);
            Some(0)
        }
        libc::SYS_arch_prctl if a[0] == ARCH_GET_FS => {
            let v = PROGRAM_FS.load(SeqCst).to_ne_bytes();
            Some(crate::user::write(a[1], &v).map_or_else(|e| -(e as i64), |()| 0))
        }
        libc::SYS_brk => Some(crate::image::brk(a[0]) as i64),
        // (Threads are refused, and posix_spawn's clone made a fork, by
        // the common path, as for any program: in static mode a thread
        // would also run the program without FS switching.)
        libc::SYS_clone if a[0] & libc::CLONE_VM as u64 == 0 => Some(static_fork(a[0], a[3])),
        libc::SYS_fork | libc::SYS_vfork => Some(static_fork(libc::SIGCHLD as u64, 0)),
        _ => None,
    }
}

/// The fork a static program asks for (`clone` with `flags`, child TID
/// at `ctid`): made by the host's C library through [`set_fork`]'s
/// function, so the host's allocator and the lintel runtime come through
/// whole and the child gets a runtime of its own, as a dynamically
/// linked program's child does. In the child, the program's own thread
/// data gets what its `clone` flags asked for.
fn static_fork(flags: u64, ctid: u64) -> i64 {
    let Some(fork) = FORK.get() else {
        return -(libc::ENOSYS as i64);
    };
    let r = fork();
    if r == 0 {
        FORKED.store(true, SeqCst);
        let _ = dispatch_on();
        if flags & libc::CLONE_CHILD_SETTID as u64 != 0 && ctid != 0 {
            let tid = raw_syscall(libc::SYS_gettid, [0; 6]) as i32;
            let _ = crate::user::write(ctid, &tid.to_ne_bytes());
        }
        if flags & libc::CLONE_CHILD_CLEARTID as u64 != 0 && ctid != 0 {
            raw_syscall(libc::SYS_set_tid_address, [ctid, 0, 0, 0, 0, 0]);
        }
    }
    r
}

/// How a static program forks: a function of the host's (the preload
/// library's `fork`, which records the served files for the child).
static FORK: std::sync::OnceLock<fn() -> i64> = std::sync::OnceLock::new();

/// Set how static programs fork (see `static_fork`); once.
pub fn set_fork(fork: fn() -> i64) {
    let _ = FORK.set(fork);
}

/// Make `entry` the SIGSYS handler (returning through our restorer): the
/// raw result of `rt_sigaction`.
fn set_sigsys(entry: usize) -> i64 {
    let act = KernelSigaction {
        handler: entry,
        flags: (libc::SA_SIGINFO | libc::SA_NODEFER) as u64 | SA_RESTORER,
        restorer: lintel_trap_restorer as *const () as usize,
        mask: 0,
    };
    raw_syscall(
        libc::SYS_rt_sigaction,
        [libc::SIGSYS as u64, &act as *const _ as u64, 0, 8, 0, 0],
    )
}

fn install_handler() -> std::io::Result<()> {
    static ONCE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let r = *ONCE.get_or_init(|| set_sigsys(on_sigsys as *const () as usize));
    if r < 0 {
        return Err(std::io::Error::from_raw_os_error(-r as i32));
    }
    Ok(())
}

/// Set the calling thread's signal mask to `set` (from the exempt range:
/// it never traps); the mask it had.
pub fn set_signal_mask(set: u64) -> u64 {
    let mut old = 0u64;
    raw_syscall(
        libc::SYS_rt_sigprocmask,
        [
            libc::SIG_SETMASK as u64,
            &set as *const u64 as u64,
            &mut old as *mut u64 as u64,
            8,
            0,
            0,
        ],
    );
    old
}

/// Arm the calling thread: from now on its system calls go to `emulator`
/// (which answers them or lets them through), until [`disarm`].
pub fn arm(emulator: &'static dyn Emulator) -> std::io::Result<()> {
    install_handler()?;
    EMULATOR.with(|e| e.set(Some(emulator)));
    SELECTOR.with(|s| s.set(ALLOW));
    let r = dispatch_on();
    if r < 0 {
        EMULATOR.with(|e| e.set(None));
        return Err(std::io::Error::from_raw_os_error(-r as i32));
    }
    SELECTOR.with(|s| s.set(BLOCK));
    Ok(())
}

/// The exempt range when widened by [`exempt_text`] (start, end); zeros:
/// the trampoline alone.
static EXEMPT: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Widen the exempt range to `text`, the executable segment of the
/// library this module is linked into, which must hold the trampoline;
/// `false` (and nothing changed) if it does not. Threads armed from then
/// on make the library's own system calls (its inlined `rustix` calls: a
/// served read's `pread`) with no work of the dispatch's: the kernel
/// tests the address against the range before it reads the selector
/// byte, and a call from inside the range is the kernel's at once. The
/// program's calls, and the library's through libc, trap or not by the
/// selector as before. For a library of its own only (the preload
/// library): in a program that links this module in, the range would be
/// the program's text, whose calls must trap.
pub fn exempt_text(text: std::ops::Range<usize>) -> bool {
    let Some((start, end)) = widened(&text, &trampoline()) else {
        return false;
    };
    EXEMPT[0].store(start, Relaxed);
    EXEMPT[1].store(end, Relaxed);
    true
}

/// The trampoline's addresses: the exempt range unless widened.
fn trampoline() -> std::ops::Range<usize> {
    lintel_trap_start as *const () as usize..lintel_trap_end as *const () as usize
}

/// The exempt range `text` makes, if it holds all of `trampoline`.
fn widened(text: &std::ops::Range<usize>, trampoline: &std::ops::Range<usize>) -> Option<(u64, u64)> {
    (text.start <= trampoline.start && trampoline.end <= text.end && trampoline.start < trampoline.end)
        .then_some((text.start as u64, text.end as u64))
}

/// Turn dispatch on for the calling thread, with this thread's selector
/// and the exempt range: used by [`arm`], and again in a forked child
/// (whose memory holds the emulator but whose arming is gone).
fn dispatch_on() -> i64 {
    let (start, end) = match (EXEMPT[0].load(Relaxed), EXEMPT[1].load(Relaxed)) {
        (s, e) if s < e => (s, e),
        _ => {
            let t = trampoline();
            (t.start as u64, t.end as u64)
        }
    };
    let sel = SELECTOR.with(|s| s.as_ptr() as u64);
    raw_syscall(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH as u64,
            PR_SYS_DISPATCH_ON,
            start,
            end - start,
            sel,
            0,
        ],
    )
}

/// Disarm the calling thread: its system calls go to the kernel again.
pub fn disarm() {
    SELECTOR.with(|s| s.set(ALLOW));
    raw_syscall(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH as u64,
            PR_SYS_DISPATCH_OFF,
            0,
            0,
            0,
            0,
        ],
    );
    EMULATOR.with(|e| e.set(None));
}

/// Whether the calling thread is armed and in the program's code (its
/// calls trap).
pub fn trapping() -> bool {
    SELECTOR.with(|s| s.get()) == BLOCK
}

/// Run `f` with the calling thread's calls going to the kernel (inside
/// the emulation, or for work of the library's own).
pub fn allowed<R>(f: impl FnOnce() -> R) -> R {
    let before = SELECTOR.with(|s| s.replace(ALLOW));
    let r = f();
    SELECTOR.with(|s| s.set(before));
    r
}

/// System calls trapped in this process so far ([`traps`]).
static TRAPS: AtomicU64 = AtomicU64::new(0);

/// How many system calls this process's armed threads have trapped (each
/// a SIGSYS): the calls that no wrapper took first.
pub fn traps() -> u64 {
    TRAPS.load(Relaxed)
}

extern "C" fn on_sigsys(_sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let before = SELECTOR.with(|s| s.replace(ALLOW));
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // SAFETY: and a valid ucontext, ours to edit until we return.
    let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
    if code == SYS_USER_DISPATCH {
        TRAPS.fetch_add(1, Relaxed);
        let g = &uc.uc_mcontext.gregs;
        let nr = g[libc::REG_RAX as usize];
        let args = [
            g[libc::REG_RDI as usize] as u64,
            g[libc::REG_RSI as usize] as u64,
            g[libc::REG_RDX as usize] as u64,
            g[libc::REG_R10 as usize] as u64,
            g[libc::REG_R8 as usize] as u64,
            g[libc::REG_R9 as usize] as u64,
        ];
        let early = if STATIC_MODE.load(Relaxed) {
            static_call(nr, args)
        } else {
            None
        };
        let answer = early.unwrap_or_else(|| answer(uc, nr, args));
        uc.uc_mcontext.gregs[libc::REG_RAX as usize] = answer;
    }
    SELECTOR.with(|s| s.set(before));
}

/// A trapped call's answer, as for any program (static mode's own calls
/// are answered before, by `static_call`).
fn answer(uc: &mut libc::ucontext_t, nr: i64, args: [u64; 6]) -> i64 {
    match nr {
        // A new thread (or vfork child) made from here would start on
        // its own stack inside our stub and crash: refuse, so glibc's
        // clone3 falls back to clone, and clone sharing memory fails
        // cleanly. Threads are made with the selector at ALLOW
        // ([`allowed`]; the preload library wraps pthread_create).
        libc::SYS_clone3 => -(libc::ENOSYS as i64),
        // posix_spawn's (and `system`'s) child: a vfork-like clone on a
        // stack of its own. Made a fork (no shared memory, as `vfork`
        // here), which resumes on that stack as the real clone would;
        // the parent still waits for its `exec` (CLONE_VFORK). What it
        // loses: an `exec` failure is not written back into the
        // parent's memory, so the parent sees a child exiting 127.
        libc::SYS_clone if is_spawn_clone(args[0]) && args[1] != 0 => {
            let flags = args[0] & !(libc::CLONE_VM as u64);
            let r = raw_syscall(libc::SYS_clone, [flags, 0, args[2], args[3], args[4], 0]);
            if r == 0 {
                FORKED.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = dispatch_on();
                uc.uc_mcontext.gregs[libc::REG_RSP as usize] = args[1] as i64;
            }
            r
        }
        libc::SYS_clone if args[0] & libc::CLONE_VM as u64 != 0 => -(libc::ENOSYS as i64),
        // A fork is made from here: the child returns through its copy
        // of this frame. `vfork` becomes a fork (which POSIX allows):
        // sharing memory, the child would start inside our stub.
        // (What a child needs is recorded before, where it is safe to
        // allocate: glibc's fork holds malloc's locks by the time it
        // makes this call. The preload library wraps fork and vfork.)
        libc::SYS_clone | libc::SYS_fork | libc::SYS_vfork => {
            let (nr, a) = match nr {
                libc::SYS_clone => (nr, args),
                _ => (libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            };
            let r = raw_syscall(nr, a);
            if r == 0 {
                // The child: arming is not inherited, and its copy of
                // the lintel runtime has no threads. It is armed again
                // (so the emulation can note the served files it opens
                // before it execs) and marked a forked child.
                FORKED.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = dispatch_on();
            }
            r
        }
        libc::SYS_execve | libc::SYS_execveat => {
            let e = EMULATOR.with(|e| e.get());
            if let Some(e) = e {
                e.before_fork_or_exec();
            }
            // A served program is started by the emulation; a static one
            // through its host (see `image::hosted`; the buffers live
            // until the call returns).
            let r = match e.and_then(|e| e.exec(nr, args)) {
                Some(r) => r,
                None => {
                    let hosted = (nr == libc::SYS_execve)
                        .then(|| crate::image::hosted(args[0], args[2], STATIC_MODE.load(Relaxed)))
                        .flatten();
                    match &hosted {
                        Some(h) => raw_syscall(nr, [h.path(), args[1], h.envp(), 0, 0, 0]),
                        None => raw_syscall(nr, args),
                    }
                }
            };
            if let Some(e) = e {
                e.exec_failed();
            }
            r
        }
        libc::SYS_rt_sigprocmask => sigprocmask(uc, args),
        libc::SYS_rt_sigaction => sigaction(args),
        _ => EMULATOR
            .with(|e| e.get())
            .and_then(|e| emulate_masked(e, nr, args))
            .unwrap_or_else(|| raw_syscall(nr, args)),
    }
}

/// The emulator's answer. In static mode with every signal but SIGSYS blocked: the
/// runtime may start threads while it answers, and they must never run
/// the program's handlers (they would do so with our thread data), so
/// they start with every signal but SIGSYS blocked; the program's signals wait for
/// the handler's return, which restores its mask.
fn emulate_masked(e: &dyn Emulator, nr: i64, args: [u64; 6]) -> Option<i64> {
    if !STATIC_MODE.load(Relaxed) {
        return e.emulate(nr, args);
    }
    let old = set_signal_mask(!SIGSYS_BIT);
    let r = e.emulate(nr, args);
    set_signal_mask(old);
    r
}

/// A clone that makes a process which shares our memory only until it
/// `exec`s or exits (`CLONE_VM | CLONE_VFORK`, no thread, no new TLS):
/// what posix_spawn makes.
fn is_spawn_clone(flags: u64) -> bool {
    let f = flags as i32;
    let must = libc::CLONE_VM | libc::CLONE_VFORK;
    let never = libc::CLONE_THREAD | libc::CLONE_SETTLS | libc::CLONE_SIGHAND | libc::CLONE_FILES;
    f & must == must && f & never == 0
}

/// SIGSYS's bit in a signal mask (never blocked in an armed thread).
pub const SIGSYS_BIT: u64 = 1 << (libc::SIGSYS - 1);

/// `rt_sigprocmask` from trapped code: made on the mask the handler's
/// return restores (one made for real here would be undone by it), and
/// never blocking SIGSYS (a trap while it is blocked kills the process).
fn sigprocmask(uc: &mut libc::ucontext_t, a: [u64; 6]) -> i64 {
    let (how, set, old, size) = (a[0] as i32, a[1], a[2], a[3]);
    if size != 8 {
        return -(libc::EINVAL as i64);
    }
    // SAFETY: `sigset_t` is at least 8 bytes; the kernel's mask is its
    // first word.
    let mask = unsafe { &mut *(&mut uc.uc_sigmask as *mut libc::sigset_t as *mut u64) };
    if old != 0
        && let Err(e) = crate::user::write(old, &mask.to_ne_bytes())
    {
        return -(e as i64);
    }
    if set != 0 {
        let mut b = [0u8; 8];
        if let Err(e) = crate::user::read_into(set, &mut b) {
            return -(e as i64);
        }
        let new = u64::from_ne_bytes(b);
        *mask = match how {
            libc::SIG_BLOCK => *mask | new,
            libc::SIG_UNBLOCK => *mask & !new,
            libc::SIG_SETMASK => new,
            _ => return -(libc::EINVAL as i64),
        } & !SIGSYS_BIT;
    }
    0
}

/// `rt_sigaction` from trapped code: SIGSYS stays ours (the program's
/// setting is accepted and ignored), and every handler returns through
/// our restorer (glibc's would trap its `rt_sigreturn`).
fn sigaction(a: [u64; 6]) -> i64 {
    let (sig, act, old, size) = (a[0] as i32, a[1], a[2], a[3]);
    if sig == libc::SIGSYS {
        if old != 0
            && let Err(e) = crate::user::write(old, &[0u8; 32])
        {
            return -(e as i64);
        }
        return 0;
    }
    let before = if STATIC_MODE.load(Relaxed) && (1..65).contains(&sig) {
        PROGRAM_HANDLERS[sig as usize].load(SeqCst)
    } else {
        0
    };
    if act == 0 {
        let r = raw_syscall(libc::SYS_rt_sigaction, a);
        if r == 0 {
            unstub(old, before);
        }
        return r;
    }
    let mut b = [0u8; 32];
    if let Err(e) = crate::user::read_into(act, &mut b) {
        return -(e as i64);
    }
    let flags = u64::from_ne_bytes(b[8..16].try_into().expect("8 bytes"));
    if flags & SA_RESTORER != 0 {
        let ours = lintel_trap_restorer as *const () as usize as u64;
        b[16..24].copy_from_slice(&ours.to_ne_bytes());
    }
    let handler = u64::from_ne_bytes(b[0..8].try_into().expect("8 bytes"));
    let wrapped = STATIC_MODE.load(Relaxed) && handler > 1 && (1..65).contains(&sig);
    if wrapped {
        // Entered through the stub that gives it the program's FS.
        let stub = lintel_trap_signal_static as *const () as usize as u64;
        b[0..8].copy_from_slice(&stub.to_ne_bytes());
        PROGRAM_HANDLERS[sig as usize].store(handler, SeqCst);
    }
    let r = raw_syscall(
        libc::SYS_rt_sigaction,
        [sig as u64, b.as_ptr() as u64, old, size, 0, 0],
    );
    if r == 0 {
        unstub(old, before);
    }
    r
}

/// Static mode: the old action `rt_sigaction` wrote at `old` names the
/// program's own handler `handler`, never the stub it is entered by.
fn unstub(old: u64, handler: u64) {
    let stub = lintel_trap_signal_static as *const () as usize as u64;
    let mut o = [0u8; 8];
    if old != 0
        && handler != 0
        && crate::user::read_into(old, &mut o).is_ok()
        && u64::from_ne_bytes(o) == stub
    {
        let _ = crate::user::write(old, &handler.to_ne_bytes());
    }
}

/// A new descriptor (close-on-exec) of whatever `fd` is, owned: `Err`
/// the negative errno if the kernel made none.
pub fn dup_owned(fd: u64) -> Result<std::os::fd::OwnedFd, i64> {
    use std::os::fd::FromRawFd;
    let dup = raw_syscall(libc::SYS_fcntl, [fd, libc::F_DUPFD_CLOEXEC as u64, 0, 0, 0, 0]);
    if dup < 0 {
        return Err(dup);
    }
    // SAFETY: the kernel just made `dup` for this call alone: nothing
    // else owns or closes it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(dup as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    struct Counting {
        seen: AtomicU64,
    }

    impl Emulator for Counting {
        fn emulate(&self, nr: i64, _args: [u64; 6]) -> Option<i64> {
            self.seen.fetch_add(1, SeqCst);
            match nr {
                libc::SYS_getppid => Some(4242),
                libc::SYS_getuid => Some(-(libc::EPERM as i64)),
                _ => None,
            }
        }
    }

    #[test]
    fn the_exempt_range_widens_only_to_text_that_holds_the_trampoline() {
        let t = 0x1000..0x1040;
        assert_eq!(widened(&(0x800..0x9000), &t), Some((0x800, 0x9000)));
        assert_eq!(widened(&t, &t), Some((0x1000, 0x1040)));
        assert_eq!(widened(&(0x1010..0x9000), &t), None, "starts inside it");
        assert_eq!(widened(&(0x800..0x1030), &t), None, "ends inside it");
        assert_eq!(widened(&(0x2000..0x9000), &t), None, "elsewhere");
        let real = trampoline();
        assert!(!exempt_text(0..real.start), "text before the trampoline");
        assert_eq!(EXEMPT[1].load(Relaxed), 0, "a refusal changes nothing");
    }

    #[test]
    fn an_armed_threads_calls_are_answered_in_the_process() {
        static EMU: Counting = Counting {
            seen: AtomicU64::new(0),
        };
        let real_ppid = std::os::unix::process::parent_id();
        let (r, w) = {
            let mut fds = [0; 2];
            // SAFETY: pipe writes two descriptors into the array.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            (fds[0], fds[1])
        };
        arm(&EMU).unwrap();
        // SAFETY: plain system calls through libc, trapped and answered.
        let ppid = unsafe { libc::getppid() };
        // SAFETY: as above; getuid answered with an error (raw, as the
        // kernel would: libc's getuid cannot fail, so read the raw call).
        let uid = unsafe { libc::syscall(libc::SYS_getuid) };
        // SAFETY: a write to our own pipe, trapped and made for real.
        let wrote = unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
        disarm();
        assert_eq!(ppid, 4242, "emulated");
        assert_eq!(uid, -1, "an emulated error");
        assert_eq!(wrote, 1, "passed through to the kernel");
        let mut b = [0u8; 1];
        // SAFETY: reading the byte back from our pipe, disarmed.
        assert_eq!(unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) }, 1);
        assert_eq!(&b, b"x");
        assert!(EMU.seen.load(SeqCst) >= 3, "every call went to the emulator");
        // SAFETY: disarmed: the real parent's pid again.
        assert_eq!(unsafe { libc::getppid() } as u32, real_ppid);
        // SAFETY: closing our own pipe.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }

    #[test]
    fn threads_are_made_with_the_selector_allowing_and_are_not_armed() {
        static EMU: Counting = Counting {
            seen: AtomicU64::new(0),
        };
        arm(&EMU).unwrap();
        // A raw clone3 from trapped code is refused (it would start the
        // thread inside the handler's stub), not a crash.
        // SAFETY: clone3 with no arguments; answered before the kernel.
        let raw = unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        // Threads are made with the selector at ALLOW (the preload library
        // wraps pthread_create so), and are not armed.
        let other = allowed(|| {
            std::thread::spawn(|| {
                // SAFETY: a plain system call.
                unsafe { libc::getppid() }
            })
        })
        .join()
        .unwrap();
        disarm();
        assert_eq!((raw, errno), (-1, Some(libc::ENOSYS)));
        assert_eq!(
            other as u32,
            std::os::unix::process::parent_id(),
            "the new thread is not armed"
        );
    }
}

#[cfg(test)]
mod signal_tests {
    use super::*;

    struct Nothing;
    impl Emulator for Nothing {
        fn emulate(&self, _: i64, _: [u64; 6]) -> Option<i64> {
            None
        }
    }

    fn blocked(sig: i32) -> bool {
        // SAFETY: sigset_t is plain data; pthread_sigmask fills it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
            libc::sigismember(&set, sig) == 1
        }
    }

    #[test]
    fn masks_set_by_trapped_code_hold_and_never_block_sigsys() {
        static EMU: Nothing = Nothing;
        arm(&EMU).unwrap();
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::sigaddset(&mut set, libc::SIGSYS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let (usr1, sys) = (blocked(libc::SIGUSR1), blocked(libc::SIGSYS));
        // SAFETY: as above, unblocking SIGUSR1 again.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        let usr1_after = blocked(libc::SIGUSR1);
        disarm();
        assert_eq!((usr1, sys, usr1_after), (true, false, false));
    }
}
