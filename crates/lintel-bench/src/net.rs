//! Suite `net`: doors across machines through lintel's proxies (`lintel-net`), against the
//! RPC engine they ride on and against gRPC, on loopback TCP and over a veth pair.
//!
//! A child process (this binary as [`HOST_ROLE`], on loopback, then again in a network
//! namespace joined by a veth pair where the machine allows it) is the far "host": a proxy exporting an
//! echo door served in its own domain by an async handler (`echo`: what runs where the raw
//! server runs, so the two differ by the proxies alone), the same echo served by a domain of
//! its own (`echo_domain`, a grandchild, [`ECHO_ROLE`]: the usual placement, paying a lintel
//! call between domains on the far side), and, on a second port, the same echo served by raw
//! `capnp-rpc` with the same schema and no lintel at all. This process is the near side: its
//! proxy imports the doors, and a thread calls them as any door (`Door::call`); the baseline
//! calls the raw server from a single-threaded tokio runtime, awaiting each call.
//!
//! - `null`, `echo_1k`, `echo_64k`, `echo_1m`: bytes echoed by `echo`; each compared to
//!   `baseline/capnp_rpc_*` of the same size, measured in the same rounds, interleaved, and
//!   to `baseline/tonic_grpc_*`, the same echo with tonic's gRPC (`vs_tonic`). What
//!   lintel adds per call: on the near side, the hand-off from the calling thread to the
//!   proxy's thread and back, and a copy of the bytes each way.
//! - `null_domain`, `echo_64k_domain`: the same through `echo_domain`, compared to `null` and
//!   `echo_64k`: the price of serving the door in a domain apart from the proxy's.
//! - `null_veth`, `echo_1k_veth`, `echo_64k_veth`, `echo_1m_veth`: the same over a veth pair to a host in a
//!   network namespace (made by the suite; skipped, with a line on stderr, where the machine
//!   does not allow it), against `baseline/capnp_rpc_*_veth` and `baseline/tonic_grpc_*_veth`.
//! - `throughput_64`: 64 threads calling `echo` with 1 KiB at once; ns per call over all of
//!   them, compared to `echo_1k` from one thread.
//! - `doors_100k`: 100,000 doors of the far host received and held here: ns per door, and
//!   each side's memory per door.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Stdio;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{Context as _, ensure};
use capnp_rpc::rpc_twoparty_capnp::Side;
use capnp_rpc::{RpcSystem, twoparty};
use futures::AsyncReadExt as _;
use lintel::{Door, Reply, Request};
use lintel_net::lintel_capnp::door;
use lintel_net::{LinkOptions, Proxy};

use crate::baseline;
use crate::harness::{CaseResult, ChildDomain, Config, Report, Stats, measure_batched, spawn_self};

pub const SUITE: &str = "net";
/// The far host's child role.
pub const HOST_ROLE: &str = "net-host";
/// The far host's echo domain.
pub const ECHO_ROLE: &str = "net-echo";
/// The callers of `throughput_64`.
const THREADS: usize = 64;

/// Sizes echoed: case name, baseline case name, bytes, full-mode iterations per round.
const SIZES: [(&str, &str, usize, u64); 4] = [
    ("null", "capnp_rpc_null", 0, 4_000),
    ("echo_1k", "capnp_rpc_echo_1k", 1 << 10, 4_000),
    ("echo_64k", "capnp_rpc_echo_64k", 64 << 10, 1_000),
    ("echo_1m", "capnp_rpc_echo_1m", 1 << 20, 100),
];
/// The cases through the far host's separate domain: case, bytes, full-mode iterations per
/// round, the case through the proxy's domain compared to.
const DOMAIN_SIZES: [(&str, usize, u64, &str); 2] = [
    ("null_domain", 0, 4_000, "null"),
    ("echo_64k_domain", 64 << 10, 1_000, "echo_64k"),
];
/// Interleaved rounds of each size.
const ROUNDS: usize = 10;

/// The echo domain: serves an echo door until killed.
pub fn echo_child(_: &[String]) -> anyhow::Result<()> {
    crate::harness::serve_forever(Door::create(0, |r: Request<'_>, out: &mut Reply| {
        out.data.extend_from_slice(r.data);
        Ok(())
    }))
}

/// The far host: prints `LINTEL_PORT RAW_PORT GRPC_PORT`, then serves until its parent dies.
pub fn host_child(args: &[String]) -> anyhow::Result<()> {
    let ip: std::net::IpAddr = args.first().map_or("127.0.0.1", String::as_str).parse()?;
    let domain = ChildDomain::spawn(&Config::default(), ECHO_ROLE)?;
    // The runtime an async door names; its calls through the proxy run in the proxy's task.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()?;
    let echo = Door::create_async_on(rt.handle().clone(), 0, |req: lintel::AsyncRequest| async move {
        Ok(Reply {
            data: req.data,
            ..Reply::default()
        })
    });
    // Makes 64 doors of this domain per call (held only by the caller):
    // what a far holder of many doors costs each side.
    let maker = Door::create_async_on(rt.handle().clone(), 0, |_: lintel::AsyncRequest| async {
        let doors = (0..MADE_PER_CALL)
            .map(|i| Door::create(i as u64, |_: Request<'_>, _: &mut Reply| Ok(())))
            .collect();
        Ok(Reply {
            doors,
            ..Reply::default()
        })
    });
    let rss = Door::create(0, |_: Request<'_>, out: &mut Reply| {
        out.data = resident_bytes().to_le_bytes().to_vec();
        Ok(())
    });
    let proxy = Proxy::start()?;
    let exports = BTreeMap::from([
        ("echo".to_string(), echo),
        ("echo_domain".to_string(), domain.door()),
        ("maker".to_string(), maker),
        ("rss".to_string(), rss),
    ]);
    let listener = proxy.listen(SocketAddr::new(ip, 0), LinkOptions::plain(), exports)?;
    let raw = std::net::TcpListener::bind(SocketAddr::new(ip, 0))?;
    let grpc = std::net::TcpListener::bind(SocketAddr::new(ip, 0))?;
    println!(
        "{} {} {}",
        listener.addr().port(),
        raw.local_addr()?.port(),
        grpc.local_addr()?.port()
    );
    std::thread::spawn(move || {
        if let Err(e) = crate::grpc::serve(grpc) {
            eprintln!("the gRPC echo: {e:#}");
        }
    });
    serve_raw(raw)
}

/// Doors the far host's maker returns per call.
const MADE_PER_CALL: usize = 64;
/// Doors held through the proxies in `doors_100k`.
const MANY: usize = 100_000;

/// This process's resident memory, in bytes (`/proc/self/statm`).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

/// `doors_100k`: [`MANY`] doors of the far host held here through the
/// proxies: ns per door received, and what each side's memory grew by per
/// door (its proxy's tables, the door's state in the runtime, the RPC
/// system's import or export entry).
fn many_doors(cfg: &Config, report: &mut Report, remote: &lintel_net::Remote) -> anyhow::Result<()> {
    let maker = remote.lookup("maker")?;
    let rss = remote.lookup("rss")?;
    let far_rss = || -> anyhow::Result<u64> {
        let r = rss.call_bytes(b"")?;
        Ok(u64::from_le_bytes(r[..8].try_into()?))
    };
    let many = if cfg.quick { MANY / 10 } else { MANY };
    let (near0, far0) = (resident_bytes(), far_rss()?);
    let mut held = Vec::with_capacity(many);
    let mut samples = Vec::new();
    let mut reply = Reply::new();
    while held.len() < many {
        let t0 = crate::harness::ticks();
        maker.call(b"", &[], &mut reply)?;
        samples.push(
            crate::harness::ticks_to_ns(crate::harness::ticks().wrapping_sub(t0)) / MADE_PER_CALL as f64,
        );
        ensure!(
            reply.doors.len() == MADE_PER_CALL,
            "the maker returned {} doors",
            reply.doors.len()
        );
        held.append(&mut reply.doors);
    }
    let (near, far) = (resident_bytes() - near0, far_rss()?.saturating_sub(far0));
    let per = |b: u64| b as f64 / held.len() as f64;
    let stats = crate::harness::measure_batches(samples, MADE_PER_CALL as u64);
    report.push(
        CaseResult::new(SUITE, "doors_100k", &stats)
            .with_field("near_bytes_per_door", per(near))
            .with_field("far_bytes_per_door", per(far))
            .with_note(format!(
                "{} doors of the far host held here through the proxies, received {MADE_PER_CALL} per call: \
                 ns per door; memory per door {:.0} B on this side (the import: proxy table, door, RPC \
                 import) and {:.0} B on the far side (the export: its door, server object, RPC export)",
                held.len(),
                per(near),
                per(far)
            )),
    );
    Ok(())
}

/// The baseline's server: the echo with `capnp-rpc` alone.
struct RawEcho;

impl door::Server for RawEcho {
    async fn call(
        self: capnp::capability::Rc<Self>,
        params: door::CallParams,
        mut results: door::CallResults,
    ) -> Result<(), capnp::Error> {
        let data = params.get()?.get_data()?;
        results.get().init_outcome().init_reply().set_data(data);
        Ok(())
    }
}

fn serve_raw(listener: std::net::TcpListener) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let echo: door::Client = capnp_rpc::new_client(RawEcho);
        loop {
            let (tcp, _) = listener.accept().await?;
            let network = raw_network(tcp, Side::Server)?;
            tokio::task::spawn_local(RpcSystem::new(Box::new(network), Some(echo.clone().client)));
        }
    })
}

/// The baseline's end of a connection: capnp-rpc's two-party network on `tcp`, with the
/// message limit a link has by default.
fn raw_network(
    tcp: tokio::net::TcpStream,
    side: Side,
) -> std::io::Result<
    twoparty::VatNetwork<
        futures::io::BufReader<futures::io::ReadHalf<tokio_util::compat::Compat<tokio::net::TcpStream>>>,
    >,
> {
    tcp.set_nodelay(true)?;
    let (r, w) = tokio_util::compat::TokioAsyncReadCompatExt::compat(tcp).split();
    let mut limits = capnp::message::ReaderOptions::new();
    limits.traversal_limit_in_words(Some(LinkOptions::plain().max_message / 8 + 1024));
    Ok(twoparty::VatNetwork::new(
        futures::io::BufReader::new(r),
        futures::io::BufWriter::new(w),
        side,
        limits,
    ))
}

/// The baseline's client: a connection to the raw echo, driven by a current-thread runtime.
struct RawClient {
    rt: tokio::runtime::Runtime,
    local: tokio::task::LocalSet,
    echo: door::Client,
}

impl RawClient {
    fn connect(addr: SocketAddr) -> anyhow::Result<RawClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let local = tokio::task::LocalSet::new();
        let echo = local.block_on(&rt, async {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let network = raw_network(tcp, Side::Client)?;
            let mut rpc = RpcSystem::new(Box::new(network), None);
            let echo: door::Client = rpc.bootstrap(Side::Server);
            tokio::task::spawn_local(rpc);
            anyhow::Ok(echo)
        })?;
        Ok(RawClient { rt, local, echo })
    }

    /// `iters` echoes of `data` in batches of `batch`.
    fn measure(&self, data: &Rc<Vec<u8>>, iters: u64, batch: u64) -> anyhow::Result<Stats> {
        self.local.block_on(&self.rt, async {
            crate::awaited::measure_awaited(iters, batch, |_| {
                let data = data.clone();
                let echo = self.echo.clone();
                async move {
                    let mut req = echo.call_request();
                    req.get().set_data(&data);
                    let resp = req.send().promise.await?;
                    let outcome = resp.get()?.get_outcome()?;
                    let lintel_net::lintel_capnp::outcome::Which::Reply(r) = outcome.which()? else {
                        anyhow::bail!("the raw echo failed");
                    };
                    ensure!(
                        r?.get_data()?.len() == data.len(),
                        "the raw echo returned other bytes"
                    );
                    Ok(())
                }
            })
            .await
        })
    }
}

/// `iters` echoes of `data` through `door`, in batches of `batch`.
fn lintel_echoes(door: &Door, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let mut failed = None;
    let stats = measure_batched(iters, batch, || {
        if let Err(e) = door.call(data, &[], &mut reply) {
            failed.get_or_insert(e);
        } else if reply.data.len() != data.len() {
            failed.get_or_insert(lintel::CallError::BadMessage("the echo returned other bytes"));
        }
    });
    match failed {
        Some(e) => Err(e).context("a proxied echo"),
        None => Ok(stats),
    }
}

/// The far host, a child process (in network namespace `ns` if given), listening at `ip`.
struct Far {
    child: std::process::Child,
    lintel: SocketAddr,
    raw: SocketAddr,
    grpc: SocketAddr,
}

impl Far {
    fn start(cfg: &Config, ns: Option<&str>, ip: &str) -> anyhow::Result<Far> {
        let own = spawn_self(cfg, HOST_ROLE, &[ip.to_string()])?;
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns])
                    .arg(own.get_program())
                    .args(own.get_args());
                c.envs(own.get_envs().filter_map(|(k, v)| Some((k, v?))));
                c
            }
            None => own,
        };
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn().context("starting the far host")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("the host's output")?).read_line(&mut line)?;
        let ports: Vec<u16> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        ensure!(ports.len() == 3, "the host printed {line:?}");
        let at = |port| SocketAddr::new(ip.parse().expect("an IP address"), port);
        Ok(Far {
            child,
            lintel: at(ports[0]),
            raw: at(ports[1]),
            grpc: at(ports[2]),
        })
    }
}

impl Drop for Far {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A network namespace joined to this one by a veth pair; removed when dropped.
struct Veth {
    ns: String,
    near: String,
}

impl Veth {
    /// The pair, with `10.201.N.1` here and `10.201.N.2` in the namespace.
    fn make() -> anyhow::Result<(Veth, String)> {
        let id = std::process::id() % 100_000;
        let v = Veth {
            ns: format!("lb{id}"),
            near: format!("lbv{id}a"),
        };
        let far_end = format!("lbv{id}b");
        let net = format!("10.201.{}", id % 250);
        let ip = |args: &[&str]| -> anyhow::Result<()> {
            let out = std::process::Command::new("ip").args(args).output()?;
            ensure!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(())
        };
        ip(&["netns", "add", &v.ns])?;
        ip(&["-n", &v.ns, "link", "set", "lo", "up"])?;
        ip(&["link", "add", &v.near, "type", "veth", "peer", "name", &far_end])?;
        ip(&["link", "set", &far_end, "netns", &v.ns])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &v.near])?;
        ip(&["link", "set", &v.near, "up"])?;
        ip(&[
            "-n",
            &v.ns,
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &far_end,
        ])?;
        ip(&["-n", &v.ns, "link", "set", &far_end, "up"])?;
        Ok((v, format!("{net}.2")))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.near])
            .status();
    }
}

/// The cases measured again over a veth pair: case, baseline, bytes, full-mode iterations.
const VETH_SIZES: [(&str, &str, usize, u64); 4] = [
    ("null_veth", "capnp_rpc_null_veth", 0, 4_000),
    ("echo_1k_veth", "capnp_rpc_echo_1k_veth", 1 << 10, 4_000),
    ("echo_64k_veth", "capnp_rpc_echo_64k_veth", 64 << 10, 1_000),
    ("echo_1m_veth", "capnp_rpc_echo_1m_veth", 1 << 20, 100),
];

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let far = Far::start(cfg, None, "127.0.0.1")?;
    measure(cfg, report, &far)?;
    drop(far);
    // The same over a veth pair into a namespace of its own, where this machine allows it.
    match Veth::make() {
        Ok((veth, ip)) => {
            let far = Far::start(cfg, Some(&veth.ns), &ip)?;
            let proxy = Proxy::start()?;
            let remote = proxy.connect(far.lintel, LinkOptions::plain(), BTreeMap::<String, Door>::new())?;
            compare_sizes(
                cfg,
                report,
                &remote.lookup("echo")?,
                &far,
                &VETH_SIZES,
                "a veth pair",
            )?;
        }
        Err(e) => eprintln!("net: no veth pair here ({e:#}): loopback only"),
    }
    Ok(())
}

/// Echoes of each size in `sizes` through the proxies (`echo`) and to `far`'s raw capnp-rpc
/// and gRPC servers, interleaved; `link` names the link in the notes.
fn compare_sizes(
    cfg: &Config,
    report: &mut Report,
    echo: &Door,
    far: &Far,
    sizes: &[(&str, &str, usize, u64)],
    link: &str,
) -> anyhow::Result<()> {
    let raw = RawClient::connect(far.raw)?;
    let grpc = crate::grpc::Client::connect(far.grpc)?;
    for &(case, base, len, full) in sizes {
        let data = Rc::new((0..len).map(|i| i as u8).collect::<Vec<u8>>());
        let iters = (cfg.iters(full) / ROUNDS as u64).max(2);
        let batch = (iters / 10).clamp(1, 100);
        let (mut ours, mut theirs, mut tonic) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            ours.push(lintel_echoes(echo, &data, iters, batch)?);
            theirs.push(raw.measure(&data, iters, batch)?);
            tonic.push(grpc.measure(&data, iters, batch)?);
        }
        let (ours, theirs, tonic) = (
            Stats::pooled(&ours),
            Stats::pooled(&theirs),
            Stats::pooled(&tonic),
        );
        let grpc_case = base.replace("capnp_rpc", "tonic_grpc");
        report.push(
            CaseResult::new(baseline::SUITE, &grpc_case, &tonic).with_note(format!(
                "tonic {TONIC_VERSION} (HTTP/2, protobuf bytes field), {len} bytes echoed over {link}, \
             awaited from a current-thread tokio runtime"
            )),
        );
        report.push(CaseResult::new(baseline::SUITE, base, &theirs).with_note(format!(
            "capnp-rpc {CAPNP_RPC_VERSION} alone, same schema, {len} bytes echoed over {link}, \
             awaited from a current-thread tokio runtime"
        )));
        report.push(
            CaseResult::new(SUITE, case, &ours)
                .compare_to(baseline::SUITE, base)
                .with_field("vs_tonic", ours.median_ns / tonic.median_ns)
                .with_note(format!(
                    "{len} bytes echoed through two lintel proxies over {link} (plain TCP), the door \
                     served in the far proxy's domain by an async handler; {ROUNDS} rounds \
                     interleaved with the baselines"
                )),
        );
    }
    Ok(())
}

fn measure(cfg: &Config, report: &mut Report, far: &Far) -> anyhow::Result<()> {
    let proxy = Proxy::start()?;
    let remote = proxy.connect(far.lintel, LinkOptions::plain(), BTreeMap::<String, Door>::new())?;
    let echo = remote.lookup("echo")?;
    compare_sizes(cfg, report, &echo, far, &SIZES, "loopback TCP")?;
    let echo_domain = remote.lookup("echo_domain")?;
    for (case, len, full, compared) in DOMAIN_SIZES {
        let data = (0..len).map(|i| i as u8).collect::<Vec<u8>>();
        let iters = (cfg.iters(full) / ROUNDS as u64).max(2);
        let batch = (iters / 10).clamp(1, 100);
        let rounds = (0..ROUNDS)
            .map(|_| lintel_echoes(&echo_domain, &data, iters, batch))
            .collect::<anyhow::Result<Vec<_>>>()?;
        report.push(
            CaseResult::new(SUITE, case, &Stats::pooled(&rounds))
                .compare_to(SUITE, compared)
                .with_note(format!(
                    "{len} bytes echoed through the proxies by a door served in a domain of the far \
                     host apart from its proxy's (a lintel call between domains there)"
                )),
        );
    }
    let one = report
        .lookup(SUITE, "echo_1k")
        .map(|r| r.median_ns)
        .context("echo_1k measured")?;
    let per_thread = (cfg.iters(2_000) / THREADS as u64).max(2);
    let data = vec![7u8; 1 << 10];
    let mut samples = Vec::new();
    for _ in 0..ROUNDS / 2 {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (echo, data) = (echo.clone(), &data);
                    s.spawn(move || {
                        let mut reply = Reply::new();
                        for _ in 0..per_thread {
                            echo.call(data, &[], &mut reply)?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("a calling thread"))
        })?;
        samples.push(t0.elapsed().as_nanos() as f64 / (THREADS as u64 * per_thread) as f64);
    }
    let stats = crate::harness::measure_single(&samples);
    let speedup = one / stats.median_ns;
    report.push(
        CaseResult::new(SUITE, "throughput_64", &stats)
            .compare_to(SUITE, "echo_1k")
            .with_field("speedup_vs_one_caller", speedup)
            .with_note(format!(
                "{THREADS} threads each making {per_thread} 1 KiB echoes through the proxies at once: ns \
                 per call over all; {speedup:.1}× the calls per second of one caller"
            )),
    );
    // Last: the releases of its doors would disturb the cases after it.
    many_doors(cfg, report, &remote)?;
    Ok(())
}

/// tonic's version, as the baseline's notes name it.
const TONIC_VERSION: &str = "0.14";
/// capnp-rpc's version, as the baseline's notes name it.
const CAPNP_RPC_VERSION: &str = "0.27";
