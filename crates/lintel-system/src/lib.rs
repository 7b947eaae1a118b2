//! Placement for lintel: services registered by name in one binary, a TOML
//! manifest that says which domain (process) hosts which, a supervisor that
//! starts every domain from the same executable and hands out doors through
//! a name service, and the command line that drives it.
//!
//! Moving a service between domains is a manifest edit: the code that looks
//! it up is the same, and a service looked up from its own domain comes
//! back as a local door, so calls on it are direct calls.
//!
//! # The program
//!
//! ```no_run
//! use lintel::{Door, Reply, Request};
//! use lintel_system::Registry;
//!
//! fn main() -> std::process::ExitCode {
//!     let mut reg = Registry::new();
//!     reg.service("echo", |_ctx| {
//!         Ok(Door::create(0, |req: Request<'_>, reply: &mut Reply| {
//!             reply.data.extend_from_slice(req.data);
//!             Ok(())
//!         }))
//!     });
//!     reg.driver("shell", |ctx| {
//!         let echo = ctx.lookup("echo")?; // waits (up to 10 s) for it to start
//!         println!("{}", String::from_utf8_lossy(&echo.call_bytes(b"hello")?));
//!         Ok(())
//!     });
//!     lintel_system::main(reg) // first thing: the domains re-execute this binary
//! }
//! ```
//!
//! # The command line
//!
//! - `PROG boot MANIFEST`: start the system and supervise it; it ends when the
//!   root driver returns (with its status), on SIGINT/SIGTERM (status 128+N,
//!   after stopping every domain), or when no domain is left.
//! - `PROG check MANIFEST`: check the manifest against the registry and print
//!   the placement; starts nothing.
//! - `PROG stats MANIFEST` or `PROG stats --socket PATH`: print every running
//!   domain's call statistics (calls per path and size bucket, server threads).
//! - `PROG status MANIFEST` (or `--socket PATH`; `--json` for one object per
//!   domain per line): each domain's pid, state, uptime, restarts, last exit
//!   and what its restart policy does next.
//!
//! Exit status 2 means the command line or the manifest was refused.
//!
//! # The manifest
//!
//! ```toml
//! system = "kv"            # optional: names the system (default: the file's stem)
//! root = "shell"           # optional: the driver whose return ends the system
//! socket = "/tmp/kv.sock"  # optional: where `stats` finds the supervisor; relative
//!                          # to the manifest's folder (default:
//!                          # $XDG_RUNTIME_DIR/lintel-SYSTEM.sock, else
//!                          # /tmp/lintel-UID-SYSTEM.sock)
//!
//! [domain.store]           # one table per domain (process), started in file order
//! services = ["kv", "log"] # registered services it hosts (at least one)
//! max_threads = 8          # optional: its server-thread limit
//! max_message = 67108864   # optional: its message limit in bytes (default 1 GiB)
//! spin = "off"             # optional: "on"/"off" (or true/false): spin before sleeping
//! restart = "on-failure"   # optional: "never", "on-failure" (default) or "always"
//! backoff = "100ms"        # optional: the first restart's wait (default 100ms); each
//! max_backoff = "10s"      #   next one doubles, up to this (default 10s)
//! max_restarts = 5         # optional: restarts allowed within `period` (default 5,
//! period = "60s"           #   within 60s); one more and the supervisor gives up:
//! give_up = "leave"        #   "leave" the domain down (default) or "stop" the system
//!
//! [domain.front]
//! services = ["shell"]
//! ```
//!
//! Everything is checked before any process starts, and every problem is
//! reported with its line: unknown keys, unknown services, a service placed
//! twice, a domain with no services, bad names or settings, a root that is
//! not a placed driver, a driver placed as anything but the root. For example
//! `kv.toml:9:13: service `kv` is placed twice: in domain `store` (line 6)
//! and in domain `front``.
//!
//! # Restarts
//!
//! Once the system is up, a domain that exits is restarted as its policy
//! says (the defaults: on failure, after 100 ms, doubling to 10 s, given up
//! on after 5 restarts within 60 s, then left down). While it restarts,
//! lookups of its names wait for the new instance; a call in flight when
//! it died fails with `PeerDied` and is never made again behind the
//! caller's back. [`Named`] (or [`Context::named`]) holds a service by its
//! name and finds the new instance on the next call.
//!
//! A domain that looked up another's door plainly while it started
//! ([`Context::lookup`] in a service's factory) holds doors of that
//! instance; when it restarts, the supervisor stops the dependent and
//! starts it again after it (OTP's `rest_for_one`), unless its policy is
//! `never`. A domain that holds them with [`Context::named`] follows them
//! instead and is left alone. The root's domain is never restarted: its
//! exit ends the system, and a domain that exits before the system is
//! first ready fails the boot.
//!
//! # Names
//!
//! Each service is bound under its own name; each domain's statistics door
//! under `domain/<domain>/stats`. A domain may bind only the services placed
//! in it, names under `domain/<its name>/`, and names no placed service
//! uses. A lookup waits for a name not yet bound (10 s by default), or
//! whose domain is restarting, and fails at once for a service whose domain
//! is down for good.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[macro_use]
mod line;
mod domain;
mod exit;
mod link;
mod manifest;
mod named;
mod names;
mod registry;
pub mod restart;
mod stats;
mod status;
mod supervisor;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use link::{LinkSpec, TlsFiles};
pub use manifest::{DomainSpec, MAX_THREADS_LIMIT, Manifest, ManifestError, Problem};
pub use named::Named;
pub use names::{MAX_NAME, NameError, Names};
pub use registry::{BoxError, Context, Registry};
pub use stats::{DomainStats, StatsError, collect_stats, print_stats, print_stats_json};
pub use status::{DomainStatus, StatusError, collect_status, print_status};
pub use supervisor::{BootError, boot};

#[derive(Parser)]
#[command(about = "Boot and inspect a lintel system: services placed in domains by a manifest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start every domain the manifest lists and supervise them until the
    /// root service returns or SIGINT/SIGTERM arrives.
    Boot {
        /// The placement manifest (TOML).
        manifest: PathBuf,
    },
    /// Check a manifest and print the placement, starting nothing.
    Check { manifest: PathBuf },
    /// Print the call statistics of every domain of a running system.
    Stats(Tool),
    /// Print each domain of a running system: its process, state, uptime,
    /// restarts, last exit and what its restart policy does next.
    Status(Tool),
    /// One domain of a booted system (started by `boot`).
    #[command(name = supervisor::DOMAIN_COMMAND, hide = true)]
    Domain(domain::DomainArgs),
}

/// A tool's arguments: which running system, and how to print.
#[derive(clap::Args)]
struct Tool {
    /// The manifest the system was booted with (locates its socket).
    #[arg(required_unless_present = "socket")]
    manifest: Option<PathBuf>,
    /// The supervisor's socket, instead of a manifest.
    #[arg(long, conflicts_with = "manifest")]
    socket: Option<PathBuf>,
    /// One JSON object per domain per line instead of a table.
    #[arg(long)]
    json: bool,
}

impl Tool {
    /// Run `print` on the system's socket and standard output; the exit
    /// status, an error said as `name: ...`.
    fn run<E: std::fmt::Display>(
        self,
        registry: &Registry,
        name: &str,
        print: impl FnOnce(&std::path::Path, bool, &mut std::io::StdoutLock<'_>) -> Result<(), E>,
    ) -> ExitCode {
        let socket = match (self.socket, self.manifest) {
            (Some(s), _) => s,
            (None, Some(path)) => match Manifest::load(&path, registry) {
                Ok(m) => m.socket,
                Err(e) => return refused(e),
            },
            (None, None) => unreachable!("clap requires one of them"),
        };
        match print(&socket, self.json, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                say!("{name}: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Run the command line of a program whose services are in `registry`;
/// call it first thing in `main`, since `boot` starts each domain by
/// re-executing the program. See the crate docs for the commands.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let mut reg = lintel_system::Registry::new();
///     // reg.service(...), reg.driver(...)
///     lintel_system::main(reg)
/// }
/// ```
pub fn main(registry: Registry) -> ExitCode {
    run(&registry, std::env::args_os())
}

/// Whether `args` (a program's, its name first) start one domain of a
/// booted system. A program with a command line of its own that also boots
/// a system hands such arguments to [`run`] before parsing its own: the
/// supervisor starts each domain by re-executing the program.
pub fn is_domain(args: &[impl AsRef<std::ffi::OsStr>]) -> bool {
    args.get(1)
        .is_some_and(|a| a.as_ref() == supervisor::DOMAIN_COMMAND)
}

/// [`main`] with explicit arguments (the first is the program name).
pub fn run(registry: &Registry, args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.command {
        Command::Domain(args) => domain::run(registry, args),
        Command::Boot { manifest } => {
            let m = match Manifest::load(&manifest, registry) {
                Ok(m) => m,
                Err(e) => return refused(e),
            };
            match boot(registry, &m) {
                Ok(status) => ExitCode::from(status.clamp(0, 255) as u8),
                Err(e) => {
                    say!("{}: {e}", m.system);
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check { manifest } => match Manifest::load(&manifest, registry) {
            Ok(m) => {
                println!("system {} (socket {})", m.system, m.socket.display());
                for d in &m.domains {
                    let mut settings = Vec::new();
                    if let Some(n) = d.max_threads {
                        settings.push(format!("max_threads {n}"));
                    }
                    if let Some(on) = d.spin {
                        settings.push(format!("spin {}", if on { "on" } else { "off" }));
                    }
                    if let Some(n) = d.max_message {
                        settings.push(format!("max_message {n}"));
                    }
                    let settings = if settings.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", settings.join(", "))
                    };
                    println!("domain {}{settings}: {}", d.name, d.services.join(", "));
                }
                if let Some(r) = &m.root {
                    println!("root {r}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => refused(e),
        },
        Command::Status(tool) => tool.run(registry, "status", |socket, json, out| {
            print_status(socket, json, out)
        }),
        Command::Stats(tool) => tool.run(registry, "stats", |socket, json, out| match json {
            true => print_stats_json(socket, out),
            false => print_stats(socket, out),
        }),
    }
}

fn refused(e: ManifestError) -> ExitCode {
    say!("{e}");
    ExitCode::from(2)
}
