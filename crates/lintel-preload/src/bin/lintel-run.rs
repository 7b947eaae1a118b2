//! `lintel-run --root DIR --prefix /PATH [--read-only] -- PROGRAM ARGS...`
//!
//! Export DIR through a lintel file service in this process and run
//! PROGRAM with the emulation library preloaded: its file I/O under /PATH
//! is served from DIR (the prefix need not exist on the host). Exits with
//! PROGRAM's status.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn usage() -> ExitCode {
    eprintln!("usage: lintel-run --root DIR --prefix /PATH [--read-only] -- PROGRAM ARGS...");
    ExitCode::from(2)
}

/// The preload library: beside this program (`cargo build` puts both in
/// `target/<profile>/`), or in its `deps/` (test builds).
fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("liblintel_preload.so"),
        dir.join("deps/liblintel_preload.so"),
        dir.join("../liblintel_preload.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--") else {
        return usage();
    };
    let (opts, prog) = (&args[..split], &args[split + 1..]);
    let (mut root, mut prefix, mut read_only) = (None, None, false);
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        match o.as_str() {
            "--root" => root = it.next().cloned(),
            "--prefix" => prefix = it.next().cloned(),
            "--read-only" => read_only = true,
            _ => return usage(),
        }
    }
    let (Some(root), Some(prefix), Some(program)) = (root, prefix, prog.first()) else {
        return usage();
    };
    let Some(lib) = library() else {
        eprintln!("lintel-run: liblintel_preload.so not found beside this program");
        return ExitCode::from(2);
    };
    let service = match lintel_fs::Service::new(&root, read_only) {
        Ok(s) => s.into_door(),
        Err(e) => {
            eprintln!("lintel-run: cannot export {root}: {e}");
            return ExitCode::from(2);
        }
    };
    let sock = std::env::temp_dir().join(format!("lintel-run-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let listener = match lintel::boot::listen(&sock) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lintel-run: cannot listen at {}: {e}", sock.display());
            return ExitCode::from(2);
        }
    };
    // Every process of the program (each image after exec) connects.
    std::thread::spawn(move || {
        while let Ok(incoming) = listener.accept() {
            let door = service.clone();
            std::thread::spawn(move || {
                let _ = incoming.exchange(&[door]);
            });
        }
    });
    let mut command = Command::new(program);
    // The program's runtime keeps its descriptors at this floor and above,
    // the same in every image the program execs.
    match lintel_unix::choose_descriptor_floor() {
        Ok(floor) => {
            command.env(lintel_unix::ENV_FD_FLOOR, floor.to_string());
        }
        Err(e) => eprintln!("lintel-run: no room kept for the runtime's descriptors: {e}"),
    }
    let status = command
        .args(&prog[1..])
        .env("LD_PRELOAD", &lib)
        .env(lintel_unix::ENV_SOCKET, &sock)
        .env(lintel_unix::ENV_PREFIX, &prefix)
        .status();
    let _ = std::fs::remove_file(&sock);
    match status {
        Ok(s) => match s.code() {
            Some(c) => ExitCode::from(c as u8),
            None => {
                ExitCode::from(128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0) as u8)
            }
        },
        Err(e) => {
            eprintln!("lintel-run: cannot run {program}: {e}");
            ExitCode::from(127)
        }
    }
}
