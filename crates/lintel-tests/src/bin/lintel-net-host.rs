//! A "host" of the network tests: a proxy listening at the address given
//! (`lintel-net-host ADDR`), exporting the control door of a peer domain
//! it starts (`ctl`, served in another process, as a proxy's exports
//! usually are) and one it serves itself (`local`). It prints
//! `listening ADDR peer PID` and serves until its standard input closes.
//!
//! `LINTEL_NET_KEEPALIVE_MS` sets the keepalive; `LINTEL_NET_TLS=DIR` makes
//! the link TLS with `DIR/host.pem`, `DIR/host.key` and `DIR/ca.pem`.
//! `LINTEL_NET_RELAY=ADDR` makes it a middle host too: a link to the host
//! at ADDR, whose `ctl` it exports again as `far` (a chain of hosts).

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use lintel_net::{LinkOptions, Proxy, Tls};
use lintel_tests::control::Control;
use lintel_tests::Peer;

fn main() {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // The proxy's warnings (links refused, closed, cut) on standard error.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .without_time()
        .init();
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let peer = Peer::start("plain");
    let local = Control::new();
    let mut opts = match std::env::var_os("LINTEL_NET_TLS") {
        Some(dir) => {
            let dir = std::path::PathBuf::from(dir);
            let tls = Tls::from_pem_files(&dir.join("host.pem"), &dir.join("host.key"), &dir.join("ca.pem"))
                .expect("the host's certificates");
            LinkOptions::tls(tls)
        }
        None => LinkOptions::plain(),
    };
    if let Some(ms) = std::env::var("LINTEL_NET_KEEPALIVE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts = opts.keepalive(Duration::from_millis(ms));
    }
    if let Some(bytes) = std::env::var("LINTEL_NET_MAX_MESSAGE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.max_message = bytes;
    }
    let mut exports = BTreeMap::from([
        ("ctl".to_string(), peer.ctl.clone()),
        ("local".to_string(), local.door()),
    ]);
    let proxy = Proxy::start().expect("a proxy");
    if let Some(far) = std::env::var("LINTEL_NET_RELAY")
        .ok()
        .and_then(|a| a.parse().ok())
    {
        let empty = BTreeMap::<String, lintel::Door>::new();
        proxy
            .link("far", lintel_net::Endpoint::Connect(far), opts.clone(), empty)
            .expect("a link to the far host");
        exports.insert("far".to_string(), proxy.import("far", "ctl"));
    }
    let listener = proxy
        .listen(addr.parse().expect("an address"), opts, exports)
        .expect("listen");
    println!("listening {} peer {}", listener.addr(), peer.pid());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop((listener, proxy, peer));
}
