//! A domain the multi-process tests start: it serves the control door
//! (`lintel_tests::control`), whose methods exercise the runtime from the
//! other side.
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::sync::atomic::Ordering::SeqCst;

use lintel::{Door, Reply, Request};
use lintel_tests::control::Control;

fn main() {
    // A test peer should not outlive the test that started it.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let role = std::env::args().nth(1).unwrap_or_default();
    let control = Control::new();
    let counts = control.counts.clone();
    lintel::pool::on_shortage(move |stats| {
        if stats.threads >= stats.limit {
            counts.watched.fetch_add(1, SeqCst);
        }
    });
    // The "async" role serves the control door with an async handler on a
    // runtime of its own.
    let rt = (role == "async").then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    });
    // The "trusting" role serves it on a door that reads large arguments
    // in place (`Door::create_trusting`).
    let ctl = match &rt {
        Some(rt) => control.async_door(rt.handle().clone()),
        None if role == "trusting" => control.trusting_door(),
        None => control.door(),
    };
    // A door never handed out: calls reaching it would mean a forged door.
    let counts = control.counts.clone();
    let secret = Door::create(0xdead, move |_: Request<'_>, _: &mut Reply| {
        counts.secret.fetch_add(1, SeqCst);
        Ok(())
    });
    let offered = match role.as_str() {
        "hold-offered" => vec![ctl.clone()],
        _ => vec![ctl.clone()],
    };
    if role == "join-with" {
        // The parent's doors are held before ours are offered.
        let control = control.clone();
        lintel::boot::join_with(move |parent| {
            // Slow on purpose: a parent call that could overtake this would.
            std::thread::sleep(std::time::Duration::from_millis(200));
            control.hold(parent.iter().cloned());
            offered
        })
        .expect("join parent domain");
    } else {
        let given = lintel::boot::join(&offered).expect("join parent domain");
        control.hold(given);
    }
    // Serve until the parent goes away (death signal) or kills us.
    let _keep = (ctl, secret, rt);
    loop {
        std::thread::park();
    }
}
