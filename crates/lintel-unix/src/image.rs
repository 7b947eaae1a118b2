//! A statically linked program run in a process the emulation library
//! already runs in: what the kernel's `exec` would do for it, done here,
//! so that its every system call comes to the emulation (`LD_PRELOAD`
//! never reaches a static binary, and syscall user dispatch does not
//! survive `exec`).
//!
//! [`load`] maps the program's `PT_LOAD` segments (at their addresses for
//! `ET_EXEC`, at a base of our choosing for a static PIE), builds a fresh
//! stack as the kernel lays it out (argument and environment strings and
//! pointers, the auxiliary vector with the program's headers, entry
//! point, 16 random bytes, the vDSO and hardware capabilities passed
//! through), and [`Loaded::start`] jumps to the entry point with the
//! thread armed in static mode ([`crate::trap::enter_static_mode`]).
//! The program's `brk` gets a region of its own ([`brk`]): the process's
//! break belongs to the host program's allocator.
//!
//! What it does not do: programs that make threads (refused, see
//! `trap`), a program interpreter (a dynamically linked program runs
//! under the preload library instead), set-user-ID bits (never honoured).
use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use goblin::elf::{Elf, header, program_header as ph};
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

const PAGE: u64 = 4096;
const STACK: usize = 8 << 20;
/// Room for the program's `brk` heap (reserved, committed as it grows).
const BRK_SPAN: u64 = 1 << 30;

fn page_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

fn page_up(x: u64) -> u64 {
    (x + PAGE - 1) & !(PAGE - 1)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Whether `path` is a statically linked ELF program (no interpreter):
/// one the preload library never reaches, to run in static mode.
pub fn is_static(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    if f.take(64 << 10).read_to_end(&mut head).is_err() {
        return false;
    }
    is_static_head(&head)
}

/// Whether a file that starts with `head` (its first 64 KiB, or all of
/// it if shorter) is a statically linked ELF program: see [`is_static`].
pub fn is_static_head(head: &[u8]) -> bool {
    let Ok(h) = Elf::parse_header(head) else {
        return false;
    };
    let ctx = goblin::container::Ctx::new(
        goblin::container::Container::Big,
        goblin::container::Endian::Little,
    );
    let is_program = h.e_ident[header::EI_CLASS] == header::ELFCLASS64
        && h.e_machine == header::EM_X86_64
        && matches!(h.e_type, header::ET_EXEC | header::ET_DYN)
        && h.e_entry != 0;
    is_program
        && ph::ProgramHeader::parse(head, h.e_phoff as usize, h.e_phnum as usize, ctx)
            .is_ok_and(|phs| phs.iter().all(|p| p.p_type != ph::PT_INTERP))
}

/// The static program this process runs (static mode).
static LOADED: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// The path of the static program this process runs (static mode), as
/// it was named (a served one: its path under the prefix).
pub fn loaded() -> Option<&'static std::path::Path> {
    LOADED.get().map(|p| p.as_path())
}

/// An `execve` of a static program, made through the program's host
/// instead (the launcher, whose preload library runs it in static mode):
/// the host's path, and the environment with [`crate::env::ENV_STATIC`] naming
/// the program. Owns what the call's pointers point to.
pub struct Hosted {
    path: CString,
    /// `ENV_STATIC=program`, which `envp` points to.
    _named: CString,
    envp: Vec<u64>,
}

impl Hosted {
    /// The path to `execve`.
    pub fn path(&self) -> u64 {
        self.path.as_ptr() as u64
    }
    /// The environment to `execve` with.
    pub fn envp(&self) -> u64 {
        self.envp.as_ptr() as u64
    }
}

/// If the program `execve`s (path at `path`, environment at `envp`, both
/// in the program's memory) a static program, what to `execve` instead:
/// the host, with the program named in the environment. In static mode,
/// `/proc/self/exe` is the static program (how busybox runs its own
/// applets), not the host. `None`: exec as asked (and the kernel says
/// what is wrong with it, if anything).
pub fn hosted(path: u64, envp: u64, static_mode: bool) -> Option<Hosted> {
    let p = crate::user::cstr(path).ok()?;
    let self_exe = p == b"/proc/self/exe" || p == format!("/proc/{}/exe", std::process::id()).as_bytes();
    let target = match (self_exe, static_mode) {
        (true, true) => LOADED.get()?.clone(),
        (true, false) => return None,
        _ => std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&p)),
    };
    if !is_static(&target) {
        return None;
    }
    host_exec(target.as_os_str().as_bytes(), envp, static_mode)
}

/// What to `execve` to run the static program `target` (a host path, or
/// a served one, which the host opens through the service): the host,
/// with the program's environment at `envp` (in the program's memory) and
/// `target` named in it.
pub fn host_exec(target: &[u8], envp: u64, static_mode: bool) -> Option<Hosted> {
    host_exec_naming(crate::env::ENV_STATIC, target, envp, static_mode)
}

/// What to `execve` to start the host with `var=value` in the program's
/// environment at `envp` (in place of any `var` there).
pub fn host_exec_naming(var: &str, value: &[u8], envp: u64, static_mode: bool) -> Option<Hosted> {
    let host: std::path::PathBuf = if static_mode {
        std::fs::read_link("/proc/self/exe").ok()?
    } else {
        std::env::var_os(crate::env::ENV_HOST)?.into()
    };
    let mut envp_words = Vec::new();
    if envp != 0 {
        for i in 0..65_536u64 {
            let mut w = [0u8; 8];
            crate::user::read_into(envp + 8 * i, &mut w).ok()?;
            let at = u64::from_ne_bytes(w);
            if at == 0 {
                break;
            }
            let entry = crate::user::cstr(at).ok()?;
            if !entry.starts_with(format!("{var}=").as_bytes()) {
                envp_words.push(at);
            }
        }
    }
    let mut named = var.as_bytes().to_vec();
    named.push(b'=');
    named.extend_from_slice(value);
    let named = CString::new(named).ok()?;
    envp_words.push(named.as_ptr() as u64);
    envp_words.push(0);
    Some(Hosted {
        path: CString::new(host.as_os_str().as_bytes()).ok()?,
        _named: named,
        envp: envp_words,
    })
}

/// Where `program` is: itself if it names a path, else the first
/// executable of that name on `PATH` (as `execvp` looks).
pub fn on_path(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(program.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// A program mapped and its stack built, ready to [`start`](Loaded::start).
pub struct Loaded {
    entry: u64,
    sp: u64,
}

/// Map the static program at `path` and build its stack with `argv` and
/// `envp`. The caller's calls must go to the kernel (`trap::allowed`).
pub fn load(path: &std::path::Path, argv: &[CString], envp: &[CString]) -> io::Result<Loaded> {
    load_file(path, std::fs::File::open(path)?, argv, envp)
}

/// [`load`] the static program open at `file` (named `path`: what the
/// program sees as its own path, `AT_EXECFN` and `/proc/self/exe` to an
/// `execve`).
pub fn load_file(
    path: &std::path::Path,
    file: std::fs::File,
    argv: &[CString],
    envp: &[CString],
) -> io::Result<Loaded> {
    let bytes = {
        use std::io::Read;
        let mut b = Vec::new();
        (&file).read_to_end(&mut b)?;
        b
    };
    let elf = Elf::parse(&bytes).map_err(|e| invalid(&format!("not an ELF file: {e}")))?;
    if !elf.is_64 || elf.header.e_machine != header::EM_X86_64 {
        return Err(invalid("not an x86-64 program"));
    }
    if elf.interpreter.is_some() {
        return Err(invalid("dynamically linked: run it under the preload library"));
    }
    let pie = match elf.header.e_type {
        header::ET_EXEC => false,
        header::ET_DYN => true,
        _ => return Err(invalid("not an executable")),
    };
    let loads: Vec<&ph::ProgramHeader> = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == ph::PT_LOAD)
        .collect();
    let lo = loads
        .iter()
        .map(|p| page_down(p.p_vaddr))
        .min()
        .ok_or_else(|| invalid("nothing to load"))?;
    let hi = loads
        .iter()
        .map(|p| p.p_vaddr.checked_add(p.p_memsz).map(page_up))
        .try_fold(0u64, |m, e| e.map(|e| m.max(e)))
        .ok_or_else(|| invalid("a segment wraps around"))?;

    // The span, reserved first so a segment never lands on something of
    // ours: at its own address for ET_EXEC, anywhere for a PIE.
    let span = (hi - lo) as usize;
    let (want, fixed) = if pie {
        (std::ptr::null_mut(), MapFlags::empty())
    } else {
        (lo as *mut std::ffi::c_void, MapFlags::FIXED_NOREPLACE)
    };
    // SAFETY: a fresh reservation; FIXED_NOREPLACE fails rather than
    // replace anything already mapped.
    let at = unsafe { rustix::mm::mmap_anonymous(want, span, ProtFlags::empty(), MapFlags::PRIVATE | fixed) }
        .map_err(|e| io::Error::other(format!("cannot reserve {span} bytes at {lo:#x}: {e}")))?;
    if !pie && at as u64 != lo {
        return Err(invalid("the kernel placed the program elsewhere"));
    }
    let bias = if pie { at as u64 - lo } else { 0 };

    for p in &loads {
        let start = page_down(p.p_vaddr) + bias;
        let file_end = p.p_vaddr + p.p_filesz + bias;
        let mem_end = page_up(p.p_vaddr + p.p_memsz) + bias;
        let writable = ProtFlags::READ | ProtFlags::WRITE;
        if p.p_filesz > 0 {
            let len = (page_up(file_end) - start) as usize;
            // SAFETY: inside the reservation made above (MAP_FIXED
            // replaces only our own reservation's pages).
            unsafe {
                rustix::mm::mmap(
                    start as *mut _,
                    len,
                    writable,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                    file.as_fd(),
                    page_down(p.p_offset),
                )
            }?;
            // The bss's start shares the file's last page: zero its tail.
            let tail = (page_up(file_end) - file_end) as usize;
            if p.p_memsz > p.p_filesz && tail > 0 {
                // SAFETY: the page was just mapped writable and private.
                unsafe { std::ptr::write_bytes(file_end as *mut u8, 0, tail) };
            }
        }
        let anon_from = if p.p_filesz > 0 { page_up(file_end) } else { start };
        if mem_end > anon_from {
            // SAFETY: inside the reservation, as above.
            unsafe {
                rustix::mm::mmap_anonymous(
                    anon_from as *mut _,
                    (mem_end - anon_from) as usize,
                    writable,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                )
            }?;
        }
        let mut prot = MprotectFlags::empty();
        if p.p_flags & ph::PF_R != 0 {
            prot |= MprotectFlags::READ;
        }
        if p.p_flags & ph::PF_W != 0 {
            prot |= MprotectFlags::WRITE;
        }
        if p.p_flags & ph::PF_X != 0 {
            prot |= MprotectFlags::EXEC;
        }
        // SAFETY: the segment's own pages, mapped above.
        unsafe { rustix::mm::mprotect(start as *mut _, (mem_end - start) as usize, prot) }?;
    }

    // Where the program headers are in memory.
    let phdr = match elf.program_headers.iter().find(|p| p.p_type == ph::PT_PHDR) {
        Some(p) => p.p_vaddr + bias,
        None => loads
            .iter()
            .find(|p| p.p_offset == 0)
            .map(|p| p.p_vaddr + elf.header.e_phoff + bias)
            .ok_or_else(|| invalid("the program headers are not loaded"))?,
    };
    let aux = Aux {
        phdr,
        phnum: elf.header.e_phnum as u64,
        entry: elf.header.e_entry + bias,
    };
    let sp = build_stack(path, argv, envp, &aux)?;
    let _ = LOADED.set(path.to_path_buf());
    Ok(Loaded { entry: aux.entry, sp })
}

struct Aux {
    phdr: u64,
    phnum: u64,
    entry: u64,
}

/// The initial stack, as the kernel lays it out for `exec`: from the top,
/// strings and random bytes, then (16-aligned) argc, argv, NULL, envp,
/// NULL, the auxiliary vector. Returns the stack pointer to start with.
fn build_stack(path: &std::path::Path, argv: &[CString], envp: &[CString], aux: &Aux) -> io::Result<u64> {
    // SAFETY: a fresh private mapping at an address the kernel picks.
    let base = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            STACK,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::STACK,
        )
    }? as u64;
    let mut top = base + STACK as u64;
    let mut push_bytes = |b: &[u8]| -> u64 {
        top -= b.len() as u64;
        // SAFETY: inside the stack mapping (strings are far smaller than
        // 8 MiB; `load`'s callers pass a program's arguments).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), top as *mut u8, b.len()) };
        top
    };
    let execfn = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))?;
    let execfn = push_bytes(execfn.as_bytes_with_nul());
    let platform = push_bytes(b"x86_64\0");
    let mut random = [0u8; 16];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
    let random = push_bytes(&random);
    let envs: Vec<u64> = envp.iter().map(|e| push_bytes(e.as_bytes_with_nul())).collect();
    let args: Vec<u64> = argv.iter().map(|a| push_bytes(a.as_bytes_with_nul())).collect();

    // SAFETY: getauxval reads this process's auxiliary vector.
    let ours = |t| unsafe { libc::getauxval(t) };
    let auxv: Vec<(u64, u64)> = vec![
        (libc::AT_PHDR, aux.phdr),
        (libc::AT_PHENT, 56),
        (libc::AT_PHNUM, aux.phnum),
        (libc::AT_PAGESZ, PAGE),
        (libc::AT_BASE, 0),
        (libc::AT_FLAGS, 0),
        (libc::AT_ENTRY, aux.entry),
        (libc::AT_UID, ours(libc::AT_UID)),
        (libc::AT_EUID, ours(libc::AT_EUID)),
        (libc::AT_GID, ours(libc::AT_GID)),
        (libc::AT_EGID, ours(libc::AT_EGID)),
        (libc::AT_SECURE, 0),
        (libc::AT_RANDOM, random),
        (libc::AT_HWCAP, ours(libc::AT_HWCAP)),
        (libc::AT_HWCAP2, ours(libc::AT_HWCAP2)),
        (libc::AT_CLKTCK, ours(libc::AT_CLKTCK)),
        (libc::AT_SYSINFO_EHDR, ours(libc::AT_SYSINFO_EHDR)),
        (libc::AT_MINSIGSTKSZ, ours(libc::AT_MINSIGSTKSZ)),
        (libc::AT_PLATFORM, platform),
        (libc::AT_EXECFN, execfn),
        (libc::AT_NULL, 0),
    ];
    let mut words: Vec<u64> = Vec::new();
    words.push(args.len() as u64);
    words.extend(&args);
    words.push(0);
    words.extend(&envs);
    words.push(0);
    for (k, v) in auxv {
        words.push(k);
        words.push(v);
    }
    let sp = (top - 8 * words.len() as u64) & !15;
    if sp < base + PAGE {
        return Err(invalid("arguments too long"));
    }
    for (i, w) in words.iter().enumerate() {
        // SAFETY: inside the stack mapping (checked above), 8-aligned.
        unsafe { std::ptr::write((sp + 8 * i as u64) as *mut u64, *w) };
    }
    Ok(sp)
}

impl Loaded {
    /// Enter static mode and jump to the program: its calls trap from its
    /// first instruction on. Never returns; the program's `exit` ends the
    /// process.
    pub fn start(self) -> ! {
        // SAFETY: the stack and entry point were built by `load` as the
        // kernel would; rdx (a function for `atexit`) is 0, as from the
        // kernel. Nothing of ours runs on this thread again but the
        // SIGSYS handler.
        unsafe {
            std::arch::asm!(
                "mov rsp, {sp}",
                "xor ebp, ebp",
                "xor edx, edx",
                "jmp {entry}",
                sp = in(reg) self.sp,
                entry = in(reg) self.entry,
                options(noreturn),
            )
        }
    }
}

/// The program's break: `[start, cur)` used of a reservation that ends at
/// `end` (0s before the first call).
static BREAK: Mutex<(u64, u64, u64)> = Mutex::new((0, 0, 0));

/// `brk(want)` for the static program: the new break, or the current one
/// if `want` cannot be had (how the kernel answers a failed `brk`).
pub fn brk(want: u64) -> u64 {
    // Buffers checked before may be gone (`user`).
    crate::user::mappings_changed();
    let mut b = BREAK.lock().unwrap_or_else(|e| e.into_inner());
    if b.0 == 0 {
        // SAFETY: a fresh reservation at an address the kernel picks.
        match unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                BRK_SPAN as usize,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        } {
            Ok(p) => *b = (p as u64, p as u64, p as u64 + BRK_SPAN),
            Err(_) => return 0,
        }
    }
    let (start, cur, end) = *b;
    if want < start || want > end {
        return cur;
    }
    if want > cur {
        let from = page_up(cur);
        let to = page_up(want);
        if to > from {
            // SAFETY: pages of our own reservation.
            let made = unsafe {
                rustix::mm::mprotect(
                    from as *mut _,
                    (to - from) as usize,
                    MprotectFlags::READ | MprotectFlags::WRITE,
                )
            };
            if made.is_err() {
                return cur;
            }
        }
    }
    b.1 = want;
    want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_break_grows_and_shrinks_inside_its_region_only() {
        let start = brk(0);
        assert_ne!(start, 0);
        assert_eq!(brk(start + 10_000), start + 10_000);
        // SAFETY: the program's heap, now committed: written and read.
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 7, 10_000);
            assert_eq!(*((start + 9_999) as *const u8), 7);
        }
        assert_eq!(brk(start + 5), start + 5, "shrinks");
        assert_eq!(
            brk(start + BRK_SPAN + 1),
            start + 5,
            "beyond the region: unchanged"
        );
        assert_eq!(brk(start - 1), start + 5, "below it too");
        assert_eq!(brk(0), start + 5);
    }

    #[test]
    fn dynamically_linked_programs_and_non_programs_are_refused() {
        let none: [CString; 0] = [];
        let e = load(std::path::Path::new("/bin/sh"), &none, &none).err().unwrap();
        assert!(e.to_string().contains("dynamically linked"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), b"#!/bin/sh\n").unwrap();
        assert!(load(&dir.path().join("x"), &none, &none).is_err());
    }
}
