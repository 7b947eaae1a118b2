//! fsx (`third_party/fsx`) on a file of a running system's file service:
//! the service in a domain of its own, booted from a manifest, and fsx
//! joining it through `lintel-run --manifest` (the other way a program
//! reaches a file service; `crates/lintel-preload/tests/fsx.rs` runs it
//! with the service `lintel-run` exports itself). fsx is a C program, so
//! the emulation is the only way it reaches a file service: there is no
//! kernel mount of one.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// fsx, built by `third_party/fsx/build.sh` into the target directory.
fn fsx() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsx");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/fsx/build.sh");
    let out = Command::new("sh").arg(&script).arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "third_party/fsx/build.sh (needs cc and patch: build-essential) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("fsx")
}

/// 260,000 fsx turns (about 107,000 real operations: reads, writes,
/// mapped reads and writes, truncates), seed 1, the flags of
/// `crates/lintel-preload/tests/fsx.rs` (fallocate, punch hole, zero,
/// collapse and insert range and copy range off: see
/// `third_party/fsx/README.md`).
#[test]
fn fsx_through_a_running_systems_file_service() {
    let run = common::lintel_run();
    let fsx = fsx();
    // On a tmpfs if there is one: fsx's mapped writes end with
    // msync(MS_SYNC), which waits on a disk.
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let logs = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("files")).unwrap();
    let mut system = common::boot(dir.path(), "fsx");
    let manifest = system.manifest.clone();
    let ops = "260000";
    let start = std::time::Instant::now();
    let out = Command::new(&run)
        .args(["--manifest", manifest.to_str().unwrap(), "--service", "fs"])
        .args(["--prefix", "/data", "--"])
        .arg(&fsx)
        .args([
            "-q", "-F", "-H", "-z", "-C", "-I", "-E", "-N", ops, "-S", "1", "-P",
        ])
        .arg(logs.path())
        .arg("/data/fsx.file")
        .output()
        .unwrap();
    let took = start.elapsed();
    drop(system.child.stdin.take()); // the shell ends, and the system with it
    let _ = system.child.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ok_line = format!("All {ops} operations completed A-OK!");
    if !(out.status.success() && stdout.contains(&ok_line)) {
        let logs = logs.keep();
        std::fs::write(logs.join("fsx.stdout"), &out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        panic!(
            "fsx through the system's file service failed after {:.2} s ({}):\n{}\n[...]\n{}\n\
             stderr:\n{}\nfsx's files (log, good copy, operations to replay) are kept in {}",
            took.as_secs_f64(),
            out.status,
            lines.iter().take(40).copied().collect::<Vec<_>>().join("\n"),
            lines[lines.len().saturating_sub(40)..].join("\n"),
            String::from_utf8_lossy(&out.stderr),
            logs.display()
        );
    }
    eprintln!("{:.2} s: {ok_line}", took.as_secs_f64());
}
