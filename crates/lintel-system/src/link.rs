//! Links to other systems (`[link.NAME]` in the manifest): a proxy
//! (`lintel-net`) run by one domain, exporting some of this system's
//! services to the far system and binding the far system's under their
//! names here, so that `ctx.lookup("kv")` finds a service placed on
//! another host as it finds one placed in another domain.
//!
//! Each import is bound as a door by name (`lintel_net::Proxy::import`):
//! it follows the far service across its restarts and across the link's
//! reconnections. Each export is looked up in this system's name service
//! when the far side asks, so it too is the current instance.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lintel::Door;
use lintel_net::{Endpoint, Exports, LinkOptions, Proxy, Tls};
use serde::{Deserialize, Serialize};

use crate::names::Names;

/// One link of a manifest, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// The link's name (`[link.NAME]`).
    pub name: String,
    /// Whether this end listens (else it connects).
    pub listen: bool,
    /// The address it listens at or connects to.
    pub addr: SocketAddr,
    /// This system's services the far side may look up.
    pub export: Vec<String>,
    /// The far system's services bound here under their names.
    pub import: Vec<String>,
    /// The link's keepalive.
    pub keepalive_ms: u64,
    /// TLS files (absolute paths); `None`: plain TCP, as the manifest said.
    pub tls: Option<TlsFiles>,
}

/// A link end's certificate chain, key, authority and (connecting) the
/// name the listener's certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsFiles {
    /// This end's certificate chain (PEM).
    pub cert: PathBuf,
    /// This end's private key (PEM).
    pub key: PathBuf,
    /// The authority's certificate(s) (PEM) that the far end's certificate must be signed by.
    pub ca: PathBuf,
    /// The name the listener's certificate must carry; set on connecting ends only.
    pub server_name: Option<String>,
}

/// This system's exports on a link: the names allowed, looked up in the
/// name service when asked (waiting while their domain restarts).
struct SystemExports {
    names: Names,
    allowed: BTreeSet<String>,
}

/// How long an export's lookup waits for a domain that is (re)starting.
const EXPORT_WAIT: Duration = Duration::from_secs(10);

impl Exports for SystemExports {
    fn lookup(&self, name: &str) -> Option<Door> {
        if !self.allowed.contains(name) {
            return None;
        }
        self.names.lookup_within(name, EXPORT_WAIT).ok()
    }

    fn names(&self) -> Vec<String> {
        self.allowed.iter().cloned().collect()
    }
}

/// Start `links` in this domain: run each, then bind its imports. The
/// proxy lives as long as the value returned.
pub(crate) fn start(names: &Names, links: &[LinkSpec]) -> Result<Option<Proxy>, String> {
    if links.is_empty() {
        return Ok(None);
    }
    // The proxy's news (links up and down, connections refused or cut and
    // why) on the domain's standard error, as the supervisor's own.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .try_init();
    let proxy = Proxy::start().map_err(|e| e.to_string())?;
    for l in links {
        let mut opts = match &l.tls {
            Some(f) => {
                let mut tls = Tls::from_pem_files(&f.cert, &f.key, &f.ca)
                    .map_err(|e| format!("link `{}`: {e}", l.name))?;
                if let Some(n) = &f.server_name {
                    tls = tls
                        .server_name(n)
                        .map_err(|e| format!("link `{}`: {e}", l.name))?;
                }
                LinkOptions::tls(tls)
            }
            None => LinkOptions::plain(),
        };
        opts = opts.keepalive(Duration::from_millis(l.keepalive_ms));
        let endpoint = if l.listen {
            Endpoint::Listen(l.addr)
        } else {
            Endpoint::Connect(l.addr)
        };
        let exports = SystemExports {
            names: names.clone(),
            allowed: l.export.iter().cloned().collect(),
        };
        proxy
            .link(&l.name, endpoint, opts, exports)
            .map_err(|e| format!("link `{}`: {e}", l.name))?;
        // Bound once the link runs: a call on an import finds its link.
        for service in &l.import {
            names
                .bind(service, proxy.import(&l.name, service))
                .map_err(|e| format!("binding `{service}` of link `{}`: {e}", l.name))?;
        }
    }
    Ok(Some(proxy))
}
