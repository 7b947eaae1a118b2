//! What the system tests share.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

/// `lintel-run`, built beside this crate's binary by `cargo test
/// --workspace` (it belongs to `lintel-preload`).
pub fn lintel_run() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_kv-system")).with_file_name("lintel-run");
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build --release -p lintel-preload` (cargo test --workspace does)",
        p.display()
    );
    p
}

/// Boot the example system (shell, store, clock, log, and the file
/// service exporting `dir/files`, which must exist) from a manifest
/// written in `dir`; returns once it says it is ready.
pub fn boot(dir: &Path, name: &str) -> System {
    let manifest = dir.join(format!("{name}.toml"));
    std::fs::write(
        &manifest,
        format!(
            "system = \"{name}-{}\"\nroot = \"shell\"\nsocket = \"sys.sock\"\n\
             [domain.shell]\nservices = [\"shell\"]\n\
             [domain.rest]\nservices = [\"kv\", \"clock\", \"log\"]\n\
             [domain.files]\nservices = [\"fs\"]\n\
             [service.fs]\nroot = \"files\"\n",
            std::process::id()
        ),
    )
    .unwrap();
    let mut system = Command::new(env!("CARGO_BIN_EXE_kv-system"))
        .args(["boot", manifest.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(system.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("system ready") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the system ended before it was ready"
        );
    }
    System {
        child: system,
        _stderr: err,
        manifest,
    }
}

/// A booted system. Its shell reads the child's standard input: dropping
/// that ends the system.
pub struct System {
    pub child: Child,
    /// Kept open: the system may still write to it.
    _stderr: BufReader<ChildStderr>,
    pub manifest: PathBuf,
}
