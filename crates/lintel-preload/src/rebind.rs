//! glibc's own calls bound to this library's wrappers.
//!
//! The wrappers in `lib.rs` take a program's calls through the dynamic
//! linker. glibc's calls from inside itself do not go that way: `fopen`,
//! `fread`, `fclose`, `opendir` and locale loading call its internal entry
//! points (`__open`, `__read`, `__close_nocancel`, ...) directly, so each
//! of those traps: a SIGSYS, about 1.7 µs on the test machine against
//! 0.1 µs for a plain call. A C program writing a file with stdio makes
//! four such calls per file; `sqlite3` reading its script, one per 4 KiB.
//!
//! At load, before any thread starts, each such entry point of glibc is
//! overwritten with a jump to the wrapper for the same call (`jmp
//! [rip+0]` and the wrapper's address: 14 bytes, no register touched),
//! so glibc's internal calls meet the same answers as the program's own.
//!
//! An entry is patched only when glibc's symbol table gives its size, it
//! is at least the jump's size, no jump inside it lands within the bytes
//! the jump replaces, and it has no jump through a register or a table
//! (read at every offset, so that none is missed; a false match only
//! leaves that entry as it was). An entry that cannot be found or
//! checked is left alone and traps as before: the answers are the same
//! either way, only slower. `LINTEL_UNIX_REBIND=0` in the environment
//! leaves every entry alone.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};

/// The jump: `jmp qword ptr [rip+0]`, then the target's address.
const JUMP: usize = 14;

/// An entry of glibc to bind: its name, its version (`None`: the default
/// one) and the wrapper it jumps to.
pub(crate) struct Entry {
    pub(crate) name: &'static CStr,
    pub(crate) version: Option<&'static CStr>,
    pub(crate) to: usize,
}

/// Bind each of `entries` that passes the checks; how many were bound.
/// Call before the process has a second thread.
pub(crate) fn bind(entries: &[Entry]) -> usize {
    if std::env::var_os(lintel_unix::ENV_REBIND).is_some_and(|v| v == "0") {
        return 0;
    }
    // SAFETY: dlopen with RTLD_NOLOAD only looks up a loaded object by a
    // NUL-terminated name; it loads nothing.
    let handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return 0;
    }
    let found: Vec<(usize, usize, &CStr)> = entries
        .iter()
        .filter_map(|e| {
            // SAFETY: dlsym and dlvsym look a NUL-terminated name (and
            // version) up in the handle's object.
            let at = unsafe {
                match e.version {
                    Some(v) => libc::dlvsym(handle, e.name.as_ptr(), v.as_ptr()),
                    None => libc::dlsym(handle, e.name.as_ptr()),
                }
            };
            (!at.is_null() && at as usize != e.to).then_some((at as usize, e.to, e.name))
        })
        .collect();
    // SAFETY: the handle from dlopen above, released once (libc stays).
    unsafe { libc::dlclose(handle) };
    let Some(&(first, _, _)) = found.first() else {
        return 0;
    };
    let Some(image) = Image::containing(first) else {
        return 0;
    };
    let mut jumps: Vec<(usize, usize)> = Vec::new();
    for &(at, to, name) in &found {
        if jumps.iter().any(|&(a, _)| a == at) {
            continue; // an alias of an entry bound already
        }
        let Some(size) = image.size_of(name, at) else {
            continue;
        };
        if !(JUMP..=1 << 16).contains(&size) || !image.text_holds(at, size) {
            continue;
        }
        // SAFETY: the symbol's `size` bytes at its address are its code,
        // inside glibc's text segment (checked just above).
        let code = unsafe { std::slice::from_raw_parts(at as *const u8, size) };
        if !enters_jump(code) {
            jumps.push((at, to));
        }
    }
    // SAFETY: each `at` starts a function of glibc's text at least JUMP
    // bytes long (its symbol's size), entered only at its start within
    // those bytes (checked above), and the process has one thread.
    match unsafe { write_jumps(&jumps) } {
        Ok(()) => jumps.len(),
        Err(_) => 0,
    }
}

/// The executable segment of the loaded object that holds `at`.
pub(crate) fn text_of(at: usize) -> Option<std::ops::Range<usize>> {
    Image::containing(at).map(|i| i.text)
}

/// The loaded glibc: where it is and its dynamic symbols.
struct Image {
    base: usize,
    /// Its executable segment, as addresses.
    text: std::ops::Range<usize>,
    /// Its dynamic symbols, their names and their GNU hash table.
    symtab: usize,
    strtab: usize,
    gnu_hash: usize,
}

impl Image {
    /// The loaded object whose executable segment holds `at`.
    fn containing(at: usize) -> Option<Image> {
        struct Search {
            at: usize,
            found: Option<Image>,
        }
        unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
            // SAFETY: dl_iterate_phdr passes a valid `info` and our
            // `Search`, both for the length of this call.
            let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
            // SAFETY: the object's program headers, `dlpi_phnum` of them.
            let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
            let base = info.dlpi_addr as usize;
            let text = headers
                .iter()
                .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
                .map(|h| base + h.p_vaddr as usize..base + (h.p_vaddr + h.p_memsz) as usize)
                .find(|r| r.contains(&search.at));
            let dynamic = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC);
            let (Some(text), Some(d)) = (text, dynamic) else {
                return 0;
            };
            // SAFETY: the object's dynamic section, loaded with it.
            let tables = unsafe { tables(base, (base + d.p_vaddr as usize) as *const Dyn) };
            if let Some((symtab, strtab, gnu_hash)) = tables {
                search.found = Some(Image {
                    base,
                    text,
                    symtab,
                    strtab,
                    gnu_hash,
                });
            }
            1
        }
        let mut search = Search { at, found: None };
        // SAFETY: `visit` matches the callback's type and reads `search`
        // only during the walk.
        unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
        search.found
    }

    /// Whether `len` bytes at `at` lie in the executable segment.
    fn text_holds(&self, at: usize, len: usize) -> bool {
        self.text.start <= at && at + len <= self.text.end
    }

    /// The size of the function symbol named `name` found at `at`, from
    /// the object's dynamic symbol table, looked up through its GNU hash
    /// table (which touches a few of the table's pages, not all).
    fn size_of(&self, name: &CStr, at: usize) -> Option<usize> {
        let (symtab, strtab) = (self.symtab, self.strtab);
        let hash = name
            .to_bytes()
            .iter()
            .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
        let table = self.gnu_hash as *const u32;
        // SAFETY: the GNU hash table as the loader reads it: a header of
        // four words (buckets, first hashed symbol, bloom words, shift),
        // the 64-bit bloom words, the buckets, then one chain word per
        // hashed symbol, the last of each chain marked by its low bit; the
        // symbols and their names in the tables the section names.
        unsafe {
            let (buckets, first, bloom) = (*table as usize, *table.add(1) as usize, *table.add(2) as usize);
            if buckets == 0 {
                return None;
            }
            let bucket = table.add(4 + bloom * 2);
            let chain = bucket.add(buckets);
            let mut i = *bucket.add(hash as usize % buckets) as usize;
            if i < first {
                return None;
            }
            loop {
                let word = *chain.add(i - first);
                let sym = &*(symtab as *const libc::Elf64_Sym).add(i);
                if word | 1 == hash | 1
                    && sym.st_info & 0xf == STT_FUNC
                    && self.base + sym.st_value as usize == at
                    && CStr::from_ptr((strtab + sym.st_name as usize) as *const libc::c_char) == name
                {
                    return Some(sym.st_size as usize);
                }
                if word & 1 != 0 {
                    return None;
                }
                i += 1;
            }
        }
    }
}

/// Where the dynamic section at `dynamic` of the object loaded at `base`
/// puts its symbols, their names and their GNU hash table, as addresses.
///
/// # Safety
///
/// `dynamic` is a loaded object's dynamic section.
unsafe fn tables(base: usize, dynamic: *const Dyn) -> Option<(usize, usize, usize)> {
    let (mut symtab, mut strtab, mut gnu_hash) = (0, 0, 0);
    // The loader may have relocated the entries in place or not.
    let addr = |p: u64| {
        if (p as usize) < base {
            base + p as usize
        } else {
            p as usize
        }
    };
    for i in 0.. {
        // SAFETY: the dynamic section is an array ended by DT_NULL.
        let d = unsafe { &*dynamic.add(i) };
        match d.tag {
            0 => break,
            DT_SYMTAB => symtab = addr(d.value),
            DT_STRTAB => strtab = addr(d.value),
            DT_GNU_HASH => gnu_hash = addr(d.value),
            _ => {}
        }
    }
    (symtab != 0 && strtab != 0 && gnu_hash != 0).then_some((symtab, strtab, gnu_hash))
}

/// An entry of a dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    tag: u64,
    value: u64,
}

const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_GNU_HASH: u64 = 0x6fff_fef5;
const STT_FUNC: u8 = 2;

/// Whether a jump or call in `code` (a whole function) may land within
/// its first [`JUMP`] bytes, other than at its start: a direct one that
/// does, or a jump through a register or a table (a `switch`'s jump
/// table, whose targets the code does not show).
///
/// Every offset is read as if an instruction started there, so a real
/// jump is never missed; bytes that only look like one refuse the patch.
pub(crate) fn enters_jump(code: &[u8]) -> bool {
    let lands = |next: usize, rel: i64| {
        let to = next as i64 + rel;
        to > 0 && to < JUMP as i64
    };
    let rel32 = |at: usize| {
        code.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| i64::from(i32::from_le_bytes(b)))
    };
    (0..code.len()).any(|i| match code[i] {
        // jcc, jmp, loop and jrcxz with an 8-bit displacement
        0x70..=0x7f | 0xe0..=0xe3 | 0xeb => code.get(i + 1).is_some_and(|&r| lands(i + 2, r as i8 as i64)),
        // call and jmp with a 32-bit displacement
        0xe8 | 0xe9 => rel32(i + 1).is_some_and(|r| lands(i + 5, r)),
        // jcc with a 32-bit displacement
        0x0f => matches!(code.get(i + 1), Some(0x80..=0x8f)) && rel32(i + 2).is_some_and(|r| lands(i + 6, r)),
        // jmp through a register, or through a table indexed by one
        0xff => matches!(code.get(i + 1), Some(0xe0..=0xe7 | 0x24)),
        _ => false,
    })
}

/// The bytes that jump to `to` from wherever they are.
pub(crate) fn jump_to(to: usize) -> [u8; JUMP] {
    let mut code = [0u8; JUMP];
    code[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    code[6..].copy_from_slice(&(to as u64).to_le_bytes());
    code
}

/// Overwrite the code at each `at` with a jump to its `to`: one change
/// of protection over them all, and signals held meanwhile.
///
/// # Safety
///
/// Each `at` starts a function of at least [`JUMP`] bytes in one text
/// segment, entered only at its start within them, which no thread runs
/// meanwhile.
unsafe fn write_jumps(jumps: &[(usize, usize)]) -> std::io::Result<()> {
    let (Some(low), Some(high)) = (
        jumps.iter().map(|j| j.0).min(),
        jumps.iter().map(|j| j.0 + JUMP).max(),
    ) else {
        return Ok(());
    };
    let page = low & !4095;
    let len = high.next_multiple_of(4096) - page;
    let protect = |prot| {
        // SAFETY: the pages are glibc's text (the caller's promise);
        // changing their protection changes no byte.
        match unsafe { libc::mprotect(page as *mut c_void, len, prot) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    // Executable all along: glibc's `mprotect` may share the pages.
    protect(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC)?;
    let (all, mut before) = (!0u64, 0u64);
    // SAFETY: rt_sigprocmask reads and writes the two 8-byte masks.
    unsafe { libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_BLOCK, &all, &mut before, 8) };
    for &(at, to) in jumps {
        let code = jump_to(to);
        // SAFETY: the pages are writable now, and the caller promises the
        // bytes are the function's and nobody runs them.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), at as *mut u8, JUMP) };
    }
    // SAFETY: as above, restoring the mask read then.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &before,
            std::ptr::null_mut::<u64>(),
            8,
        )
    };
    // Back to glibc's text protections.
    protect(libc::PROT_READ | libc::PROT_EXEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's `__close_nocancel`: its only jump lands past the
    /// patch.
    const CLOSE_NOCANCEL: &[u8] = &[
        0xb8, 0x03, 0, 0, 0, // mov eax, 3
        0x0f, 0x05, // syscall
        0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, // cmp rax, -4096
        0x77, 0x01, // ja +1 (to 0x10)
        0xc3, // ret
        0x48, 0x8b, 0x15, 0x69, 0x5f, 0x0d, 0x00, // mov rdx, [rip+..]
        0xf7, 0xd8, // neg eax
        0x64, 0x89, 0x02, // mov fs:[rdx], eax
        0xb8, 0xff, 0xff, 0xff, 0xff, // mov eax, -1
        0xc3, // ret
    ];

    #[test]
    fn a_syscall_wrapper_can_be_bound() {
        assert!(!enters_jump(CLOSE_NOCANCEL));
    }

    #[test]
    fn a_loop_back_into_the_patched_bytes_refuses_it() {
        let mut code = CLOSE_NOCANCEL.to_vec();
        // jmp -0x1d from offset 0x20: lands at 5, the syscall.
        code.extend_from_slice(&[0xeb, (5i64 - (code.len() as i64 + 2)) as i8 as u8]);
        assert!(enters_jump(&code));
        // jne rel32 to offset 7.
        let mut far = CLOSE_NOCANCEL.to_vec();
        let next = far.len() + 6;
        far.extend_from_slice(&[0x0f, 0x85]);
        far.extend_from_slice(&((7 - next as i64) as i32).to_le_bytes());
        assert!(enters_jump(&far));
        // A jump back to the very start is a new call: allowed.
        let mut restart = CLOSE_NOCANCEL.to_vec();
        restart.extend_from_slice(&[0xeb, (0i64 - (restart.len() as i64 + 2)) as i8 as u8]);
        assert!(!enters_jump(&restart));
    }

    #[test]
    fn a_jump_whose_target_the_code_does_not_show_refuses_it() {
        for jump in [[0xff, 0xe0], [0xff, 0xe2], [0xff, 0x24]] {
            let mut code = CLOSE_NOCANCEL.to_vec();
            code.extend_from_slice(&jump);
            assert!(enters_jump(&code), "{jump:x?}");
        }
    }

    #[test]
    fn the_jump_names_its_target_whole() {
        let code = jump_to(0x1122_3344_5566_7788);
        assert_eq!(&code[..6], &[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(code[6..].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
    }
}
