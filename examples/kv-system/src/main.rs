//! kv-system: a key-value store, a clock, a log (served by async handlers),
//! a file service and a shell, each a lintel service registered by name in
//! this one binary. Where each runs is the manifest's choice:
//!
//! ```text
//! echo 'put a 1
//! get a
//! log' | cargo run -p kv-system -- boot examples/kv-system/isolated.toml
//! ```
//!
//! `colocated.toml` puts all five in one domain (every call a direct call),
//! `isolated.toml` gives each its own process; the shell's answers are the
//! same, only `where` and the cost of `bench` differ. While a system runs,
//! `kv-system stats MANIFEST` prints each domain's call statistics.
//!
//! The shell reads commands from standard input (`help` lists them) and is
//! the manifest's root: when input ends, the system shuts down.
#![forbid(unsafe_code)]

use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

use kv_system::*;
use lintel_system::{BoxError, Context, NameError, Named, Registry};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.service("clock", |_| Ok(ClockServer::door(TickClock::default())));
    // The log is served by async handlers on its domain's tokio runtime.
    reg.async_service("log", |_| async {
        Ok(LogAsyncServer::door(MemoryLog::default()))
    });
    // The store takes its clock, log and file service at start-up: when
    // one of their domains restarts, the supervisor restarts the store's
    // after it, and the store reads its journal back.
    reg.service("kv", |ctx| {
        let clock = ClockClient::from_door(ctx.lookup("clock")?);
        let log = LogClient::from_door(ctx.lookup("log")?);
        let fs = lintel_fs::Fs::from_door(ctx.lookup("fs")?);
        let journal = Journal::open(&fs, ctx.setting("journal").unwrap_or("kv.journal"))?;
        Ok(KvServer::door(Store::open(clock, log, journal)))
    });
    // The file service (`lintel-fs`), configured by the manifest's
    // `[service.fs]` table.
    lintel_fs::register(&mut reg, "fs");
    reg.driver("shell", shell);
    reg
}

fn main() -> std::process::ExitCode {
    lintel_system::main(registry())
}

const HELP: &str = "commands:
  put KEY VALUE   store VALUE (the rest of the line) under KEY
  get KEY         print KEY's value
  del KEY         remove KEY
  keys            list the keys
  time            read the clock
  log [N]         the last N log lines (default 10)
  ls [DIR]        list a directory of the file service's export
  cat PATH        print a file of the export
  write PATH TEXT make PATH hold TEXT (the rest of the line)
  rm PATH         remove a file of the export
  where           which domain serves each service
  bench [N]       time N get calls (default 10000)
  help            this list
  quit            end the system (so does the end of input)";

/// The shell holds each service by its name: when a domain dies, the
/// command in flight fails, and the next one finds the restarted domain.
fn shell(ctx: &Context) -> Result<(), BoxError> {
    let kv = ctx.named::<KvClient>("kv")?;
    let clock = ctx.named::<ClockClient>("clock")?;
    let log = ctx.named::<LogClient>("log")?;
    let fs = ctx.named::<lintel_fs::Fs>("fs")?;
    let interactive = std::io::stdin().is_terminal();
    let mut out = std::io::stdout().lock();
    if interactive {
        writeln!(
            out,
            "{} shell in domain {}; `help` lists commands",
            ctx.system(),
            ctx.domain()
        )?;
    }
    let mut line = String::new();
    loop {
        if interactive {
            write!(out, "kv> ")?;
            out.flush()?;
        }
        line.clear();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut words = line.trim().splitn(3, ' ');
        let (cmd, a, b) = (words.next().unwrap_or(""), words.next(), words.next());
        let answer = match serve(cmd, a, b, &kv, &clock, &log, &fs, ctx) {
            Some(Ok(a)) => a,
            Some(Err(e)) => format!("error: {e}"),
            None if cmd.is_empty() => continue,
            None if matches!(cmd, "quit" | "exit") => return Ok(()),
            None => format!("unknown command or wrong arguments: {}\n{HELP}", line.trim()),
        };
        if !answer.is_empty() {
            writeln!(out, "{answer}")?;
        }
    }
}

/// One command's answer (`None`: not a command this knows); a service
/// that cannot be reached is an error like any other.
#[allow(clippy::too_many_arguments)]
fn serve(
    cmd: &str,
    a: Option<&str>,
    b: Option<&str>,
    kv: &Named<KvClient>,
    clock: &Named<ClockClient>,
    log: &Named<LogClient>,
    fs: &Named<lintel_fs::Fs>,
    ctx: &Context,
) -> Option<Result<String, NameError>> {
    let answer = match (cmd, a, b) {
        ("help", _, _) => Ok(HELP.to_string()),
        ("put", Some(k), Some(v)) => kv
            .get()
            .map(|kv| kv.put(k, v.as_bytes()).map(|()| "ok".into()).unwrap_or_else(err)),
        ("get", Some(k), None) => kv.get().map(|kv| {
            let mut v = Vec::new();
            kv.get(k, &mut v)
                .map(|()| format!("{k} = {}", String::from_utf8_lossy(&v)))
                .unwrap_or_else(err)
        }),
        ("del", Some(k), None) => kv.get().map(|kv| {
            kv.remove(k)
                .map(|was| if was { "removed" } else { "no such key" }.to_string())
                .unwrap_or_else(err)
        }),
        ("keys", None, None) => kv
            .get()
            .map(|kv| kv.keys().map(|k| k.join(" ")).unwrap_or_else(err)),
        ("time", None, None) => clock
            .get()
            .map(|c| c.now().map(|t| format!("t={t}")).unwrap_or_else(err)),
        ("log", n, None) => match n.map_or(Ok(10), str::parse) {
            Ok(n) => log
                .get()
                .map(|l| l.tail(n).map(|l| l.join("\n")).unwrap_or_else(err)),
            Err(_) => Ok("usage: log [N]".into()),
        },
        ("ls", dir, None) => fs.get().map(|fs| match fs.read_dir(dir.unwrap_or(".")) {
            Ok(entries) => {
                let mut names: Vec<String> = entries
                    .iter()
                    .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                    .collect();
                names.sort();
                names.join("\n")
            }
            Err(e) => format!("error: {e}"),
        }),
        ("cat", Some(path), None) => fs.get().map(|fs| match fs.read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).trim_end().to_string(),
            Err(e) => format!("error: {e}"),
        }),
        ("write", Some(path), Some(text)) => fs.get().map(|fs| match fs.write(path, text.as_bytes()) {
            Ok(()) => format!("wrote {} bytes", text.len()),
            Err(e) => format!("error: {e}"),
        }),
        ("rm", Some(path), None) => fs.get().map(|fs| match fs.remove_file(path) {
            Ok(()) => "removed".into(),
            Err(e) => format!("error: {e}"),
        }),
        ("where", None, None) => (|| {
            let doors = [
                ("kv", kv.get()?.into_door()),
                ("clock", clock.get()?.into_door()),
                ("log", log.get()?.into_door()),
                ("fs", fs.get()?.door().clone()),
            ];
            Ok(doors
                .iter()
                .map(|(name, d)| {
                    if d.is_local() {
                        format!("{name}: this domain ({})", ctx.domain())
                    } else {
                        format!("{name}: another domain (pid {})", d.server_pid())
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"))
        })(),
        ("bench", n, None) => match n.map_or(Ok(10_000), str::parse::<u32>) {
            Ok(n) => kv.get().map(|kv| bench(&kv, n.max(1))),
            Err(_) => Ok("usage: bench [N]".into()),
        },
        _ => return None,
    };
    Some(answer)
}

fn err(e: SysError) -> String {
    format!("error: {e}")
}

fn bench(kv: &KvClient, n: u32) -> String {
    if let Err(e) = kv.put("bench", b"12345678") {
        return err(e);
    }
    let mut v = Vec::new();
    let start = Instant::now();
    for _ in 0..n {
        v.clear();
        if let Err(e) = kv.get("bench", &mut v) {
            return err(e);
        }
    }
    let each = start.elapsed().as_nanos() as f64 / n as f64;
    let _ = kv.remove("bench");
    format!("{n} gets: {each:.0} ns each")
}
