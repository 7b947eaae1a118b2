//! `pipe_pingpong` and `uds_pingpong`: 8 bytes each way with blocking `write` and `read`, over
//! two pipes or one `SOCK_STREAM` socketpair. The child ends are closed in the parent after the
//! spawn, so either side's death shows to the other as end-of-file.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};

use super::{ROLE, STOP, SUITE};
use crate::harness::{CaseResult, ChildProc, Config, fd_arg, measure_batched, spawn_self, take_fd};

/// Two pipes: the child reads the first and writes the second.
pub fn measure_pipe(cfg: &Config, iters: u64, batch: u64) -> anyhow::Result<CaseResult> {
    let (child_rx, tx) = std::io::pipe().context("pipe")?;
    let (rx, child_tx) = std::io::pipe().context("pipe")?;
    let child_fds = vec![OwnedFd::from(child_rx), OwnedFd::from(child_tx)];
    pingpong(cfg, "pipe_pingpong", child_fds, tx, rx, iters, batch)
}

/// A socketpair: the child reads and writes one end.
pub fn measure_uds(cfg: &Config, iters: u64, batch: u64) -> anyhow::Result<CaseResult> {
    let (mine, theirs) = UnixStream::pair().context("socketpair")?;
    let rx = mine.try_clone().context("dup socket")?;
    pingpong(
        cfg,
        "uds_pingpong",
        vec![OwnedFd::from(theirs)],
        mine,
        rx,
        iters,
        batch,
    )
}

fn pingpong(
    cfg: &Config,
    case: &str,
    child_fds: Vec<OwnedFd>,
    mut tx: impl Write,
    mut rx: impl Read,
    iters: u64,
    batch: u64,
) -> anyhow::Result<CaseResult> {
    let mut args = vec!["stream".to_string()];
    args.extend(child_fds.iter().map(|fd| fd_arg(fd.as_fd())));
    let pass: Vec<BorrowedFd> = child_fds.iter().map(|fd| fd.as_fd()).collect();
    let child = ChildProc::spawn(spawn_self(cfg, ROLE, &args)?, &pass)?;
    drop(child_fds);

    exchange(&mut tx, &mut rx, 0).context("handshake")?;
    let (mut msg, mut failure) = (0u64, None);
    let stats = measure_batched(iters, batch, || {
        if failure.is_none() {
            msg += 1;
            failure = exchange(&mut tx, &mut rx, msg).err();
        }
    });
    if let Some(e) = failure {
        return Err(e.context(case.to_string()));
    }
    tx.write_all(&STOP.to_le_bytes()).context("sending stop")?;
    child.finish(Duration::from_secs(5))?;
    Ok(CaseResult::new(SUITE, case, &stats))
}

/// One round trip: send `msg`, read back its echo.
fn exchange(tx: &mut impl Write, rx: &mut impl Read, msg: u64) -> anyhow::Result<()> {
    tx.write_all(&msg.to_le_bytes())?;
    let mut echo = [0u8; 8];
    rx.read_exact(&mut echo).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => anyhow!("child hung up"),
        _ => e.into(),
    })?;
    let echo = u64::from_le_bytes(echo);
    ensure!(echo == msg, "sent {msg}, echoed {echo}");
    Ok(())
}

/// Child side: `stream RFD WFD` (pipes) or `stream FD` (a socket used both ways). Echoes until
/// the stop message; end-of-file (the parent is gone) ends it too.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    let (mut rx, mut tx) = match args {
        [r, w] => (File::from(take_fd(r)?), File::from(take_fd(w)?)),
        [fd] => {
            let sock = File::from(take_fd(fd)?);
            let tx = sock.try_clone().context("dup socket")?;
            (sock, tx)
        }
        _ => bail!("stream child wants one or two fd arguments"),
    };
    let mut buf = [0u8; 8];
    loop {
        match rx.read_exact(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e).context("reading request"),
        }
        if u64::from_le_bytes(buf) == STOP {
            return Ok(());
        }
        tx.write_all(&buf).context("writing echo")?;
    }
}
