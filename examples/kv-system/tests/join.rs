//! An unmodified program joins the running system's file service:
//! `lintel-run --manifest` looks the service up by name through the
//! supervisor, and every process of the program (a shell and the commands
//! it runs) reads and writes the system's exported directory.

mod common;

use std::process::Command;

#[test]
fn an_unmodified_program_joins_the_systems_file_service() {
    let run = common::lintel_run();
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("hello.txt"), "from the system\n").unwrap();
    let mut system = common::boot(dir.path(), "joined");
    let manifest = system.manifest.clone();
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
    // The store keeps its journal in the export too.
    assert_eq!(
        stdout,
        "from the system\nhello.txt\nkv.journal\nmade.txt\n8 made.txt\n"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("made.txt")).unwrap(),
        "written\n"
    );

    // A name that is no file service is refused by the launcher, once.
    let out = program("kv", "cat /data/hello.txt");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a file service"));

    drop(system.child.stdin.take()); // the shell ends, and the system with it
    assert!(system.child.wait().unwrap().success());
    let out = program("fs", "true");
    assert_eq!(out.status.code(), Some(2), "no system runs any more");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no system answers"));
}
