//! The unwinder goes into the library and `lintel-run` statically.
//!
//! Rust's standard library on glibc targets links the unwinder as
//! `-lgcc_s`: every program the library is preloaded into would load
//! `libgcc_s.so.1` as well, whose loading and start-up (it probes the
//! CPU's features with `cpuid`, which traps to the hypervisor on a virtual
//! machine) cost about 110 µs per process started, measured against
//! `/bin/true` on the machines this is built on. GCC's static unwinder,
//! `libgcc_eh.a`, serves the same `_Unwind_*` calls. It is offered to the
//! linker under the name the standard library asks for, in a directory
//! searched first; the library's version script keeps its symbols local,
//! so a program's own unwinder (a C++ program's) is not interposed. If the
//! compiler has no `libgcc_eh.a`, nothing changes.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(out) = Command::new(&cc).arg("-print-file-name=libgcc_eh.a").output() else {
        return;
    };
    let eh = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !eh.is_absolute() || !eh.exists() {
        return;
    }
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        return;
    };
    let dir = PathBuf::from(out_dir).join("static-unwind");
    if std::fs::create_dir_all(&dir).is_err() || std::fs::copy(&eh, dir.join("libgcc_s.a")).is_err() {
        return;
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}
