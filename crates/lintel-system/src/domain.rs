//! The child role: one domain of a booted system. The supervisor re-executes
//! the binary with a hidden subcommand naming the domain and its settings;
//! the domain joins the supervisor (offering its control and stats doors,
//! receiving its name-service door), builds its services concurrently (so a
//! factory may wait for a co-located service built beside it), binds them,
//! runs the root driver if it hosts it, and lives until told to stop.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lintel::{Door, Reply, Request};

use crate::names::Names;
use crate::registry::{Context, Kind, Registry};

/// Exit status of a domain whose service failed to start.
pub(crate) const EXIT_START_FAILED: i32 = 3;
/// Exit status of a domain that could not join its supervisor.
pub(crate) const EXIT_JOIN_FAILED: i32 = 4;
/// How long the root waits for every domain to be ready.
const READY_WAIT: Duration = Duration::from_secs(60);

pub(crate) const CONTROL_SHUTDOWN: &[u8] = b"shutdown";

/// What the supervisor tells a domain on its command line.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DomainArgs {
    #[arg(long)]
    pub system: String,
    #[arg(long)]
    pub domain: String,
    #[arg(long = "service")]
    pub services: Vec<String>,
    #[arg(long)]
    pub max_threads: Option<usize>,
    #[arg(long)]
    pub spin: Option<bool>,
    #[arg(long)]
    pub max_message: Option<usize>,
    #[arg(long)]
    pub root: Option<String>,
    #[arg(long)]
    pub supervisor: u32,
    /// `SERVICE:KEY=VALUE`, one per setting of this domain's services (a
    /// service name has no `:`).
    #[arg(long = "setting")]
    pub settings: Vec<String>,
    /// The manifest's directory.
    #[arg(long)]
    pub base: std::path::PathBuf,
    /// The links this domain runs, one JSON `LinkSpec` each.
    #[arg(long = "link")]
    pub links: Vec<String>,
}

impl DomainArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--system".into(),
            self.system.clone(),
            "--domain".into(),
            self.domain.clone(),
            "--supervisor".into(),
            self.supervisor.to_string(),
        ];
        for s in &self.services {
            v.push("--service".into());
            v.push(s.clone());
        }
        if let Some(n) = self.max_threads {
            v.push("--max-threads".into());
            v.push(n.to_string());
        }
        if let Some(on) = self.spin {
            v.push("--spin".into());
            v.push(on.to_string());
        }
        if let Some(n) = self.max_message {
            v.push("--max-message".into());
            v.push(n.to_string());
        }
        if let Some(r) = &self.root {
            v.push("--root".into());
            v.push(r.clone());
        }
        for s in &self.settings {
            v.push("--setting".into());
            v.push(s.clone());
        }
        v.push("--base".into());
        v.push(self.base.display().to_string());
        for l in &self.links {
            v.push("--link".into());
            v.push(l.clone());
        }
        v
    }
}

/// Run as domain `args.domain`; never returns.
pub(crate) fn run(registry: &Registry, args: DomainArgs) -> ! {
    let tag = format!("{}: domain {}", args.system, args.domain);
    // Die with the supervisor, whatever kills it. (The signal fires when the
    // supervisor thread that started us exits: it is the one that lives
    // until the end.) If it died before we got here, stop now.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(args.supervisor) {
        std::process::exit(EXIT_JOIN_FAILED);
    }
    // The domains share the terminal's process group (so a driver can read
    // the terminal), and a Ctrl-C there reaches them too: leave it to the
    // supervisor, which stops every domain in order. A handler that only
    // sets a flag nobody reads replaces the default action (exit).
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGINT,
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    if let Some(n) = args.max_threads {
        lintel::set_max_server_threads(n);
    }
    if let Some(on) = args.spin {
        lintel::set_spin(on);
    }
    if let Some(n) = args.max_message {
        lintel::set_max_message(n);
    }

    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let control = {
        let stop = stop.clone();
        let serving = serving.clone();
        Door::create(0, move |req: Request<'_>, _: &mut Reply| {
            // Still starting (perhaps waiting in a lookup for a domain
            // that is restarting): nothing is served yet, nothing to end.
            if req.data == CONTROL_SHUTDOWN && !serving.load(std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(0);
            }
            if req.data == CONTROL_SHUTDOWN {
                *stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
                stop.1.notify_all();
            }
            Ok(())
        })
    };
    let stats = Door::create(0, |_: Request<'_>, reply: &mut Reply| {
        reply.data = crate::stats::encode_local();
        Ok(())
    });
    let names = match lintel::boot::join(&[control, stats]) {
        Ok(mut doors) if doors.len() == 1 => Names::new(doors.remove(0)),
        Ok(_) => fail(
            &tag,
            "the supervisor offered an unexpected set of doors",
            EXIT_JOIN_FAILED,
        ),
        Err(e) => fail(
            &tag,
            &format!("cannot join the supervisor: {e}"),
            EXIT_JOIN_FAILED,
        ),
    };
    let context = |service: &str| Context {
        system: args.system.clone(),
        domain: args.domain.clone(),
        service: service.to_string(),
        names: names.clone(),
        settings: args
            .settings
            .iter()
            .filter_map(|s| {
                let (svc, rest) = s.split_once(':')?;
                let (key, value) = rest.split_once('=').filter(|_| svc == service)?;
                Some((key.to_string(), value.to_string()))
            })
            .collect(),
        base: args.base.clone(),
    };

    // Build every service on its own thread: a factory that looks up a
    // service placed beside it waits for that one's bind, not for itself.
    let doors: Vec<Door> = std::thread::scope(|s| {
        let builders: Vec<_> = args
            .services
            .iter()
            .filter(|svc| Some(*svc) != args.root.as_ref())
            .map(|svc| {
                let ctx = context(svc);
                let names = &names;
                (
                    svc,
                    s.spawn(move || -> Result<Door, String> {
                        let Some(Kind::Service(factory)) = registry.kind(&ctx.service) else {
                            return Err("is not a registered service".into());
                        };
                        let door = factory(&ctx).map_err(|e| e.to_string())?;
                        names
                            .bind(&ctx.service, door.clone())
                            .map_err(|e| e.to_string())?;
                        Ok(door)
                    }),
                )
            })
            .collect();
        let mut doors = Vec::new();
        for (svc, b) in builders {
            match b.join() {
                Ok(Ok(d)) => doors.push(d),
                Ok(Err(e)) => fail(
                    &tag,
                    &format!("service `{svc}` failed to start: {e}"),
                    EXIT_START_FAILED,
                ),
                Err(_) => fail(
                    &tag,
                    &format!("service `{svc}` panicked while starting"),
                    EXIT_START_FAILED,
                ),
            }
        }
        doors
    });
    let links: Vec<crate::link::LinkSpec> = match args.links.iter().map(|l| serde_json::from_str(l)).collect()
    {
        Ok(l) => l,
        Err(e) => fail(
            &tag,
            &format!("a link the supervisor gave is malformed: {e}"),
            EXIT_START_FAILED,
        ),
    };
    let _proxy = match crate::link::start(&names, &links) {
        Ok(p) => p,
        Err(e) => fail(&tag, &e, EXIT_START_FAILED),
    };
    serving.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Err(e) = names.ready() {
        fail(&tag, &format!("cannot report ready: {e}"), EXIT_JOIN_FAILED);
    }

    std::thread::scope(|s| {
        if let Some(root) = args.root.clone().filter(|r| args.services.contains(r)) {
            let ctx = context(&root);
            let tag = tag.clone();
            // The driver runs beside the wait for the stop, which ends the process.
            s.spawn(move || {
                let code = run_root(registry, &root, &ctx, &tag);
                let _ = std::io::stdout().flush();
                if ctx.names.exit(code).is_err() {
                    std::process::exit(code);
                }
            });
        }
        wait_for_stop(&stop);
        finish(doors);
    });
    std::process::exit(0)
}

fn run_root(registry: &Registry, root: &str, ctx: &Context, tag: &str) -> i32 {
    let Some(Kind::Driver(run)) = registry.kind(root) else {
        say!("{tag}: root service `{root}` is not a registered driver");
        return 1;
    };
    if let Err(e) = ctx.names.await_ready(READY_WAIT) {
        say!("{tag}: root service `{root}` not started: {e}");
        return 1;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(ctx))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            say!("{tag}: root service `{root}` failed: {e}");
            1
        }
        // The panic message is already on stderr.
        Err(_) => {
            say!("{tag}: root service `{root}` panicked");
            101
        }
    }
}

fn wait_for_stop(stop: &(Mutex<bool>, Condvar)) {
    let mut stopped = stop.0.lock().unwrap_or_else(|e| e.into_inner());
    while !*stopped {
        stopped = stop.1.wait(stopped).unwrap_or_else(|e| e.into_inner());
    }
}

/// End the process. No explicit flush of stdout: a driver may hold its
/// lock while blocked reading input; `exit` flushes it if it is free.
fn finish(doors: Vec<Door>) -> ! {
    drop(doors);
    std::process::exit(0)
}

fn fail(tag: &str, msg: &str, code: i32) -> ! {
    say!("{tag}: {msg}");
    std::process::exit(code)
}
