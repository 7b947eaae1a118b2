//! Run one command natively on a fresh directory and under `lintel-run` on
//! another, served, and compare what the two printed (the directory's
//! path renamed alike); the trees they left, for the caller to compare.
//! (Shared by `path_names.rs` and `special_files.rs`.)

use std::path::Path;
use std::process::Command;

use super::common::check_library_is_current;

pub const PREFIX: &str = "/lintel-served";

/// Run `cmd` (`%R` standing for the directory) natively on `native` and
/// served on `served`: status and output, the directory renamed `ROOT`.
pub fn both(native: &Path, served: &Path, cmd: &[&str]) -> (String, String) {
    check_library_is_current();
    let show = |out: std::process::Output, root: &str| {
        format!(
            "status {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .replace(root, "ROOT")
    };
    let n_root = native.to_str().unwrap();
    let n_args: Vec<String> = cmd.iter().map(|a| a.replace("%R", n_root)).collect();
    let n = Command::new(&n_args[0]).args(&n_args[1..]).output().unwrap();
    let s_args: Vec<String> = cmd.iter().map(|a| a.replace("%R", PREFIX)).collect();
    let s = Command::new(env!("CARGO_BIN_EXE_lintel-run"))
        .arg("--root")
        .arg(served)
        .args(["--prefix", PREFIX, "--"])
        .args(&s_args)
        .output()
        .unwrap();
    (show(n, n_root), show(s, PREFIX))
}

/// [`both`] on two fresh directories; the outputs must match.
pub fn same(cmd: &[&str]) -> (tempfile::TempDir, tempfile::TempDir) {
    let (n, s) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (native, served) = both(n.path(), s.path(), cmd);
    assert_eq!(
        served,
        native,
        "`{}`: served (left), native (right)",
        cmd.join(" ")
    );
    eprintln!("{native}");
    (n, s)
}

/// A Python script (its argument: the directory), run both ways.
pub fn python(script: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 is missing: .ci/run installs Debian's python3"
    );
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("script.py");
    std::fs::write(&py, script).unwrap();
    same(&["/usr/bin/python3", py.to_str().unwrap(), "%R"])
}

/// Every entry of a tree: path, type, mode, size, symlink target.
pub fn tree(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let link = std::fs::read_link(&p)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            let size = if m.is_file() { m.len() } else { 0 };
            out.push(format!(
                "{} {:o} {size} {link}",
                p.strip_prefix(root).unwrap().display(),
                m.mode()
            ));
            if m.is_dir() {
                dirs.push(p);
            }
        }
    }
    out.sort();
    out
}
