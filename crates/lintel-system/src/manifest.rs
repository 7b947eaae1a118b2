//! The placement manifest: which domains exist, which services each hosts,
//! and each domain's settings. Parsed and checked in full against the
//! [`Registry`] before any process starts, so that a placement mistake is a
//! message naming the line, never a half-started system.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::link::{LinkSpec, TlsFiles};
use crate::registry::{Kind, Registry};
use crate::restart::{GiveUp, Policy, Restart};

/// Most server threads a manifest may ask for in one domain.
pub const MAX_THREADS_LIMIT: usize = 4096;

/// A checked manifest: every service is registered and placed once, every
/// domain hosts at least one, and the root (if any) is a placed driver.
///
/// ```
/// use lintel_system::{Manifest, Registry};
/// let mut reg = Registry::new();
/// reg.service("clock", |_| Ok(lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()))));
/// let m = Manifest::parse("[domain.time]\nservices = [\"clock\"]\n", "example.toml".as_ref(), &reg).unwrap();
/// assert_eq!(m.domains[0].name, "time");
/// assert_eq!(m.domain_of("clock").unwrap().name, "time");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The system's name (the `system` key, else the file's stem).
    pub system: String,
    /// The driver whose return ends the system, if any.
    pub root: Option<String>,
    /// Where the supervisor listens for tools such as `stats`.
    pub socket: PathBuf,
    /// Domains in the order the file lists them (and they are started).
    pub domains: Vec<DomainSpec>,
    /// Each service's settings (`[service.NAME]` tables), as strings, by
    /// service name; a service reads its own with
    /// [`Context::setting`](crate::Context::setting).
    pub settings: BTreeMap<String, BTreeMap<String, String>>,
    /// The manifest's directory: relative path settings are resolved
    /// against it ([`Context::setting_path`](crate::Context::setting_path)).
    pub dir: PathBuf,
}

/// One domain of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSpec {
    /// The domain's name (`[domain.NAME]`, or `link-NAME` for a link's own domain).
    pub name: String,
    /// Services it hosts, in the order listed.
    pub services: Vec<String>,
    /// Server-thread limit ([`lintel::set_max_server_threads`]); runtime default if `None`.
    pub max_threads: Option<usize>,
    /// Spin policy ([`lintel::set_spin`]); runtime default if `None`.
    pub spin: Option<bool>,
    /// Message limit in bytes ([`lintel::set_max_message`]); runtime default if `None`.
    pub max_message: Option<usize>,
    /// What the supervisor does when the domain exits ([`Policy::default`]
    /// unless the manifest says otherwise; the root's domain is never
    /// restarted: its end is the system's).
    pub restart: Policy,
    /// Links to other systems this domain runs (`[link.NAME]`; a link that
    /// names no domain runs in one of its own, `link-NAME`, with no
    /// services).
    pub links: Vec<LinkSpec>,
}

impl DomainSpec {
    /// The names this domain binds: its services and its links' imports.
    pub fn binds(&self) -> impl Iterator<Item = &String> {
        self.services
            .iter()
            .chain(self.links.iter().flat_map(|l| l.import.iter()))
    }
}

/// The manifest file's text, or an error naming it.
fn read_text(path: &Path) -> Result<String, ManifestError> {
    std::fs::read_to_string(path).map_err(|e| ManifestError {
        file: path.display().to_string(),
        problems: vec![Problem {
            line: 0,
            column: 0,
            message: format!("cannot read the manifest: {e}"),
        }],
    })
}

impl Manifest {
    /// Read and check the manifest at `path`.
    pub fn load(path: &Path, registry: &Registry) -> Result<Manifest, ManifestError> {
        Manifest::parse(&read_text(path)?, path, registry)
    }

    /// Check manifest `text`; `path` names it in messages and anchors a
    /// relative `socket` path.
    pub fn parse(text: &str, path: &Path, registry: &Registry) -> Result<Manifest, ManifestError> {
        let mut diag = Diag {
            text,
            problems: Vec::new(),
        };
        let raw: RawManifest = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                diag.at(e.span(), e.message().trim_end().to_string());
                return Err(diag.into_error(path));
            }
        };
        let manifest = check(&raw, path, registry, &mut diag);
        if diag.problems.is_empty() {
            Ok(manifest)
        } else {
            Err(diag.into_error(path))
        }
    }

    /// Where the system booted from the manifest at `path` listens for
    /// tools, read without checking its domains and services (for a tool
    /// that does not carry the system's registry, such as `lintel-run`
    /// joining its file service).
    pub fn socket_at(path: &Path) -> Result<PathBuf, ManifestError> {
        let text = read_text(path)?;
        let mut diag = Diag {
            text: &text,
            problems: Vec::new(),
        };
        let raw: RawManifest = match toml::from_str(&text) {
            Ok(raw) => raw,
            Err(e) => {
                diag.at(e.span(), e.message().trim_end().to_string());
                return Err(diag.into_error(path));
            }
        };
        let system = system_of(&raw, path, &mut diag);
        let socket = socket_of(&raw, path, &system, &mut diag);
        if diag.problems.is_empty() {
            Ok(socket)
        } else {
            Err(diag.into_error(path))
        }
    }

    /// The domain hosting `service`.
    pub fn domain_of(&self, service: &str) -> Option<&DomainSpec> {
        self.domains
            .iter()
            .find(|d| d.services.iter().any(|s| s == service))
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&DomainSpec> {
        self.domains.iter().find(|d| d.name == name)
    }
}

/// Why a manifest was refused: every problem found, each with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest's path as given.
    pub file: String,
    /// Every problem found, in line order.
    pub problems: Vec<Problem>,
}

/// One problem in a manifest. `line` and `column` count from 1 (0: the
/// whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line it is on, from 1; 0 when it concerns the whole file.
    pub line: usize,
    /// The column (in characters), from 1; 0 when `line` is 0.
    pub column: usize,
    /// What is wrong, without the file or position.
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if p.line == 0 {
                write!(f, "{}: {}", self.file, p.message)?;
            } else {
                write!(f, "{}:{}:{}: {}", self.file, p.line, p.column, p.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    system: Option<Spanned<String>>,
    root: Option<Spanned<String>>,
    socket: Option<Spanned<String>>,
    #[serde(default)]
    domain: HashMap<Spanned<String>, RawDomain>,
    #[serde(default)]
    service: HashMap<Spanned<String>, HashMap<Spanned<String>, Spanned<toml::Value>>>,
    #[serde(default)]
    link: HashMap<Spanned<String>, RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    listen: Option<Spanned<String>>,
    connect: Option<Spanned<String>>,
    #[serde(default)]
    export: Vec<Spanned<String>>,
    #[serde(default)]
    import: Vec<Spanned<String>>,
    domain: Option<Spanned<String>>,
    keepalive: Option<Spanned<String>>,
    plain: Option<Spanned<bool>>,
    tls: Option<Spanned<RawTls>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Spanned<String>,
    key: Spanned<String>,
    ca: Spanned<String>,
    server_name: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDomain {
    services: Spanned<Vec<Spanned<String>>>,
    max_threads: Option<Spanned<i64>>,
    spin: Option<Spanned<Spin>>,
    max_message: Option<Spanned<i64>>,
    restart: Option<Spanned<String>>,
    backoff: Option<Spanned<String>>,
    max_backoff: Option<Spanned<String>>,
    max_restarts: Option<Spanned<i64>>,
    period: Option<Spanned<String>>,
    give_up: Option<Spanned<String>>,
}

/// `spin = true | false | "on" | "off"`.
struct Spin(bool);

impl<'de> Deserialize<'de> for Spin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Spin, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Spin;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, \"on\" or \"off\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Spin, E> {
                Ok(Spin(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Spin, E> {
                match v {
                    "on" => Ok(Spin(true)),
                    "off" => Ok(Spin(false)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

struct Diag<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Diag<'_> {
    fn at(&mut self, span: Option<Range<usize>>, message: String) {
        let (line, column) = match span {
            Some(s) => self.line_col(s.start),
            None => (0, 0),
        };
        self.problems.push(Problem {
            line,
            column,
            message,
        });
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    fn line_of(&self, span: Range<usize>) -> usize {
        self.line_col(span.start).0
    }

    fn into_error(mut self, path: &Path) -> ManifestError {
        self.problems.sort_by_key(|p| (p.line, p.column));
        ManifestError {
            file: path.display().to_string(),
            problems: self.problems,
        }
    }
}

/// A name usable for a system or domain: it appears in command lines, in
/// name-service names and in socket paths.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn check(raw: &RawManifest, path: &Path, registry: &Registry, diag: &mut Diag<'_>) -> Manifest {
    let system = system_of(raw, path, diag);

    // Domains in file order (the map does not keep it; the spans do).
    let mut raw_domains: Vec<_> = raw.domain.iter().collect();
    raw_domains.sort_by_key(|(k, _)| k.span().start);
    if raw_domains.is_empty() {
        diag.at(
            None,
            "no domains: add at least one `[domain.NAME]` table with `services = [...]`".into(),
        );
    }

    let known = || {
        let names: Vec<&str> = registry.names().collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let mut placed: HashMap<&str, (&str, Range<usize>)> = HashMap::new();
    let mut domains = Vec::new();
    for (key, d) in raw_domains {
        let name = key.get_ref();
        if !valid_name(name) {
            diag.at(
                Some(key.span()),
                format!("domain name `{name}` must be 1-64 letters, digits, `-` or `_`"),
            );
        }
        if d.services.get_ref().is_empty() {
            diag.at(
                Some(d.services.span()),
                format!("domain `{name}` hosts no services; list at least one or remove the domain"),
            );
        }
        for s in d.services.get_ref() {
            let svc = s.get_ref().as_str();
            match registry.kind(svc) {
                None => diag.at(
                    Some(s.span()),
                    format!("unknown service `{svc}` (registered: {})", known()),
                ),
                Some(Kind::Driver(_)) if raw.root.as_ref().map(|r| r.get_ref().as_str()) != Some(svc) => {
                    diag.at(
                        Some(s.span()),
                        format!(
                            "service `{svc}` is a driver (it has a run function) and can only be placed as the root: set `root = \"{svc}\"`"
                        ),
                    )
                }
                Some(_) => {}
            }
            if let Some((other, first)) = placed.get(svc) {
                let msg = format!(
                    "service `{svc}` is placed twice: in domain `{other}` (line {}) and in domain `{name}`",
                    diag.line_of(first.clone())
                );
                diag.at(Some(s.span()), msg);
            } else {
                placed.insert(svc, (name.as_str(), s.span()));
            }
        }
        let max_threads = d.max_threads.as_ref().and_then(|n| {
            let v = *n.get_ref();
            if v < 1 || v as u64 > MAX_THREADS_LIMIT as u64 {
                diag.at(
                    Some(n.span()),
                    format!("max_threads = {v} is out of range (1 to {MAX_THREADS_LIMIT})"),
                );
                None
            } else {
                Some(v as usize)
            }
        });
        let max_message = d.max_message.as_ref().and_then(|n| {
            let v = *n.get_ref();
            let ceiling = u32::MAX as i64;
            if !(1..=ceiling).contains(&v) {
                diag.at(
                    Some(n.span()),
                    format!("max_message = {v} is out of range (1 to {ceiling} bytes)"),
                );
                None
            } else {
                Some(v as usize)
            }
        });
        let hosts_root = raw
            .root
            .as_ref()
            .is_some_and(|r| d.services.get_ref().iter().any(|s| s.get_ref() == r.get_ref()));
        let restart = policy_of(d, name, hosts_root, diag);
        domains.push(DomainSpec {
            name: name.clone(),
            services: d.services.get_ref().iter().map(|s| s.get_ref().clone()).collect(),
            max_threads,
            spin: d.spin.as_ref().map(|s| s.get_ref().0),
            max_message,
            restart,
            links: Vec::new(),
        });
    }

    let root = raw.root.as_ref().map(|r| {
        let svc = r.get_ref().as_str();
        match registry.kind(svc) {
            None => diag.at(
                Some(r.span()),
                format!("unknown root service `{svc}` (registered: {})", known()),
            ),
            Some(Kind::Service(_)) => diag.at(
                Some(r.span()),
                format!("root service `{svc}` has no run function: register it with Registry::driver"),
            ),
            Some(Kind::Driver(_)) if !placed.contains_key(svc) => diag.at(
                Some(r.span()),
                format!("root service `{svc}` is not placed in any domain"),
            ),
            Some(Kind::Driver(_)) => {}
        }
        svc.to_string()
    });

    let socket = socket_of(raw, path, &system, diag);
    let dir = manifest_dir(path);
    links_of(raw, &dir, &placed, &mut domains, diag);

    let mut settings = BTreeMap::new();
    let mut raw_settings: Vec<_> = raw.service.iter().collect();
    raw_settings.sort_by_key(|(k, _)| k.span().start);
    for (svc, table) in raw_settings {
        if !placed.contains_key(svc.get_ref().as_str()) {
            diag.at(
                Some(svc.span()),
                format!("settings for service `{}`, which no domain places", svc.get_ref()),
            );
        }
        let mut values = BTreeMap::new();
        for (key, value) in table {
            let text = match value.get_ref() {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    diag.at(
                        Some(value.span()),
                        format!("setting `{}` must be a string, number or boolean", key.get_ref()),
                    );
                    continue;
                }
            };
            values.insert(key.get_ref().clone(), text);
        }
        settings.insert(svc.get_ref().clone(), values);
    }
    Manifest {
        system,
        root,
        socket,
        domains,
        settings,
        dir,
    }
}

/// The manifest's directory, absolute.
fn manifest_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::path::absolute(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .unwrap_or_else(|_| dir.to_path_buf())
}

/// Shortest and longest keepalive a link may have.
const KEEPALIVE_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(3600));

/// Check the `[link.NAME]` tables and give each to the domain that runs it.
fn links_of(
    raw: &RawManifest,
    dir: &Path,
    placed: &HashMap<&str, (&str, Range<usize>)>,
    domains: &mut Vec<DomainSpec>,
    diag: &mut Diag<'_>,
) {
    let mut raw_links: Vec<_> = raw.link.iter().collect();
    raw_links.sort_by_key(|(k, _)| k.span().start);
    let mut imported: HashMap<String, String> = HashMap::new();
    for (key, l) in raw_links {
        let name = key.get_ref();
        if !valid_name(name) {
            diag.at(
                Some(key.span()),
                format!("link name `{name}` must be 1-64 letters, digits, `-` or `_`"),
            );
        }
        let (listen, addr) = match (&l.listen, &l.connect) {
            (Some(a), None) => (true, Some(a)),
            (None, Some(a)) => (false, Some(a)),
            (Some(_), Some(c)) => {
                diag.at(
                    Some(c.span()),
                    format!("link `{name}` has both `listen` and `connect`: an end does one"),
                );
                (false, None)
            }
            (None, None) => {
                diag.at(
                    Some(key.span()),
                    format!(
                        "link `{name}` needs `listen = \"ADDRESS:PORT\"` or `connect = \"ADDRESS:PORT\"`"
                    ),
                );
                (false, None)
            }
        };
        let addr = addr.and_then(|a| match a.get_ref().parse::<std::net::SocketAddr>() {
            Ok(v) => Some(v),
            Err(_) => {
                diag.at(
                    Some(a.span()),
                    format!(
                        "`{}` is not an address: write an IP address and port, such as \"127.0.0.1:7700\"",
                        a.get_ref()
                    ),
                );
                None
            }
        });
        let resolve = |p: &Spanned<String>, diag: &mut Diag<'_>| {
            let full = dir.join(p.get_ref());
            if !full.is_file() {
                diag.at(
                    Some(p.span()),
                    format!(
                        "`{}` is not a file (paths are relative to the manifest)",
                        p.get_ref()
                    ),
                );
            }
            full
        };
        let tls = match (&l.tls, l.plain.as_ref().map(|p| (*p.get_ref(), p.span()))) {
            (Some(t), Some((true, span))) => {
                diag.at(
                    Some(span.start.min(t.span().start)..span.end),
                    format!("link `{name}` is both TLS and plain: choose one"),
                );
                None
            }
            (Some(t), _) => {
                let t = t.get_ref();
                if !listen && t.server_name.is_none() {
                    diag.at(
                        Some(t.cert.span()),
                        format!("link `{name}` connects: its `tls` needs `server_name`, the name the listener's certificate carries"),
                    );
                }
                Some(TlsFiles {
                    cert: resolve(&t.cert, diag),
                    key: resolve(&t.key, diag),
                    ca: resolve(&t.ca, diag),
                    server_name: t.server_name.as_ref().map(|n| n.get_ref().clone()),
                })
            }
            (None, Some((true, _))) => None,
            (None, _) => {
                diag.at(
                    Some(key.span()),
                    format!(
                        "link `{name}` is neither TLS nor plain: give `[link.{name}.tls]` with `cert`, `key` and `ca`, or `plain = true` (unencrypted: loopback and tests)"
                    ),
                );
                None
            }
        };
        let mut keepalive = Duration::from_secs(1);
        if let Some(k) = &l.keepalive {
            match humantime::parse_duration(k.get_ref()) {
                Ok(t) if (KEEPALIVE_RANGE.0..=KEEPALIVE_RANGE.1).contains(&t) => keepalive = t,
                Ok(_) => diag.at(
                    Some(k.span()),
                    format!("keepalive = \"{}\" is out of range (10ms to 1h)", k.get_ref()),
                ),
                Err(e) => diag.at(
                    Some(k.span()),
                    format!(
                        "keepalive = \"{}\" is not a duration ({e}); write for example \"500ms\" or \"2s\"",
                        k.get_ref()
                    ),
                ),
            }
        }
        for e in &l.export {
            if !placed.contains_key(e.get_ref().as_str()) {
                diag.at(
                    Some(e.span()),
                    format!(
                        "link `{name}` exports `{}`, which no domain of this system places",
                        e.get_ref()
                    ),
                );
            }
        }
        for i in &l.import {
            let svc = i.get_ref();
            if let Some((domain, _)) = placed.get(svc.as_str()) {
                diag.at(
                    Some(i.span()),
                    format!("link `{name}` imports `{svc}`, which domain `{domain}` places here: a name is served in one place"),
                );
            } else if let Some(other) = imported.insert(svc.clone(), name.clone()) {
                diag.at(
                    Some(i.span()),
                    format!("`{svc}` is imported twice: by link `{other}` and by link `{name}`"),
                );
            }
        }
        let (Some(addr), true) = (addr, valid_name(name)) else {
            continue;
        };
        let spec = LinkSpec {
            name: name.clone(),
            listen,
            addr,
            export: l.export.iter().map(|e| e.get_ref().clone()).collect(),
            import: l.import.iter().map(|i| i.get_ref().clone()).collect(),
            keepalive_ms: keepalive.as_millis() as u64,
            tls,
        };
        match &l.domain {
            Some(d) => match domains.iter_mut().find(|x| &x.name == d.get_ref()) {
                Some(domain) => domain.links.push(spec),
                None => diag.at(
                    Some(d.span()),
                    format!(
                        "link `{name}` runs in domain `{}`, which the manifest does not list",
                        d.get_ref()
                    ),
                ),
            },
            None => {
                let own = format!("link-{name}");
                if domains.iter().any(|x| x.name == own) {
                    diag.at(
                        Some(key.span()),
                        format!("link `{name}` would run in a domain `{own}` of its own, but a domain has that name: set `domain`"),
                    );
                    continue;
                }
                domains.push(DomainSpec {
                    name: own,
                    services: Vec::new(),
                    max_threads: None,
                    spin: None,
                    max_message: None,
                    restart: Policy::default(),
                    links: vec![spec],
                });
            }
        }
    }
}

/// Most restarts a policy may allow within its period.
const MAX_RESTARTS_LIMIT: i64 = 1_000_000;

/// A domain's restart policy: the defaults, with each key the manifest
/// gives checked. The root's domain takes none: its exit ends the system.
fn policy_of(d: &RawDomain, name: &str, hosts_root: bool, diag: &mut Diag<'_>) -> Policy {
    let mut p = Policy::default();
    if hosts_root {
        p.restart = Restart::Never;
        let keys = [&d.restart, &d.backoff, &d.max_backoff, &d.period, &d.give_up];
        let given = keys
            .into_iter()
            .flatten()
            .map(|k| k.span())
            .chain(d.max_restarts.as_ref().map(|k| k.span()));
        if let Some(span) = given.min_by_key(|s| s.start) {
            diag.at(
                Some(span),
                format!("domain `{name}` hosts the root, whose return or exit ends the system: it is never restarted, so it takes no restart keys"),
            );
        }
        return p;
    }
    if let Some(r) = &d.restart {
        match r.get_ref().as_str() {
            "never" => p.restart = Restart::Never,
            "on-failure" => p.restart = Restart::OnFailure,
            "always" => p.restart = Restart::Always,
            other => diag.at(
                Some(r.span()),
                format!("restart = \"{other}\" is not a policy: \"never\", \"on-failure\" or \"always\""),
            ),
        }
    }
    let mut duration = |key: &str, v: &Option<Spanned<String>>, into: &mut Duration| {
        let Some(v) = v else { return };
        match humantime::parse_duration(v.get_ref()) {
            Ok(t) if t <= MAX_WAIT => *into = t,
            Ok(_) => diag.at(
                Some(v.span()),
                format!("{key} = \"{}\" is longer than a day", v.get_ref()),
            ),
            Err(e) => diag.at(
                Some(v.span()),
                format!(
                    "{key} = \"{}\" is not a duration ({e}); write for example \"250ms\", \"2s\" or \"1m\"",
                    v.get_ref()
                ),
            ),
        }
    };
    duration("backoff", &d.backoff, &mut p.backoff);
    duration("max_backoff", &d.max_backoff, &mut p.max_backoff);
    duration("period", &d.period, &mut p.period);
    if let Some(n) = &d.max_restarts {
        match u32::try_from(*n.get_ref()) {
            Ok(v) if i64::from(v) <= MAX_RESTARTS_LIMIT => p.max_restarts = v,
            _ => diag.at(
                Some(n.span()),
                format!(
                    "max_restarts = {} is out of range (0 to {MAX_RESTARTS_LIMIT})",
                    n.get_ref()
                ),
            ),
        }
    }
    if let Some(g) = &d.give_up {
        match g.get_ref().as_str() {
            "leave" => p.give_up = GiveUp::Leave,
            "stop" => p.give_up = GiveUp::Stop,
            other => diag.at(
                Some(g.span()),
                format!("give_up = \"{other}\" is not an action: \"leave\" (the domain stays down) or \"stop\" (the system stops)"),
            ),
        }
    }
    if p.backoff > p.max_backoff {
        let span = d.backoff.as_ref().or(d.max_backoff.as_ref()).map(|v| v.span());
        diag.at(
            span,
            format!(
                "backoff ({}) is longer than max_backoff ({})",
                humantime::format_duration(p.backoff),
                humantime::format_duration(p.max_backoff)
            ),
        );
    }
    if p.period.is_zero()
        && let Some(v) = &d.period
    {
        diag.at(Some(v.span()), "period must be longer than 0".into());
    }
    p
}

/// Longest wait or period a policy may name.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The system's name: the `system` key, else the file's stem.
fn system_of(raw: &RawManifest, path: &Path, diag: &mut Diag<'_>) -> String {
    match &raw.system {
        Some(s) => {
            if !valid_name(s.get_ref()) {
                diag.at(
                    Some(s.span()),
                    format!(
                        "system name `{}` must be 1-64 letters, digits, `-` or `_`",
                        s.get_ref()
                    ),
                );
            }
            s.get_ref().clone()
        }
        None => {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let cleaned: String = stem
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(64)
                .collect();
            if cleaned.is_empty() {
                "lintel".into()
            } else {
                cleaned
            }
        }
    }
}

/// Where the supervisor listens: `socket` (relative to the manifest),
/// else the default for the system's name.
fn socket_of(raw: &RawManifest, path: &Path, system: &str, diag: &mut Diag<'_>) -> PathBuf {
    match &raw.socket {
        Some(s) => {
            let p = Path::new(s.get_ref());
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                path.parent().unwrap_or(Path::new(".")).join(p)
            };
            // sun_path holds 108 bytes including the terminating NUL.
            if p.as_os_str().len() >= 108 {
                diag.at(
                    Some(s.span()),
                    format!(
                        "socket path `{}` is longer than a Unix socket path may be (107 bytes)",
                        p.display()
                    ),
                );
            }
            p
        }
        None => default_socket(system),
    }
}

/// `$XDG_RUNTIME_DIR/lintel-SYSTEM.sock`, else `/tmp/lintel-UID-SYSTEM.sock`.
fn default_socket(system: &str) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join(format!("lintel-{system}.sock")),
        _ => PathBuf::from(format!(
            "/tmp/lintel-{}-{system}.sock",
            rustix::process::geteuid().as_raw()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lintel::Door;

    fn registry() -> Registry {
        let mut r = Registry::new();
        let nop = |_: &crate::Context| {
            Ok(Door::create(
                0,
                |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()),
            ))
        };
        r.service("kv", nop).service("clock", nop);
        r.driver("shell", |_| Ok(()));
        r
    }

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, Path::new("m.toml"), &registry())
    }

    /// The report of a manifest that must be refused.
    fn refused(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn links_are_placed_in_their_domains_with_their_imports_owned_there() {
        let m = parse(
            "[domain.a]\nservices = [\"clock\"]\n\
             [link.far]\nconnect = \"10.0.0.2:7700\"\nimport = [\"kv\"]\nexport = [\"clock\"]\nplain = true\nkeepalive = \"250ms\"\n\
             [link.near]\nlisten = \"0.0.0.0:7701\"\ndomain = \"a\"\nplain = true\n",
        )
        .unwrap();
        let names: Vec<_> = m.domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "link-far"]);
        let far = &m.domains[1].links[0];
        assert_eq!(
            (far.listen, far.addr.to_string(), far.keepalive_ms),
            (false, "10.0.0.2:7700".into(), 250)
        );
        assert_eq!(far.import, ["kv"]);
        assert!(m.domains[1].binds().any(|n| n == "kv"));
        assert_eq!(m.domains[0].links[0].name, "near");
        assert!(m.domains[0].links[0].listen);
    }

    #[test]
    fn malformed_links_are_refused_with_their_lines() {
        let d = "[domain.a]\nservices = [\"clock\"]\n";
        let cases = [
            ("[link.x]\nplain = true\n", "3:7: link `x` needs `listen"),
            (
                "[link.x]\nlisten = \"1.2.3.4:5\"\nconnect = \"1.2.3.4:5\"\nplain = true\n",
                "5:11: link `x` has both",
            ),
            (
                "[link.x]\nconnect = \"somewhere\"\nplain = true\n",
                "4:11: `somewhere` is not an address",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\n",
                "3:7: link `x` is neither TLS nor plain",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nplain = true\nimport = [\"clock\"]\n",
                "6:11: link `x` imports `clock`, which domain `a` places here",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nplain = true\nexport = [\"kv\"]\n",
                "6:11: link `x` exports `kv`, which no domain",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nplain = true\nkeepalive = \"forever\"\n",
                "6:13: keepalive = \"forever\" is not a duration",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nplain = true\ndomain = \"b\"\n",
                "6:10: link `x` runs in domain `b`",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\n[link.x.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"ca.pem\"\n",
                "needs `server_name`",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nimport = [\"kv\"]\nplain = true\n[link.y]\nconnect = \"1.2.3.4:6\"\nimport = [\"kv\"]\nplain = true\n",
                "9:11: `kv` is imported twice",
            ),
            (
                "[link.x]\nconnect = \"1.2.3.4:5\"\nplain = true\nspeed = 3\n",
                "unknown field `speed`",
            ),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .map(|(link, want)| (link, want, refused(&format!("{d}{link}"))))
            .filter(|(_, want, got)| !got.contains(*want))
            .map(|(link, _, got)| format!("{link:?}: {got}"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn good_manifest() {
        let m = parse(
            "system = \"demo\"\nroot = \"shell\"\nsocket = \"/tmp/x.sock\"\n\
             [domain.b]\nservices = [\"kv\"]\nmax_threads = 4\nspin = \"off\"\nmax_message = 65536\n\
             [domain.a]\nservices = [\"clock\", \"shell\"]\nspin = true\n",
        )
        .unwrap();
        assert_eq!(m.system, "demo");
        assert_eq!(m.root.as_deref(), Some("shell"));
        assert_eq!(m.socket, PathBuf::from("/tmp/x.sock"));
        let names: Vec<_> = m.domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["b", "a"], "file order is kept");
        assert_eq!(m.domains[0].max_threads, Some(4));
        assert_eq!(m.domains[0].spin, Some(false));
        assert_eq!(m.domains[0].max_message, Some(65536));
        assert_eq!(m.domains[1].max_message, None);
        assert_eq!(m.domains[1].spin, Some(true));
        assert_eq!(m.domain_of("shell").unwrap().name, "a");
    }

    #[test]
    fn restart_keys_set_the_policy_and_the_rest_keep_their_defaults() {
        let m = parse(
            "root = \"shell\"\n[domain.a]\nservices = [\"kv\"]\nrestart = \"always\"\nbackoff = \"250ms\"\n\
             max_backoff = \"2s\"\nmax_restarts = 0\nperiod = \"1m\"\ngive_up = \"stop\"\n\
             [domain.b]\nservices = [\"clock\"]\n[domain.c]\nservices = [\"shell\"]\n",
        )
        .unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            m.domains[0].restart,
            Policy {
                restart: Restart::Always,
                backoff: ms(250),
                max_backoff: ms(2000),
                max_restarts: 0,
                period: ms(60_000),
                give_up: GiveUp::Stop,
            }
        );
        assert_eq!(m.domains[1].restart, Policy::default());
        assert_eq!(m.domains[2].restart.restart, Restart::Never, "the root's domain");
    }

    #[test]
    fn malformed_restart_keys_are_refused_with_their_lines() {
        let e = refused(
            "root = \"shell\"\n[domain.a]\nservices = [\"kv\"]\nrestart = \"sometimes\"\nbackoff = \"soon\"\n\
             max_restarts = -1\ngive_up = \"panic\"\n[domain.b]\nservices = [\"clock\"]\nbackoff = \"5s\"\n\
             max_backoff = \"1s\"\nperiod = \"0s\"\n[domain.c]\nservices = [\"shell\"]\nrestart = \"always\"\n",
        );
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 7, "{e}");
        assert!(
            lines[0].starts_with("m.toml:4:11: restart = \"sometimes\" is not a policy"),
            "{e}"
        );
        assert!(
            lines[1].starts_with("m.toml:5:11: backoff = \"soon\" is not a duration"),
            "{e}"
        );
        assert!(
            lines[2].starts_with("m.toml:6:16: max_restarts = -1 is out of range"),
            "{e}"
        );
        assert!(
            lines[3].starts_with("m.toml:7:11: give_up = \"panic\" is not an action"),
            "{e}"
        );
        assert_eq!(
            lines[4],
            "m.toml:10:11: backoff (5s) is longer than max_backoff (1s)"
        );
        assert_eq!(lines[5], "m.toml:12:10: period must be longer than 0");
        assert!(
            lines[6].starts_with("m.toml:15:11: domain `c` hosts the root"),
            "{e}"
        );
    }

    #[test]
    fn service_settings_reach_their_service_as_text() {
        let m = parse(
            "[domain.a]\nservices = [\"kv\"]\n\
             [service.kv]\nroot = \"data\"\nread_only = true\nsize = 64\n",
        )
        .unwrap();
        let kv = &m.settings["kv"];
        assert_eq!(kv["root"], "data");
        assert_eq!(kv["read_only"], "true");
        assert_eq!(kv["size"], "64");
        assert!(m.dir.is_absolute(), "{:?}", m.dir);
        let s = refused("[domain.a]\nservices = [\"kv\"]\n[service.clock]\nx = 1\n");
        assert!(
            s.contains("m.toml:3:10: settings for service `clock`, which no domain places"),
            "{s}"
        );
        let s = refused("[domain.a]\nservices = [\"kv\"]\n[service.kv]\nx = [1]\n");
        assert!(
            s.contains("m.toml:4:5: setting `x` must be a string, number or boolean"),
            "{s}"
        );
    }

    #[test]
    fn unknown_key_names_its_line() {
        let e = parse("[domain.a]\nservices = [\"kv\"]\nmax_thread = 3\n").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("m.toml:3:"), "{s}");
        assert!(s.contains("max_thread"), "{s}");
    }

    #[test]
    fn semantic_errors_all_reported_with_lines() {
        let e = parse(
            "root = \"kv\"\n[domain.a]\nservices = [\"kv\", \"nope\"]\n[domain.b]\nservices = [\"kv\"]\n\
             [domain.c]\nservices = []\n[domain.d]\nservices = [\"clock\"]\nmax_threads = 0\n",
        )
        .unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("m.toml:1:8: root service `kv` has no run function"),
            "{s}"
        );
        assert!(s.contains("m.toml:3:19: unknown service `nope`"), "{s}");
        assert!(
            s.contains("m.toml:5:13: service `kv` is placed twice: in domain `a` (line 3) and in domain `b`"),
            "{s}"
        );
        assert!(s.contains("m.toml:7:12: domain `c` hosts no services"), "{s}");
        assert!(s.contains("m.toml:10:15: max_threads = 0 is out of range"), "{s}");
        assert_eq!(e.problems.len(), 5);
    }

    #[test]
    fn root_must_be_placed_driver() {
        let s = refused("root = \"shell\"\n[domain.a]\nservices = [\"kv\"]\n");
        assert!(
            s.contains("m.toml:1:8: root service `shell` is not placed"),
            "{s}"
        );
        let s = refused("[domain.a]\nservices = [\"shell\"]\n");
        assert!(s.contains("m.toml:2:13: service `shell` is a driver"), "{s}");
    }

    #[test]
    fn no_domains_and_bad_names() {
        let s = refused("system = \"x\"\n");
        assert!(s.contains("no domains"), "{s}");
        let s = refused("[domain.\"a b\"]\nservices = [\"kv\"]\n");
        assert!(s.contains("m.toml:1:9: domain name `a b`"), "{s}");
        let s = refused("[domain.a]\nservices = [\"kv\"]\nspin = \"sometimes\"\n");
        assert!(s.starts_with("m.toml:3:"), "{s}");
    }

    #[test]
    fn duplicate_domain_is_a_parse_error() {
        let s = refused("[domain.a]\nservices = [\"kv\"]\n[domain.a]\nservices = [\"clock\"]\n");
        assert!(s.starts_with("m.toml:3:"), "{s}");
    }

    #[test]
    fn default_socket_and_system_from_file_name() {
        let m = Manifest::parse(
            "[domain.a]\nservices = [\"kv\"]\n",
            Path::new("/x/my sys.toml"),
            &registry(),
        )
        .unwrap();
        assert_eq!(m.system, "my_sys");
        assert!(
            m.socket.to_string_lossy().ends_with("lintel-my_sys.sock")
                || m.socket.to_string_lossy().contains("-my_sys.sock")
        );
        let m = Manifest::parse(
            "socket = \"run/s.sock\"\n[domain.a]\nservices = [\"kv\"]\n",
            Path::new("/x/y.toml"),
            &registry(),
        )
        .unwrap();
        assert_eq!(m.socket, PathBuf::from("/x/run/s.sock"));
    }

    #[test]
    fn a_tool_finds_the_socket_without_the_systems_registry() {
        let dir = std::env::temp_dir().join(format!("lintel-socket-at-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sys.toml");
        // Services this test's registry does not know: only the socket is read.
        std::fs::write(
            &path,
            "socket = \"run/s.sock\"\n[domain.a]\nservices = [\"unknown\"]\n",
        )
        .unwrap();
        let full = Manifest::load(&path, &registry()).map(|m| m.socket);
        assert!(full.is_err(), "the full check refuses the unknown service");
        assert_eq!(Manifest::socket_at(&path).unwrap(), dir.join("run/s.sock"));
        std::fs::write(&path, "system = \"named\"\n").unwrap();
        assert!(
            Manifest::socket_at(&path)
                .unwrap()
                .to_string_lossy()
                .ends_with("-named.sock")
        );
        std::fs::write(&path, "system = \"bad name!\"\n").unwrap();
        assert!(Manifest::socket_at(&path).is_err());
        std::fs::write(&path, "socket = 3\n").unwrap();
        assert!(Manifest::socket_at(&path).is_err());
        assert!(Manifest::socket_at(&dir.join("missing.toml")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
