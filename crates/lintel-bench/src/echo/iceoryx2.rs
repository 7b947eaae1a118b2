//! The iceoryx2 baseline: its request/response over `[u8]` slices between two processes,
//! busy-polling on both sides as its own benchmarks do. The client loans a request and copies
//! the payload into it; the server reads the request in place, loans a response and copies the
//! request into it; the client reads the response in place. One copy per direction.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use iceoryx2::port::client::Client;
use iceoryx2::prelude::*;
use iceoryx2::service::port_factory::PortFactory as _;
use iceoryx2::service::port_factory::request_response::PortFactory;

use crate::harness::{ChildProc, Config, Stats, measure_batched, spawn_self};

/// The service: byte slices both ways, no user headers.
type Service = PortFactory<ipc::Service, [u8], (), [u8], ()>;

/// The child role serving the echo.
pub const ROLE: &str = "iceoryx2-echo";

/// Largest payload the ports are made for.
const MAX: usize = 1 << 20;

/// Without requests for this long, the server polls every half millisecond instead of
/// busily.
const IDLE: Duration = Duration::from_millis(5);

/// A payload of this length asks the server to exit.
const STOP: usize = 0;

/// A payload of this length asks the server to poll slowly until the next request (as after
/// [`IDLE`]) once it has answered: sent at the end of each measurement, so that its busy
/// polling does not take a CPU from the case measured next (on a 2-CPU machine, the caller
/// and server of a lintel call then share one CPU with it). No case echoes one byte.
const REST: usize = 1;

fn service(node: &Node<ipc::Service>, name: &str) -> anyhow::Result<Service> {
    node.service_builder(&ServiceName::new(name).context("service name")?)
        .request_response::<[u8], [u8]>()
        .open_or_create()
        .context("iceoryx2 request/response service")
}

/// An iceoryx2 echo server in a child process, and this process's client of it.
pub struct Echo {
    client: Client<ipc::Service, [u8], (), [u8], ()>,
    // Kept for the life of the client.
    _service: Service,
    _node: Node<ipc::Service>,
    child: ChildProc,
}

impl Echo {
    pub fn start(cfg: &Config) -> anyhow::Result<Echo> {
        set_log_level(LogLevel::Error);
        let name = format!("lintel-bench-echo-{}", std::process::id());
        let node = NodeBuilder::new()
            .create::<ipc::Service>()
            .context("iceoryx2 node")?;
        let svc = service(&node, &name)?;
        let client = svc
            .client_builder()
            .initial_max_slice_len(MAX)
            .create()
            .context("iceoryx2 client")?;
        let child = ChildProc::spawn(spawn_self(cfg, ROLE, std::slice::from_ref(&name))?, &[])?;
        let due = Instant::now() + Duration::from_secs(20);
        while svc.dynamic_config().number_of_servers() == 0 {
            ensure!(Instant::now() < due, "the iceoryx2 echo server did not start");
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Echo {
            client,
            _service: svc,
            _node: node,
            child,
        })
    }

    /// One echo of `data`: loaned, filled, sent, polled for, its length and ends checked.
    fn round(&self, data: &[u8]) -> anyhow::Result<()> {
        let pending = self
            .client
            .loan_slice_uninit(data.len())
            .context("loan")?
            .write_from_slice(data)
            .send()
            .context("send")?;
        let due = Instant::now() + Duration::from_secs(10);
        let mut polls = 0u32;
        let response = loop {
            if let Some(r) = pending.receive().context("receive")? {
                break r;
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(4096) && Instant::now() > due {
                bail!("no iceoryx2 response within 10 s");
            }
        };
        let p = response.payload();
        ensure!(
            p.len() == data.len() && p.first() == data.first() && p.last() == data.last(),
            "the iceoryx2 echo came back changed"
        );
        Ok(())
    }

    pub fn measure(&self, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<Stats> {
        let mut failure = None;
        let stats = measure_batched(iters, batch, || {
            if failure.is_none() {
                failure = self.round(data).err();
            }
        });
        if failure.is_none() {
            failure = self.round(&[0; REST]).err();
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    pub fn stop(self) -> anyhow::Result<()> {
        drop(
            self.client
                .loan_slice_uninit(STOP)?
                .write_from_slice(&[])
                .send()?,
        );
        self.child.finish(Duration::from_secs(5))
    }
}

/// The server: `SERVICE`. Echoes every request until an empty one.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    let [name] = args else {
        bail!("usage: {ROLE} SERVICE");
    };
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new()
        .create::<ipc::Service>()
        .context("iceoryx2 node")?;
    let svc = service(&node, name)?;
    let server = svc
        .server_builder()
        .initial_max_slice_len(MAX)
        .create()
        .context("iceoryx2 server")?;
    let mut last = Instant::now();
    loop {
        let Some(req) = server.receive().context("receive")? else {
            // Busy-polling while requests come; between the suite's rounds, polling slowly, so
            // as not to take a CPU from the cases measured meanwhile (a warm-up wakes it).
            if last.elapsed() > IDLE {
                std::thread::sleep(Duration::from_micros(500));
            }
            continue;
        };
        let p = req.payload();
        if p.len() == STOP {
            return Ok(());
        }
        last = if p.len() == REST {
            // Idle from now on: as if the last request came `IDLE` ago.
            Instant::now().checked_sub(IDLE * 2).unwrap_or(last)
        } else {
            Instant::now()
        };
        req.loan_slice_uninit(p.len())
            .context("loan")?
            .write_from_slice(p)
            .send()
            .context("send")?;
    }
}
