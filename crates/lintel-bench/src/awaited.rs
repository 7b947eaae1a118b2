//! Suite `async`: door calls awaited by tasks (`Door::call_async`) on a single-threaded tokio
//! runtime, served by a child domain (this binary re-executed as [`ROLE`]).
//!
//! - `null_cross_spin`: 0 bytes, spinning on (the default): a reply within the spin window;
//!   measured in ten rounds alternating with a thread's null calls to the same door
//!   (`thread_null_paired`, the fast path), and compared to them.
//! - `null_cross_parked`: the same with spinning off in both domains, so every call parks its
//!   task and is woken through the runtime's reactor by the server's notice; compared to
//!   `baseline/tokio_eventfd_pingpong`, which this suite measures: two tokio runtimes in two
//!   processes echoing an 8-byte eventfd count, each waiting on its eventfd in the reactor.
//! - `echo8_cross`: 8 bytes echoed, spinning on; compared to `baseline/tarpc_uds`, the same
//!   echo with tarpc (bincode over a Unix socket), both sides single-threaded tokio runtimes.
//! - `null_cross_async_handler`: a null call to an async handler that returns without
//!   awaiting (the server thread polls it once and replies); compared to `door/null_cross_fast`.
//! - `throughput_1000`: 1,000 tasks on the one thread, each calling in a loop a door whose
//!   async handler waits 1 ms on a timer (a service waiting on something else: the case
//!   concurrency is for); ns per call over all of them, compared to `blocking_1ms`, one thread
//!   making the same calls one at a time. No server thread waits during the timer.
//!
//! The child role's doors are listed in `Offer`.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use lintel::{AsyncRequest, Door, Fault, Reply, Request};
use tokio::io::unix::AsyncFd;

use crate::baseline;
use crate::harness::{
    CaseResult, ChildProc, Config, Report, Stats, fd_arg, measure_batches, spawn_self, take_fd, ticks,
    ticks_to_ns,
};

pub const SUITE: &str = "async";
/// The child role that serves the suite's doors.
pub const ROLE: &str = "async";
/// The child role of the eventfd baseline.
pub const EVENTFD_ROLE: &str = "async-eventfd";
/// The baseline case this suite measures (reported in suite `baseline`).
pub const EVENTFD_CASE: &str = "tokio_eventfd_pingpong";
/// How long the throughput cases' handler waits.
const NAP: Duration = Duration::from_millis(1);
/// The count that tells the eventfd child to exit (an eventfd holds at most `u64::MAX - 1`).
const EVENTFD_STOP: u64 = u64::MAX - 1;
/// Tasks in flight in `throughput_1000`.
const TASKS: usize = 1000;

/// The child's doors, in this order (each door's datum is its position).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Offer {
    /// 0 bytes in, 0 out.
    Null,
    /// Returns its arguments.
    Echo,
    /// 0 bytes in, 0 out, an async handler that does not await.
    AsyncNull,
    /// An async handler: waits [`NAP`] on a timer, returns its arguments.
    Nap,
    /// One byte: 0 spinning off, 1 on.
    Spin,
}

const OFFERS: [Offer; 5] = [
    Offer::Null,
    Offer::Echo,
    Offer::AsyncNull,
    Offer::Nap,
    Offer::Spin,
];

/// The child side: serve `OFFERS` until killed, the async ones on a runtime of its own.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    ensure!(args.is_empty(), "the async child takes no arguments");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let doors = OFFERS
        .iter()
        .map(|&offer| match offer {
            Offer::AsyncNull => Door::create_async_on(
                rt.handle().clone(),
                offer as u64,
                |req: AsyncRequest| async move {
                    match req.data.is_empty() {
                        true => Ok(Reply::default()),
                        false => Err(Fault(1)),
                    }
                },
            ),
            Offer::Nap => Door::create_async_on(
                rt.handle().clone(),
                offer as u64,
                |req: AsyncRequest| async move {
                    tokio::time::sleep(NAP).await;
                    Ok(Reply {
                        data: req.data,
                        ..Reply::default()
                    })
                },
            ),
            _ => Door::create(
                offer as u64,
                move |req: Request<'_>, reply: &mut Reply| match offer {
                    Offer::Null if req.data.is_empty() => Ok(()),
                    Offer::Echo => {
                        reply.data.extend_from_slice(req.data);
                        Ok(())
                    }
                    Offer::Spin if req.data.len() == 1 => {
                        lintel::set_spin(req.data[0] == 1);
                        Ok(())
                    }
                    _ => Err(Fault(1)),
                },
            ),
        })
        .collect();
    let served = crate::harness::serve_all_forever(doors);
    drop(rt);
    served
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let mut cmd = spawn_self(cfg, ROLE, &[])?;
    let spawned = lintel::boot::spawn(&mut cmd, &[]).context("starting the async child domain")?;
    let mut child = spawned.child;
    let doors = spawned.doors;
    let result = cases(cfg, &doors, report);
    drop(doors);
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn cases(cfg: &Config, doors: &[Door], report: &mut Report) -> anyhow::Result<()> {
    ensure!(
        doors.len() == OFFERS.len(),
        "the async child offered {} doors",
        doors.len()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (null, echo, async_null, nap, spin) = (&doors[0], &doors[1], &doors[2], &doors[3], &doors[4]);

    // Measured in rounds alternating with a thread's null calls to the same
    // door (as `door/null_cross_fast` alternates with the spin baseline):
    // both see the same phases of a shared machine.
    let iters = cfg.iters(200_000);
    let per_round = iters.div_ceil(PAIRED_ROUNDS);
    let (mut threads, mut tasks, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..PAIRED_ROUNDS {
        let t = thread_nulls(null, per_round, 100)?;
        let a = rt.block_on(null_calls(null, per_round, 100))?;
        ratios.push(a.median_ns / t.median_ns);
        threads.push(t);
        tasks.push(a);
    }
    let (threads, tasks) = (Stats::pooled(&threads), Stats::pooled(&tasks));
    report.push(
        CaseResult::new(SUITE, "thread_null_paired", &threads).with_note(format!(
            "a thread's null calls (Door::call, the fast path) to the child, in {PAIRED_ROUNDS} rounds \
             alternating with null_cross_spin; the samples of all rounds pooled"
        )),
    );
    let rounds: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
    let mut note = format!(
        "a reply within the spin window; target ≤ 1.3× a thread's call (thread_null_paired, measured \
         in alternating rounds; door/null_cross_fast is the same call measured earlier); per round: {}",
        rounds.join(", ")
    );
    if !lintel::spinning() {
        note = format!("LINTEL_SPIN=off in the environment, so this case did not spin; {note}");
    }
    report.push(
        CaseResult::new(SUITE, "null_cross_spin", &tasks)
            .compare_to(SUITE, "thread_null_paired")
            .with_note(note),
    );

    let stats = rt.block_on(echo8_calls(echo, cfg.iters(200_000), 100))?;
    let lintel_echo = stats.median_ns;
    report.push(CaseResult::new(SUITE, "echo8_cross", &stats).with_note("8 bytes echoed, spinning on"));
    let tarpc = tarpc_uds(cfg, cfg.iters(50_000), 10).context(TARPC_CASE)?;
    let faster = tarpc.median_ns / lintel_echo;
    report.push(
        CaseResult::new(baseline::SUITE, TARPC_CASE, &tarpc)
            .compare_to(SUITE, "echo8_cross")
            .with_note(format!(
                "tarpc {TARPC_VERSION}: an 8-byte echo (a u64) with bincode over a Unix socketpair, \
                 both sides single-threaded tokio runtimes in two processes; async/echo8_cross is \
                 {faster:.0}× faster (target ≥ 30×)"
            )),
    );

    let stats = rt.block_on(null_calls(async_null, cfg.iters(200_000), 100))?;
    report.push(
        CaseResult::new(SUITE, "null_cross_async_handler", &stats)
            .compare_to("door", "null_cross_fast")
            .with_note("an async handler that returns without awaiting: polled once by the server thread"),
    );

    let eventfd = eventfd_pingpong(cfg, cfg.iters(50_000), 10).context(EVENTFD_CASE)?;
    report.push(eventfd);
    let was = lintel::spinning();
    lintel::set_spin(false);
    spin.call_bytes(&[0])
        .context("turning the child's spinning off")?;
    let parked = rt.block_on(null_calls(null, cfg.iters(50_000), 10));
    lintel::set_spin(was);
    spin.call_bytes(&[1]).context("turning the child's spinning on")?;
    report.push(
        CaseResult::new(SUITE, "null_cross_parked", &parked?)
            .compare_to(baseline::SUITE, EVENTFD_CASE)
            .with_note("spinning off in both domains: every call parks its task; target ≤ 1.2×"),
    );

    let rounds = if cfg.quick { 3 } else { 7 };
    let blocking = blocking_naps(nap, rounds, 100)?;
    report.push(
        CaseResult::new(SUITE, "blocking_1ms", &blocking).with_note(
            "one thread calling, one call at a time, an async handler that waits 1 ms; ns per call",
        ),
    );
    let calls_per_task = if cfg.quick { 5 } else { 20 };
    let many = rt.block_on(concurrent_naps(nap, rounds, calls_per_task))?;
    let speedup = blocking.median_ns / many.median_ns;
    report.push(
        CaseResult::new(SUITE, "throughput_1000", &many)
            .compare_to(SUITE, "blocking_1ms")
            .with_field("calls_per_s", 1e9 / many.median_ns)
            .with_note(format!(
                "{TASKS} tasks on one thread, each making {calls_per_task} calls one after another \
                 per round, to the handler of blocking_1ms; ns per call over all tasks; \
                 {speedup:.0}× the calls per second of one blocking thread (target ≥ 5×)"
            )),
    );
    Ok(())
}

/// Rounds in which `null_cross_spin` alternates with a thread's calls.
const PAIRED_ROUNDS: u64 = 10;

/// `iters` blocking null calls from this thread in batches of `batch`.
fn thread_nulls(door: &Door, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let mut failed = None;
    let stats = crate::harness::measure_batched(iters, batch, || {
        if let Err(e) = door.call(&[], &[], &mut reply) {
            failed.get_or_insert(e);
        }
    });
    if let Some(e) = failed {
        bail!("a thread's null call failed: {e}");
    }
    ensure!(reply.data.is_empty(), "a null call returned bytes");
    Ok(stats)
}

/// [`crate::harness::measure_batched`] for awaited operations: `op(n)` (`n` counting from 1)
/// `iters` times in batches of `batch`, each batch timed as a whole, after a warm-up of a
/// tenth as many (at least one batch).
pub(crate) async fn measure_awaited<F, Fut>(iters: u64, batch: u64, mut op: F) -> anyhow::Result<Stats>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut n = 0u64;
    for _ in 0..(iters / 10).max(batch) {
        n += 1;
        op(n).await?;
    }
    let batches = iters.div_ceil(batch);
    let mut samples = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let t0 = ticks();
        for _ in 0..batch {
            n += 1;
            op(n).await?;
        }
        samples.push(ticks_to_ns(ticks().wrapping_sub(t0)) / batch as f64);
    }
    Ok(measure_batches(samples, batch))
}

/// `iters` awaited 8-byte echoes in batches of `batch`.
async fn echo8_calls(door: &Door, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    measure_awaited(iters, batch, |n| echo8(door, n)).await
}

async fn echo8(door: &Door, n: u64) -> anyhow::Result<()> {
    let r = door.call_async(&n.to_le_bytes(), &[]).await?;
    ensure!(r.data == n.to_le_bytes(), "an echo returned other bytes");
    Ok(())
}

/// `iters` awaited null calls in batches of `batch`.
async fn null_calls(door: &Door, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    measure_awaited(iters, batch, |_| async {
        check(door.call_async(&[], &[]).await?, 0)
    })
    .await
}

fn check(reply: Reply, len: usize) -> anyhow::Result<()> {
    ensure!(
        reply.data.len() == len && reply.doors.is_empty(),
        "unexpected reply"
    );
    Ok(())
}

/// `rounds` rounds of `calls` blocking calls to the napping door: ns per call, per round.
fn blocking_naps(door: &Door, rounds: usize, calls: usize) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        for i in 0..calls {
            let tag = (i as u64).to_le_bytes();
            door.call(&tag, &[], &mut reply)?;
            ensure!(reply.data == tag, "a napping call returned the wrong bytes");
        }
        samples.push(t0.elapsed().as_nanos() as f64 / calls as f64);
    }
    Ok(crate::harness::measure_single(&samples))
}

/// `rounds` rounds of [`TASKS`] tasks each making `calls` awaited calls to the napping door:
/// ns per call over all tasks, per round.
async fn concurrent_naps(door: &Door, rounds: usize, calls: usize) -> anyhow::Result<Stats> {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for t in 0..TASKS {
            let door = door.clone();
            set.spawn(async move {
                for i in 0..calls {
                    let tag = ((t * calls + i) as u64).to_le_bytes();
                    let reply = door.call_async(&tag, &[]).await?;
                    ensure!(reply.data == tag, "a napping call returned the wrong bytes");
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = set.join_next().await {
            done.context("a calling task")??;
        }
        samples.push(t0.elapsed().as_nanos() as f64 / (TASKS * calls) as f64);
    }
    Ok(crate::harness::measure_single(&samples))
}

/// tarpc's version, as the baseline's note names it.
const TARPC_VERSION: &str = "0.38";
/// The tarpc baseline's case (reported in suite `baseline`).
pub const TARPC_CASE: &str = "tarpc_uds";
/// The child role of the tarpc baseline.
pub const TARPC_ROLE: &str = "async-tarpc";

#[tarpc::service]
trait Echo {
    async fn echo(n: u64) -> u64;
}

#[derive(Clone)]
struct EchoServer;

impl Echo for EchoServer {
    async fn echo(self, _: tarpc::context::Context, n: u64) -> u64 {
        n
    }
}

type TarpcTransport<Item, SinkItem> = tarpc::serde_transport::Transport<
    tokio::net::UnixStream,
    Item,
    SinkItem,
    tarpc::tokio_serde::formats::Bincode<Item, SinkItem>,
>;

/// A tarpc transport (bincode in length-delimited frames) over `sock`.
fn tarpc_transport<Item, SinkItem>(
    sock: std::os::unix::net::UnixStream,
) -> anyhow::Result<TarpcTransport<Item, SinkItem>>
where
    Item: for<'de> serde::Deserialize<'de>,
    SinkItem: serde::Serialize,
{
    sock.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(sock)?;
    let framed =
        tarpc::tokio_util::codec::length_delimited::LengthDelimitedCodec::builder().new_framed(stream);
    Ok(tarpc::serde_transport::new(
        framed,
        tarpc::tokio_serde::formats::Bincode::default(),
    ))
}

/// `baseline/tarpc_uds`: tarpc's echo over a socketpair to a child serving it.
fn tarpc_uds(cfg: &Config, iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let (mine, theirs) = std::os::unix::net::UnixStream::pair().context("socketpair")?;
    let theirs = OwnedFd::from(theirs);
    let args = vec![fd_arg(theirs.as_fd())];
    let child = ChildProc::spawn(spawn_self(cfg, TARPC_ROLE, &args)?, &[theirs.as_fd()])?;
    drop(theirs);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stats = rt.block_on(async {
        let client = EchoClient::new(tarpc::client::Config::default(), tarpc_transport(mine)?).spawn();
        measure_awaited(iters, batch, |n| tarpc_echo(&client, n)).await
    })?;
    drop(rt); // the connection closes: the child's server ends
    child.finish(Duration::from_secs(10))?;
    Ok(stats)
}

async fn tarpc_echo(client: &EchoClient, n: u64) -> anyhow::Result<()> {
    let got = client.echo(tarpc::context::current(), n).await?;
    ensure!(got == n, "tarpc echoed {got}, not {n}");
    Ok(())
}

/// The child side of the tarpc baseline: `__child async-tarpc FD`, serving until the parent
/// closes the socket.
pub fn tarpc_child(args: &[String]) -> anyhow::Result<()> {
    let [fd] = args else {
        bail!("the tarpc child takes one descriptor");
    };
    let sock = std::os::unix::net::UnixStream::from(take_fd(fd)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use futures::StreamExt;
        use tarpc::server::Channel;
        let transport = tarpc_transport(sock)?;
        tarpc::server::BaseChannel::with_defaults(transport)
            .execute(EchoServer.serve())
            .for_each(|answer| answer)
            .await;
        anyhow::Ok(())
    })
}

/// `baseline/tokio_eventfd_pingpong`: an 8-byte count written to the child's eventfd, echoed on
/// ours; each side awaits its eventfd in its runtime's reactor.
fn eventfd_pingpong(cfg: &Config, iters: u64, batch: u64) -> anyhow::Result<CaseResult> {
    let to_child = lintel_sys::eventfd().context("eventfd")?;
    let to_us = lintel_sys::eventfd().context("eventfd")?;
    let args = vec![fd_arg(to_child.as_fd()), fd_arg(to_us.as_fd())];
    let pass: Vec<BorrowedFd> = vec![to_child.as_fd(), to_us.as_fd()];
    let child = ChildProc::spawn(spawn_self(cfg, EVENTFD_ROLE, &args)?, &pass)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stats = rt.block_on(async {
        let tx = to_child;
        let rx = reactor(to_us)?;
        let stats = measure_awaited(iters, batch, |n| exchange(&tx, &rx, n)).await?;
        write_count(&tx, EVENTFD_STOP)?;
        anyhow::Ok(stats)
    })?;
    child.finish(Duration::from_secs(10))?;
    Ok(CaseResult::new(baseline::SUITE, EVENTFD_CASE, &stats).with_note(
        "two single-threaded tokio runtimes in two processes, 8 bytes (an eventfd count) each way, \
         each side awaiting its eventfd through the reactor",
    ))
}

/// The child side of the eventfd baseline: `__child async-eventfd RX TX`.
pub fn eventfd_child(args: &[String]) -> anyhow::Result<()> {
    let [rx, tx] = args else {
        bail!("the eventfd child takes two descriptors");
    };
    let (rx, tx) = (take_fd(rx)?, take_fd(tx)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let rx = reactor(rx)?;
        loop {
            let n = read_count(&rx).await?;
            if n == EVENTFD_STOP {
                return Ok(());
            }
            write_count(&tx, n)?;
        }
    })
}

/// `fd`, non-blocking, registered with the current runtime's reactor.
fn reactor(fd: OwnedFd) -> anyhow::Result<AsyncFd<OwnedFd>> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    // (Deprecated for types that might not own their descriptor; an `OwnedFd` does, for as
    // long as the `AsyncFd` holds it.)
    #[allow(deprecated)]
    let afd = AsyncFd::new(fd)?;
    Ok(afd)
}

async fn exchange(tx: &OwnedFd, rx: &AsyncFd<OwnedFd>, n: u64) -> anyhow::Result<()> {
    write_count(tx, n)?;
    let got = read_count(rx).await?;
    ensure!(got == n, "the eventfd child echoed {got}, not {n}");
    Ok(())
}

fn write_count(fd: &OwnedFd, n: u64) -> anyhow::Result<()> {
    rustix::io::write(fd, &n.to_ne_bytes()).context("writing an eventfd")?;
    Ok(())
}

async fn read_count(fd: &AsyncFd<OwnedFd>) -> anyhow::Result<u64> {
    loop {
        let mut ready = fd.readable().await?;
        let mut buf = [0u8; 8];
        match rustix::io::read(fd.get_ref(), &mut buf) {
            Ok(_) => return Ok(u64::from_ne_bytes(buf)),
            Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
            Err(e) => return Err(e).context("reading an eventfd"),
        }
    }
}
