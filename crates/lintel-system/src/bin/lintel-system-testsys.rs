//! A tiny system for lintel-system's tests: services on raw doors (one async) and
//! two drivers, placed by whatever manifest the test writes.
//!
//! - `counter`: adds the 8-byte little-endian argument, returns the total.
//! - `greeter`: looks up `counter` when built; `g NAME` returns
//!   `hello, NAME (#N)` counting greetings in `counter`; `w` says whether
//!   its counter door is local.
//! - `bomb`: aborts its domain when called.
//! - `fragile`: fails to start while the file its `fail_if` setting names
//!   exists, and takes its `start_ms` setting's milliseconds to start.
//! - `driver` (root): runs the script `LINTEL_TESTSYS_MODE` names
//!   (`script`, `crash`, `fail`, `panic`).
//! - `tally` (async): adds the 8-byte argument after a 1 ms timer, returns
//!   the total, served by an async handler on its domain's runtime.
//! - `async-driver` (root, async): calls `tally` and `greeter` with awaited
//!   calls, many at once, and prints what they return.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lintel::{AsyncRequest, Door, Fault, Reply, Request};
use lintel_system::{BoxError, Context, Registry};

fn counter(_: &Context) -> Result<Door, BoxError> {
    let total = AtomicU64::new(0);
    Ok(Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
        let n: [u8; 8] = req.data.try_into().map_err(|_| Fault(1))?;
        let t = total.fetch_add(u64::from_le_bytes(n), Ordering::SeqCst) + u64::from_le_bytes(n);
        reply.data.extend_from_slice(&t.to_le_bytes());
        Ok(())
    }))
}

fn add(counter: &Door, n: u64) -> Result<u64, BoxError> {
    let r = counter.call_bytes(&n.to_le_bytes())?;
    Ok(u64::from_le_bytes(r.as_slice().try_into()?))
}

fn greeter(ctx: &Context) -> Result<Door, BoxError> {
    let counter = ctx.lookup("counter")?;
    Ok(Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
        match req.data.split_first() {
            Some((b'g', name)) => {
                let n = add(&counter, 1).map_err(|_| Fault(2))?;
                let name = String::from_utf8_lossy(name);
                reply
                    .data
                    .extend_from_slice(format!("hello, {name} (#{n})").as_bytes());
            }
            Some((b'l', name)) => reply.data.extend_from_slice(name.len().to_string().as_bytes()),
            Some((b'w', _)) => reply
                .data
                .extend_from_slice(counter.is_local().to_string().as_bytes()),
            _ => return Err(Fault(1)),
        }
        Ok(())
    }))
}

fn bomb(_: &Context) -> Result<Door, BoxError> {
    Ok(Door::create(0, |_: Request<'_>, _: &mut Reply| {
        std::process::abort()
    }))
}

fn fragile(ctx: &Context) -> Result<Door, BoxError> {
    if let Some(ms) = ctx.setting("start_ms") {
        std::thread::sleep(Duration::from_millis(ms.parse()?));
    }
    if ctx.setting_path("fail_if").is_some_and(|p| p.exists()) {
        return Err("the file `fail_if` names exists".into());
    }
    Ok(Door::create(0, |_: Request<'_>, reply: &mut Reply| {
        reply.data.push(1);
        Ok(())
    }))
}

fn driver(ctx: &Context) -> Result<(), BoxError> {
    let mode = std::env::var("LINTEL_TESTSYS_MODE").unwrap_or_else(|_| "script".into());
    match mode.as_str() {
        "fail" => return Err("the driver failed on purpose".into()),
        "panic" => panic!("the driver panicked on purpose"),
        _ => {}
    }
    let greeter = ctx.lookup("greeter")?;
    let counter = ctx.lookup("counter")?;
    for name in ["alice", "bob"] {
        let r = greeter.call_bytes(format!("g{name}").as_bytes())?;
        println!("greet {name} -> {}", String::from_utf8_lossy(&r));
    }
    // Names above and below the greeter domain's message limit (64 KiB in
    // the tests' manifests): the bulk path below it, a typed error above.
    let long = [&b"l"[..], &[b'x'; 100_000]].concat();
    match greeter.call_bytes(&long) {
        Ok(r) => println!("measure a long name -> {}", String::from_utf8_lossy(&r)),
        Err(e) => println!("measure a long name -> {e}"),
    }
    let r = greeter.call_bytes(&[&b"l"[..], &[b'y'; 60_000]].concat())?;
    println!("measure a 60000-byte name -> {}", String::from_utf8_lossy(&r));
    println!("count +5 -> {}", add(&counter, 5)?);
    println!("local: driver->counter {}", counter.is_local());
    println!(
        "local: greeter->counter {}",
        String::from_utf8_lossy(&greeter.call_bytes(b"w")?)
    );
    println!(
        "lookup missing -> {}",
        ctx.lookup_within("missing", Duration::from_millis(100))
            .unwrap_err()
    );
    if mode == "crash" {
        let bomb = ctx.lookup("bomb")?;
        println!("bomb -> {}", bomb.call_bytes(b"boom").unwrap_err());
        println!("count +1 -> {}", add(&counter, 1)?);
        // The supervisor notices the death within milliseconds; until then
        // the name still answers with the dead door.
        for _ in 0..500 {
            if let Err(e) = ctx.lookup("bomb") {
                println!("lookup bomb -> {e}");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

async fn tally(_: Context) -> Result<Door, BoxError> {
    let total = std::sync::Arc::new(AtomicU64::new(0));
    Ok(Door::create_async(0, move |req: AsyncRequest| {
        let total = total.clone();
        async move {
            let n: [u8; 8] = req.data.as_slice().try_into().map_err(|_| Fault(1))?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            let t = total.fetch_add(u64::from_le_bytes(n), Ordering::SeqCst) + u64::from_le_bytes(n);
            Ok(Reply {
                data: t.to_le_bytes().to_vec(),
                ..Reply::default()
            })
        }
    }))
}

async fn async_driver(ctx: Context) -> Result<(), BoxError> {
    let tally = ctx.lookup("tally")?;
    let greeter = ctx.lookup("greeter")?;
    // A hundred awaited calls at once.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..100 {
        let tally = tally.clone();
        calls.spawn(async move { tally.call_async(&1u64.to_le_bytes(), &[]).await });
    }
    let mut highest = 0;
    while let Some(r) = calls.join_next().await {
        let r = r??;
        highest = highest.max(u64::from_le_bytes(r.data.as_slice().try_into()?));
    }
    println!("tally after 100 -> {highest}");
    let r = greeter.call_async(b"gcarol", &[]).await?;
    println!("greet carol -> {}", String::from_utf8_lossy(&r.data));
    println!("local: async-driver->tally {}", tally.is_local());
    Ok(())
}

fn main() -> std::process::ExitCode {
    let mut reg = Registry::new();
    reg.service("counter", counter)
        .service("greeter", greeter)
        .service("bomb", bomb)
        .service("fragile", fragile)
        .driver("driver", driver)
        .async_service("tally", tally)
        .async_driver("async-driver", async_driver);
    lintel_system::main(reg)
}
