//! `lintel-run --root DIR --prefix /PATH [--read-only] -- PROGRAM ARGS...`
//! `lintel-run --manifest M [--service NAME] --prefix /PATH -- PROGRAM ARGS...`
//!
//! Run PROGRAM with the emulation library preloaded: its file I/O under
//! /PATH (which need not exist on the host) is served by a lintel file
//! service. With `--root`, this process exports DIR itself. With
//! `--manifest`, the program joins the file service NAME (default `fs`)
//! of the system running from manifest M: every process image looks it
//! up through the system's name service. Exits with PROGRAM's status.
//! A statically linked PROGRAM runs in static mode (`lintel_unix::image`);
//! a PROGRAM under /PATH is started by this program's preload library
//! (only an emulated process can start a served one).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn usage() -> ExitCode {
    eprintln!(
        "usage: lintel-run --root DIR --prefix /PATH [--read-only] -- PROGRAM ARGS...\n       \
         lintel-run --manifest M [--service NAME] --prefix /PATH -- PROGRAM ARGS..."
    );
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
    let (mut manifest, mut service_name) = (None, None);
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        match o.as_str() {
            "--root" => root = it.next().cloned(),
            "--manifest" => manifest = it.next().cloned(),
            "--service" => service_name = it.next().cloned(),
            "--prefix" => prefix = it.next().cloned(),
            "--read-only" => read_only = true,
            _ => return usage(),
        }
    }
    let (Some(prefix), Some(program)) = (prefix, prog.first()) else {
        return usage();
    };
    let Some(lib) = library() else {
        eprintln!("lintel-run: liblintel_preload.so not found beside this program");
        return ExitCode::from(2);
    };
    // `listener`: the socket of the service this process runs for the
    // program, if it does. The export itself starts once the program is
    // spawned, while the program's image loads.
    let (sock, service, listener) = match (root.as_deref(), manifest) {
        (Some(_), None) if service_name.is_none() => match bind() {
            Ok((sock, listener)) => (sock, None, Some(listener)),
            Err(code) => return code,
        },
        (None, Some(manifest)) if !read_only => {
            let name = service_name.unwrap_or_else(|| "fs".into());
            match join(std::path::Path::new(&manifest), &name) {
                Ok(sock) => (sock, Some(name), None),
                Err(code) => return code,
            }
        }
        _ => return usage(),
    };
    // A statically linked program ignores LD_PRELOAD: this program is
    // started instead, as its host, and the library it preloads runs the
    // program in static mode (`lintel_unix::image`).
    let me = std::env::current_exe().ok();
    let mut command = match lintel_unix::image::on_path(program) {
        Some(path) if lintel_unix::image::is_static(&path) => {
            let Some(me) = &me else {
                eprintln!("lintel-run: cannot find this program to host {program}");
                return ExitCode::from(127);
            };
            let mut c = Command::new(me);
            std::os::unix::process::CommandExt::arg0(&mut c, program);
            c.env(lintel_unix::ENV_STATIC, path);
            c
        }
        // A program in the served tree is started by the emulation, which
        // only an emulated process has: this program again, whose
        // preload library `exec`s it (`lintel_unix::ENV_EXEC`).
        _ if lintel_unix::paths::Prefix::new(prefix.as_bytes())
            .is_some_and(|p| p.strip(program.as_bytes()).is_some()) =>
        {
            let Some(me) = &me else {
                eprintln!("lintel-run: cannot find this program to start {program}");
                return ExitCode::from(127);
            };
            let mut c = Command::new(me);
            std::os::unix::process::CommandExt::arg0(&mut c, program);
            c.env(lintel_unix::ENV_EXEC, program);
            c
        }
        _ => Command::new(program),
    };
    // The program's runtime keeps its descriptors at this floor and above,
    // the same in every image the program execs.
    match lintel_unix::choose_descriptor_floor() {
        Ok(floor) => {
            command.env(lintel_unix::ENV_FD_FLOOR, floor.to_string());
        }
        Err(e) => eprintln!("lintel-run: no room kept for the runtime's descriptors: {e}"),
    }
    if let Some(name) = &service {
        command.env(lintel_unix::ENV_SERVICE, name);
    }
    if let Some(me) = &me {
        command.env(lintel_unix::ENV_HOST, me);
    }
    let mut child = command
        .args(&prog[1..])
        .env("LD_PRELOAD", &lib)
        .env(lintel_unix::ENV_SOCKET, &sock)
        .env(lintel_unix::ENV_PREFIX, &prefix)
        .env(lintel_unix::ENV_FRESH, "1")
        .spawn();
    // `export`: the service this process runs for the program, if it does.
    let mut export = None;
    if let (Ok(c), Some(listener), Some(root)) = (&mut child, listener, &root) {
        match serve(listener, root, read_only) {
            Ok(e) => export = Some(e),
            Err(code) => {
                // The program has not got past its connect: it ran nothing.
                let _ = c.kill();
                let _ = c.wait();
                return code;
            }
        }
    }
    let status = child.and_then(|mut child| child.wait().map(|s| (s, child.id())));
    if service.is_none() {
        let _ = std::fs::remove_file(&sock);
    }
    // A call the program left running (it was killed in it) ends, and what
    // the program wrote through its windows is on the host, before this
    // process, and its service, ends.
    if let Some(export) = &export {
        if let Ok((_, pid)) = &status {
            lintel::settle_dead(*pid, lintel_fs::LOCK_TIMEOUT);
        }
        export.write_out();
    }
    let status = status.map(|(s, _)| s);
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

/// The socket every process image of the program connects to, bound (its
/// connections wait until [`serve`] answers them).
fn bind() -> Result<(PathBuf, lintel::boot::Listener), ExitCode> {
    let sock = std::env::temp_dir().join(format!("lintel-run-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let listener = match lintel::boot::bind(&sock) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lintel-run: cannot listen at {}: {e}", sock.display());
            return Err(ExitCode::from(2));
        }
    };
    // A program that changes user (and then `exec`s) is served as the
    // user it became: any user may connect, and a process of another user
    // is let in only if it descends from this one. (The service checks
    // every call with the caller's own credentials.)
    if let Err(e) = std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o777)) {
        eprintln!("lintel-run: programs that change user will not be served: {e}");
    }
    Ok((sock, listener))
}

/// Export `root` from this process to the program's processes, which
/// connect at `listener`.
fn serve(
    listener: lintel::boot::Listener,
    root: &str,
    read_only: bool,
) -> Result<lintel_fs::Service, ExitCode> {
    // Both while this process has one thread: the export grows the
    // descriptor table, which with two threads waits out an RCU grace
    // period (milliseconds), and so does the domain's start
    // (`lintel::boot::listen`).
    let export = match lintel_fs::Service::new(root, read_only) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lintel-run: cannot export {root}: {e}");
            return Err(ExitCode::from(2));
        }
    };
    listener.start();
    let service = export.door();
    // Every process of the program (each image after exec) connects.
    std::thread::spawn(move || {
        while let Ok(incoming) = listener.accept_admitting(|pid, _| descends_from_us(pid)) {
            let door = service.clone();
            std::thread::spawn(move || {
                let _ = incoming.exchange(&[door]);
            });
        }
    });
    Ok(export)
}

/// Whether process `pid` descends from this one (its parents' chain, as
/// `/proc` gives it, reaches us). A process whose parent has gone is
/// re-parented away from us, and is refused.
fn descends_from_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut at = pid;
    for _ in 0..4096 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{at}/stat")) else {
            return false;
        };
        // The parent follows the command's name, which may hold anything
        // but ends at the last ')'.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        match parent {
            Some(p) if p == me => return true,
            Some(p) if p > 1 => at = p,
            _ => return false,
        }
    }
    false
}

/// The socket of the system running from `manifest`, once its file service
/// `name` answers there (so a wrong name or a system that is not running
/// is said here, once, not by every process of the program).
fn join(manifest: &std::path::Path, name: &str) -> Result<PathBuf, ExitCode> {
    let sock = match lintel_system::Manifest::socket_at(manifest) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lintel-run: {e}");
            return Err(ExitCode::from(2));
        }
    };
    let names = match lintel::boot::connect(&sock, &[]) {
        Ok(d) if !d.is_empty() => lintel_system::Names::new(d[0].clone()),
        Ok(_) | Err(_) => {
            eprintln!(
                "lintel-run: no system answers at {} (is the system of {} running?)",
                sock.display(),
                manifest.display()
            );
            return Err(ExitCode::from(2));
        }
    };
    match names.lookup_within(name, std::time::Duration::from_secs(10)) {
        Ok(door) => {
            if let Err(e) = lintel_fs::Fs::from_door(door).stat(".") {
                eprintln!("lintel-run: `{name}` is not a file service: {e}");
                return Err(ExitCode::from(2));
            }
            Ok(sock)
        }
        Err(e) => {
            eprintln!("lintel-run: {e}");
            Err(ExitCode::from(2))
        }
    }
}
