//! An unmodified program joins the running system's file service:
//! `lintel-run --manifest` looks the service up by name through the
//! supervisor, and every process of the program (a shell and the commands
//! it runs) reads and writes the system's exported directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `lintel-run`, built beside this crate's binary by `cargo test
/// --workspace` (it belongs to `lintel-preload`).
fn lintel_run() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_kv-system")).with_file_name("lintel-run");
    assert!(
        p.exists(),
        "{} is missing: build it with `cargo build --release -p lintel-preload` (cargo test --workspace does)",
        p.display()
    );
    p
}

#[test]
fn an_unmodified_program_joins_the_systems_file_service() {
    let run = lintel_run();
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("hello.txt"), "from the system\n").unwrap();
    let manifest = dir.path().join("joined.toml");
    std::fs::write(
        &manifest,
        format!(
            "system = \"joined-{}\"\nroot = \"shell\"\nsocket = \"sys.sock\"\n\
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
    let program = |service: &str, script: &str| {
        Command::new(&run)
            .args(["--manifest", manifest.to_str().unwrap(), "--service", service])
            .args(["--prefix", "/data", "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let out = program(
        "fs",
        "cat /data/hello.txt && echo written > /data/made.txt && cd /data && ls && wc -c made.txt",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "from the system\nhello.txt\nmade.txt\n8 made.txt\n");
    assert_eq!(
        std::fs::read_to_string(files.join("made.txt")).unwrap(),
        "written\n"
    );

    // A name that is no file service is refused by the launcher, once.
    let out = program("kv", "cat /data/hello.txt");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a file service"));

    drop(system.stdin.take()); // the shell ends, and the system with it
    assert!(system.wait().unwrap().success());
    let out = program("fs", "true");
    assert_eq!(out.status.code(), Some(2), "no system runs any more");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no system answers"));
}
