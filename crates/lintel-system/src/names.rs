//! The name service: a door-based map from names to doors, served by the
//! supervisor. Every domain gets its own door to it at boot (each door knows
//! which domain holds it, so a domain can bind only the services placed in
//! it and names under `domain/<its name>/`); tools that connect from
//! outside get a door that can only look up, list and wait for the system
//! to be ready.
//!
//! A lookup of a name not bound yet waits (bounded) instead of failing, so
//! services can start in any order. A door bound by a domain that exits is
//! dropped at once, and never handed out again (nor one whose server this
//! process has seen die, before the supervisor reaps it). While the domain
//! restarts, lookups of its names wait for the new instance's binds; once
//! it is down for good, they fail at once, naming the domain.
//!
//! The name service also learns who depends on whom: a plain lookup a
//! domain makes while it starts (before it reports ready) ties it to the
//! instance that serves the name, and the supervisor restarts it after
//! that instance's domain restarts ([`NameServer::dependents_of`]). A
//! lookup made to follow the name ([`crate::Named`]) ties nothing.
//!
//! The protocol is the [`NameService`] interface (`#[lintel::interface]`):
//! each door serves a [`View`], the name server as one caller sees it.
//! Refusals cross as a [`Refusal`], with a human-readable message for
//! every request refused, and [`Names`], the public client, turns them
//! into a [`NameError`] that names what was asked for, so a client's error
//! says why.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lintel::stub::{StubError, Wire};
use lintel::{CallError, Door};

/// Longest name the service accepts.
pub const MAX_NAME: usize = 255;
/// Longest a lookup may wait in the server, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(120);
/// How long a lookup retries a door that cannot be passed because its
/// domain is dying (the supervisor reaps a dead domain within milliseconds).
const DYING_RETRY: Duration = Duration::from_secs(2);
/// Names per `list` reply (the rest come in further calls).
const LIST_PAGE: usize = 32;

/// Why a name-service request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing was bound to the name within the wait.
    #[error("no service `{name}` was bound within {} s (is it placed in the manifest, and did it start?)", waited.as_secs_f32())]
    NotBound {
        /// The name looked up.
        name: String,
        /// How long the lookup asked to wait.
        waited: Duration,
    },
    /// The domain that served the name exited and is not restarted.
    #[error("service `{name}` is gone: its domain `{domain}` exited")]
    Gone {
        /// The name looked up.
        name: String,
        /// The domain that served it.
        domain: String,
    },
    /// The domain that serves the name is restarting, and its new instance
    /// had not bound it within the wait.
    #[error("service `{name}` is restarting (domain `{domain}`) and was not back within {} s", waited.as_secs_f32())]
    Restarting {
        /// The name looked up.
        name: String,
        /// The domain that serves it.
        domain: String,
        /// How long the lookup asked to wait.
        waited: Duration,
    },
    /// The name is bound already.
    #[error("the name `{0}` is already bound")]
    Taken(String),
    /// The request is not allowed or not understood; the message says why.
    #[error("the name service refused: {0}")]
    Refused(String),
    /// The call to the name service itself failed.
    #[error("calling the name service failed: {0}")]
    Call(#[from] CallError),
    /// The reply did not follow the protocol.
    #[error("malformed reply from the name service")]
    BadReply,
}

/// What crosses a door to the name service. Waits are in milliseconds.
#[lintel::interface]
pub(crate) trait NameService {
    /// Bind `door` to `name` (a domain's door only).
    fn bind(&self, name: &str, door: Door) -> Result<(), Refusal>;
    /// The door bound to `name`, waiting up to `wait_ms` (at most
    /// [`MAX_WAIT`]) for it to be bound. `follow`: the caller looks the name
    /// up again when its server dies, so it does not depend on this
    /// instance (see [`NameServer::dependents_of`]).
    fn lookup(&self, name: &str, wait_ms: u32, follow: bool) -> Result<Door, Refusal>;
    /// Bound names starting with `prefix`, sorted, skipping the first
    /// `skip`: at most [`LIST_PAGE`] of them, and whether more follow.
    fn list(&self, prefix: &str, skip: u32) -> Result<(Vec<String>, bool), Refusal>;
    /// The calling domain has bound all its services.
    fn ready(&self) -> Result<(), Refusal>;
    /// Wait up to `wait_ms` (at most [`MAX_WAIT`]) until the supervisor
    /// has seen every domain ready.
    fn await_ready(&self, wait_ms: u32) -> Result<(), Refusal>;
    /// The root driver returned with `code` (the root's domain only).
    fn exit(&self, code: i32) -> Result<(), Refusal>;
}

/// Why the name service refused a request, as it crosses the door; the
/// client adds what it asked for ([`Refusal::into_error`]).
#[derive(Debug, Clone, PartialEq, Wire)]
pub(crate) enum Refusal {
    /// Nothing was bound to the name within the wait.
    NotBound,
    /// The domain that served the name exited.
    Gone { domain: String },
    /// The domain that serves the name is restarting.
    Restarting { domain: String },
    /// The name is bound already.
    Taken,
    /// Not allowed; the message says why.
    Refused(String),
    /// The call itself failed.
    Stub(StubError),
}

impl From<StubError> for Refusal {
    fn from(e: StubError) -> Self {
        Refusal::Stub(e)
    }
}

impl Refusal {
    /// The public error of a request about `name` that waited up to
    /// `wait_ms`.
    fn into_error(self, name: &str, wait_ms: u32) -> NameError {
        match self {
            Refusal::NotBound => NameError::NotBound {
                name: name.to_string(),
                waited: Duration::from_millis(wait_ms as u64),
            },
            Refusal::Gone { domain } => NameError::Gone {
                name: name.to_string(),
                domain,
            },
            Refusal::Restarting { domain } => NameError::Restarting {
                name: name.to_string(),
                domain,
                waited: Duration::from_millis(wait_ms as u64),
            },
            Refusal::Taken => NameError::Taken(name.to_string()),
            Refusal::Refused(msg) => NameError::Refused(msg),
            Refusal::Stub(StubError::Call(e)) => NameError::Call(e),
            Refusal::Stub(StubError::BadReply { .. }) => NameError::BadReply,
            // Not understood (another version of the service) or not sent.
            Refusal::Stub(e) => NameError::Refused(e.to_string()),
        }
    }
}

/// A client of the name service.
///
/// ```no_run
/// # fn demo(names: &lintel_system::Names, my_door: lintel::Door) -> Result<(), lintel_system::NameError> {
/// names.bind("cache", my_door)?;
/// let kv = names.lookup("kv")?;
/// for name in names.list("")? {
///     println!("{name}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Names {
    client: NameServiceClient,
}

/// A wait in whole milliseconds, as the protocol carries it.
fn millis(wait: Duration) -> u32 {
    wait.as_millis().min(u32::MAX as u128) as u32
}

impl Names {
    /// A client calling the name service through `door`.
    pub fn new(door: Door) -> Names {
        Names {
            client: NameServiceClient::from_door(door),
        }
    }

    /// The door to the name service.
    pub fn door(&self) -> &Door {
        self.client.door()
    }

    /// The door bound to `name`, waiting up to 10 s for it to be bound.
    pub fn lookup(&self, name: &str) -> Result<Door, NameError> {
        self.lookup_within(name, crate::Context::LOOKUP_WAIT)
    }

    /// The door bound to `name`, waiting up to `wait` for it to be bound.
    pub fn lookup_within(&self, name: &str, wait: Duration) -> Result<Door, NameError> {
        self.find(name, wait, false)
    }

    /// [`Names::lookup_within`] for a holder that looks the name up again
    /// when its server dies ([`crate::Named`]).
    pub(crate) fn lookup_following(&self, name: &str, wait: Duration) -> Result<Door, NameError> {
        self.find(name, wait, true)
    }

    fn find(&self, name: &str, wait: Duration, follow: bool) -> Result<Door, NameError> {
        let ms = millis(wait);
        let retry_until = Instant::now() + DYING_RETRY;
        loop {
            match self
                .client
                .lookup(name, ms, follow)
                .map_err(|r| r.into_error(name, ms))
            {
                // A door of an instance this process has seen die (the
                // supervisor has not reaped it yet): ask again shortly, for
                // the new instance's.
                Ok(door) if door.is_dead() && Instant::now() < retry_until => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(door) => return Ok(door),
                // The bound door could not be passed on: its domain is dying
                // and the supervisor has not seen it exit yet (passing a
                // door of a domain that has just died fails with `PeerDied`
                // too, which is the name service's own death only if its
                // door says so). Ask again shortly; the answer will be the
                // new instance, or `Gone`.
                Err(NameError::Call(e))
                    if (e != CallError::PeerDied || !self.client.door().is_dead())
                        && Instant::now() < retry_until =>
                {
                    tracing::debug!(name, "lookup: passing the door failed ({e}); retrying");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Bind `door` to `name`. A domain may bind the services the manifest
    /// places in it, names under `domain/<its name>/`, and any other name
    /// that no placed service uses.
    pub fn bind(&self, name: &str, door: Door) -> Result<(), NameError> {
        self.client.bind(name, door).map_err(|r| r.into_error(name, 0))
    }

    /// Every bound name starting with `prefix`, sorted.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, NameError> {
        let mut out = Vec::new();
        loop {
            let skip = out.len().min(u32::MAX as usize) as u32;
            let (page, more) = self
                .client
                .list(prefix, skip)
                .map_err(|r| r.into_error(prefix, 0))?;
            out.extend(page);
            if !more {
                return Ok(out);
            }
        }
    }

    /// This domain has bound all its services.
    pub(crate) fn ready(&self) -> Result<(), NameError> {
        self.client.ready().map_err(|r| r.into_error("", 0))
    }

    /// Wait (up to `wait`) until the supervisor has seen every domain
    /// ready: until then, a domain that dies is a failed boot, not a crash
    /// to recover from. A client connected from outside the system waits
    /// here before it relies on restarts.
    pub fn await_ready(&self, wait: Duration) -> Result<(), NameError> {
        let ms = millis(wait);
        self.client.await_ready(ms).map_err(|r| r.into_error("", ms))
    }

    /// The root driver returned with `code`.
    pub(crate) fn exit(&self, code: i32) -> Result<(), NameError> {
        self.client.exit(code).map_err(|r| r.into_error("", 0))
    }
}

/// Why a tool could not reach a running system's name service.
pub(crate) enum Unreachable {
    /// Nothing answers at the socket.
    Connect(lintel::BootError),
    /// The supervisor offered no name-service door.
    NoNameService,
}

/// The name service of the system whose supervisor listens at `socket`,
/// as a tool sees it (look up and list only).
pub(crate) fn from_outside(socket: &std::path::Path) -> Result<Names, Unreachable> {
    let mut doors = lintel::boot::connect(socket, &[]).map_err(Unreachable::Connect)?;
    match doors.len() {
        1 => Ok(Names::new(doors.remove(0))),
        _ => Err(Unreachable::NoNameService),
    }
}

/// The name service's state, in the supervisor.
pub(crate) struct NameServer {
    st: Mutex<State>,
    cv: Condvar,
    /// Domain names, by index; `placed[i]` the services placed in domain i.
    domains: Vec<String>,
    placed: HashMap<String, usize>,
    root_domain: Option<usize>,
}

struct State {
    bound: BTreeMap<String, Bound>,
    /// Names whose domain exited for good: name → domain.
    gone: HashMap<String, String>,
    /// Names whose domain is restarting: name → domain.
    restarting: HashMap<String, String>,
    /// `providers[d]`: the domains whose doors domain `d`'s instance
    /// looked up plainly while it started.
    providers: Vec<std::collections::BTreeSet<usize>>,
    ready: Vec<bool>,
    /// Exit description of each domain that exited.
    exited: Vec<Option<String>>,
    root_exit: Option<i32>,
    /// The supervisor has seen every domain ready and said so.
    announced: bool,
}

struct Bound {
    door: Door,
    owner: Option<usize>,
}

/// Who holds a door to the name service.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A tool connected from outside: lookup and list only.
    Outside,
    Domain(usize),
}

impl NameServer {
    pub fn new(manifest: &crate::Manifest) -> Arc<NameServer> {
        let domains: Vec<String> = manifest.domains.iter().map(|d| d.name.clone()).collect();
        let placed = manifest
            .domains
            .iter()
            .enumerate()
            .flat_map(|(i, d)| d.binds().map(move |s| (s.clone(), i)))
            .collect();
        let root_domain = manifest
            .root
            .as_ref()
            .and_then(|r| manifest.domains.iter().position(|d| d.services.contains(r)));
        Arc::new(NameServer {
            st: Mutex::new(State {
                bound: BTreeMap::new(),
                gone: HashMap::new(),
                restarting: HashMap::new(),
                providers: vec![Default::default(); domains.len()],
                ready: vec![false; domains.len()],
                exited: vec![None; domains.len()],
                root_exit: None,
                announced: false,
            }),
            cv: Condvar::new(),
            domains,
            placed,
            root_domain,
        })
    }

    /// The door handed to domain `index` at boot.
    pub fn door_for_domain(self: &Arc<Self>, index: usize) -> Door {
        self.door_for(Caller::Domain(index))
    }

    /// The door handed to tools that connect to the supervisor's socket.
    pub fn door_for_outside(self: &Arc<Self>) -> Door {
        self.door_for(Caller::Outside)
    }

    fn door_for(self: &Arc<Self>, caller: Caller) -> Door {
        NameServiceServer::new(View {
            ns: self.clone(),
            caller,
        })
        .into_door()
    }

    /// Bind on the supervisor's own authority (e.g. a domain's stats door).
    pub fn bind_as(&self, domain: usize, name: &str, door: Door) {
        self.lock().bound.insert(
            name.to_string(),
            Bound {
                door,
                owner: Some(domain),
            },
        );
        self.cv.notify_all();
    }

    /// Bind `name` on the supervisor's own authority, owned by no domain.
    pub fn bind_system(&self, name: &str, door: Door) {
        self.lock()
            .bound
            .insert(name.to_string(), Bound { door, owner: None });
        self.cv.notify_all();
    }

    /// Domain `index`'s instance exited (`how` says how): drop what it
    /// bound. With `restarting`, lookups of its names wait for the next
    /// instance; without, they fail at once from now on.
    pub fn domain_exited(&self, index: usize, how: &str, restarting: bool) {
        let mut st = self.lock();
        st.exited[index] = Some(how.to_string());
        st.ready[index] = false;
        st.providers[index].clear();
        let domain = &self.domains[index];
        let mut names: Vec<String> = st
            .bound
            .iter()
            .filter(|(_, b)| b.owner == Some(index))
            .map(|(n, _)| n.clone())
            .collect();
        for n in &names {
            st.bound.remove(n);
        }
        names.extend(
            self.placed
                .iter()
                .filter(|(_, d)| **d == index)
                .map(|(s, _)| s.clone()),
        );
        names.extend(
            st.restarting
                .iter()
                .filter(|(_, d)| *d == domain)
                .map(|(n, _)| n.clone()),
        );
        for n in names {
            st.restarting.remove(&n);
            st.gone.remove(&n);
            match restarting {
                true => st.restarting.insert(n, domain.clone()),
                false => st.gone.insert(n, domain.clone()),
            };
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Whether domain `index`'s current instance has reported ready.
    pub fn is_ready(&self, index: usize) -> bool {
        self.lock().ready[index]
    }

    /// The domains whose current instance looked up, while it started, a
    /// door of domain `index`'s (and so holds doors of an instance that is
    /// gone once `index` exits).
    pub fn dependents_of(&self, index: usize) -> Vec<usize> {
        let st = self.lock();
        (0..self.domains.len())
            .filter(|&d| st.providers[d].contains(&index))
            .collect()
    }

    /// Whether every domain has bound its services.
    pub fn all_ready(&self) -> bool {
        self.lock().ready.iter().all(|r| *r)
    }

    /// The supervisor has reported the system ready: release the root.
    pub fn announce_ready(&self) {
        self.lock().announced = true;
        self.cv.notify_all();
    }

    /// Domains not ready yet.
    pub fn not_ready(&self) -> Vec<String> {
        let st = self.lock();
        (0..self.domains.len())
            .filter(|&i| !st.ready[i])
            .map(|i| self.domains[i].clone())
            .collect()
    }

    /// The root driver's exit code, once it has returned.
    pub fn root_exit(&self) -> Option<i32> {
        self.lock().root_exit
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn may_bind(&self, d: usize, name: &str) -> Result<(), String> {
        let me = &self.domains[d];
        if let Some(&home) = self.placed.get(name) {
            if home != d {
                return Err(format!(
                    "`{name}` is placed in domain `{}`, not in `{me}`",
                    self.domains[home]
                ));
            }
        } else if let Some(rest) = name.strip_prefix("domain/")
            && rest.split('/').next() != Some(me.as_str())
        {
            return Err(format!("domain `{me}` may bind only under `domain/{me}/`"));
        }
        Ok(())
    }

    fn bind(&self, d: usize, name: &str, door: Door) -> Result<(), Refusal> {
        self.may_bind(d, name).map_err(Refusal::Refused)?;
        let mut st = self.lock();
        if st.bound.contains_key(name) {
            return Err(Refusal::Taken);
        }
        st.gone.remove(name);
        st.restarting.remove(name);
        st.bound.insert(name.to_string(), Bound { door, owner: Some(d) });
        drop(st);
        self.cv.notify_all();
        tracing::debug!(name, domain = %self.domains[d], "bound");
        Ok(())
    }

    /// The door bound to `name` for `caller`, waiting up to `wait`; a
    /// domain's plain lookup while it starts records what it depends on.
    fn lookup(&self, caller: Caller, name: &str, wait: Duration, follow: bool) -> Result<Door, Refusal> {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut st = self.lock();
        loop {
            // A door whose server this process has seen die is not handed
            // out: the supervisor is about to reap its domain.
            if let Some(b) = st.bound.get(name).filter(|b| !b.door.is_dead()) {
                let door = b.door.clone();
                if let (Caller::Domain(d), Some(owner), false) = (caller, b.owner, follow)
                    && owner != d
                    && !st.ready[d]
                {
                    st.providers[d].insert(owner);
                }
                return Ok(door);
            }
            if let Some(domain) = st.gone.get(name) {
                return Err(Refusal::Gone {
                    domain: domain.clone(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(match st.restarting.get(name) {
                    Some(domain) => Refusal::Restarting {
                        domain: domain.clone(),
                    },
                    None => Refusal::NotBound,
                });
            }
            if st.bound.contains_key(name) {
                // Dead but not yet reaped: look again shortly.
                st = self
                    .cv
                    .wait_timeout(st, (deadline - now).min(Duration::from_millis(5)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn list(&self, prefix: &str, skip: usize) -> (Vec<String>, bool) {
        let st = self.lock();
        let mut names = st
            .bound
            .range(prefix.to_string()..)
            .map(|(n, _)| n)
            .take_while(|n| n.starts_with(prefix))
            .skip(skip);
        let page: Vec<String> = names.by_ref().take(LIST_PAGE).cloned().collect();
        let more = names.next().is_some();
        (page, more)
    }

    fn await_ready(&self, wait: Duration) -> Result<(), Refusal> {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut st = self.lock();
        loop {
            if st.announced {
                return Ok(());
            }
            if let Some(i) = st.exited.iter().position(|e| e.is_some()) {
                let how = st.exited[i].clone().unwrap_or_default();
                return Err(Refusal::Refused(format!("domain `{}` {how}", self.domains[i])));
            }
            let now = Instant::now();
            if now >= deadline {
                drop(st);
                let late = self.not_ready().join(", ");
                return Err(Refusal::Refused(format!("domains not ready in time: {late}")));
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The name server as one holder of a door to it sees it: each door
/// serves its own view, so the server knows who calls.
struct View {
    ns: Arc<NameServer>,
    caller: Caller,
}

impl View {
    /// The calling domain, or a refusal for a door from outside.
    fn domain(&self) -> Result<usize, Refusal> {
        match self.caller {
            Caller::Domain(d) => Ok(d),
            Caller::Outside => Err(Refusal::Refused(
                "this door may only look up and list names and wait for readiness".into(),
            )),
        }
    }
}

/// A name the service accepts: at most [`MAX_NAME`] bytes.
fn check_name(name: &str) -> Result<(), Refusal> {
    match name.len() > MAX_NAME {
        false => Ok(()),
        true => Err(Refusal::Refused(format!(
            "the name is {} bytes long, over the {MAX_NAME}-byte limit",
            name.len()
        ))),
    }
}

impl NameService for View {
    fn bind(&self, name: &str, door: Door) -> Result<(), Refusal> {
        check_name(name)?;
        self.ns.bind(self.domain()?, name, door)
    }

    fn lookup(&self, name: &str, wait_ms: u32, follow: bool) -> Result<Door, Refusal> {
        check_name(name)?;
        self.ns
            .lookup(self.caller, name, Duration::from_millis(wait_ms as u64), follow)
    }

    fn list(&self, prefix: &str, skip: u32) -> Result<(Vec<String>, bool), Refusal> {
        check_name(prefix)?;
        Ok(self.ns.list(prefix, skip as usize))
    }

    fn ready(&self) -> Result<(), Refusal> {
        let d = self.domain()?;
        let mut st = self.ns.lock();
        st.ready[d] = true;
        // Names the last instance bound and this one did not are no longer
        // coming back: a lookup waits for them as for any unbound name.
        let domain = &self.ns.domains[d];
        st.restarting.retain(|_, owner| owner != domain);
        drop(st);
        self.ns.cv.notify_all();
        Ok(())
    }

    /// (Allowed from outside too: it changes nothing.)
    fn await_ready(&self, wait_ms: u32) -> Result<(), Refusal> {
        self.ns.await_ready(Duration::from_millis(wait_ms as u64))
    }

    fn exit(&self, code: i32) -> Result<(), Refusal> {
        if Some(self.domain()?) != self.ns.root_domain {
            return Err(Refusal::Refused(
                "only the root service's domain may end the system".into(),
            ));
        }
        self.ns.lock().root_exit = Some(code);
        self.ns.cv.notify_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lintel::{Reply, Request};

    fn manifest() -> crate::Manifest {
        crate::Manifest {
            system: "t".into(),
            root: None,
            socket: "/tmp/unused".into(),
            settings: Default::default(),
            dir: "/tmp".into(),
            domains: vec![
                crate::DomainSpec {
                    name: "a".into(),
                    services: vec!["kv".into()],
                    max_threads: None,
                    spin: None,
                    max_message: None,
                    restart: Default::default(),
                    links: Vec::new(),
                },
                crate::DomainSpec {
                    name: "b".into(),
                    services: vec!["clock".into()],
                    max_threads: None,
                    spin: None,
                    max_message: None,
                    restart: Default::default(),
                    links: Vec::new(),
                },
            ],
        }
    }

    fn echo() -> Door {
        Door::create(9, |req: Request<'_>, reply: &mut Reply| {
            reply.data.extend_from_slice(req.data);
            Ok(())
        })
    }

    #[test]
    fn bind_lookup_list_and_rules() {
        let ns = NameServer::new(&manifest());
        let a = Names::new(ns.door_for_domain(0));
        let b = Names::new(ns.door_for_domain(1));
        let outside = Names::new(ns.door_for_outside());
        a.bind("kv", echo()).unwrap();
        assert_eq!(a.bind("kv", echo()), Err(NameError::Taken("kv".into())));
        assert!(
            matches!(b.bind("kv", echo()), Err(NameError::Refused(m)) if m.contains("placed in domain `a`"))
        );
        assert!(matches!(b.bind("domain/a/x", echo()), Err(NameError::Refused(_))));
        b.bind("domain/b/stats", echo()).unwrap();
        b.bind("free", echo()).unwrap();
        assert!(matches!(
            outside.bind("other", echo()),
            Err(NameError::Refused(_))
        ));
        assert_eq!(outside.lookup("kv").unwrap().call_bytes(b"x").unwrap(), b"x");
        assert_eq!(outside.list("").unwrap(), ["domain/b/stats", "free", "kv"]);
        assert_eq!(outside.list("domain/").unwrap(), ["domain/b/stats"]);
    }

    #[test]
    fn lookup_waits_then_fails_clearly() {
        let ns = NameServer::new(&manifest());
        let a = Names::new(ns.door_for_domain(0));
        let b = Names::new(ns.door_for_domain(1));
        let t = std::thread::spawn(move || b.lookup_within("kv", Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        a.bind("kv", echo()).unwrap();
        assert!(t.join().unwrap().is_ok());
        let e = a.lookup_within("clock", Duration::from_millis(30)).unwrap_err();
        assert!(e.to_string().contains("no service `clock` was bound"), "{e}");
        ns.domain_exited(1, "exited: status 1", false);
        let e = a.lookup_within("clock", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.to_string(), "service `clock` is gone: its domain `b` exited");
    }

    #[test]
    fn names_wait_through_a_restart_and_record_who_depends_on_whom() {
        let ns = NameServer::new(&manifest());
        let a = Names::new(ns.door_for_domain(0));
        let b = Names::new(ns.door_for_domain(1));
        a.bind("kv", echo()).unwrap();
        a.ready().unwrap();
        // b, starting, looks kv up plainly: it depends on a's instance.
        b.lookup("kv").unwrap();
        b.ready().unwrap();
        assert_eq!(ns.dependents_of(0), [1]);
        // A lookup made once b runs ties nothing more.
        ns.domain_exited(1, "exited: status 1", true);
        assert_eq!(
            ns.dependents_of(0),
            Vec::<usize>::new(),
            "the new instance starts afresh"
        );
        b.lookup_following("kv", Duration::from_secs(1)).unwrap();
        b.ready().unwrap();
        b.lookup("kv").unwrap();
        assert_eq!(ns.dependents_of(0), Vec::<usize>::new());

        // a restarts: lookups of kv wait for the new instance's bind.
        ns.domain_exited(0, "exited: signal 9 (SIGKILL)", true);
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.lookup_within("kv", Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(50));
        let fresh = Door::create(5, |_: Request<'_>, reply: &mut Reply| {
            reply.data.push(5);
            Ok(())
        });
        a.bind("kv", fresh).unwrap();
        assert_eq!(waiter.join().unwrap().unwrap().call_bytes(b"").unwrap(), [5]);
        // A lookup that times out while the domain restarts says so.
        ns.domain_exited(0, "exited: status 1", true);
        let e = b.lookup_within("kv", Duration::from_millis(20)).unwrap_err();
        assert!(
            matches!(&e, NameError::Restarting { domain, .. } if domain == "a"),
            "{e}"
        );
        // Down for good: at once.
        ns.domain_exited(0, "exited: status 1", false);
        let e = b.lookup_within("kv", Duration::from_secs(10)).unwrap_err();
        assert!(
            matches!(&e, NameError::Gone { domain, .. } if domain == "a"),
            "{e}"
        );
    }

    #[test]
    fn refusals_say_why() {
        let ns = NameServer::new(&manifest());
        let a = Names::new(ns.door_for_domain(0));
        let outside = Names::new(ns.door_for_outside());
        let long = "x".repeat(MAX_NAME + 1);
        let e = a.lookup_within(&long, Duration::ZERO).unwrap_err();
        assert!(
            matches!(&e, NameError::Refused(m) if m.contains("over the 255-byte limit")),
            "{e}"
        );
        assert!(matches!(a.bind(&long, echo()), Err(NameError::Refused(_))));
        assert!(matches!(outside.ready(), Err(NameError::Refused(m)) if m.contains("only look up")));
        assert!(
            matches!(outside.await_ready(Duration::ZERO), Err(NameError::Refused(m)) if m.contains("not ready")),
            "a tool outside may wait for readiness"
        );
        // No manifest root: no domain may end the system.
        assert!(matches!(a.exit(0), Err(NameError::Refused(m)) if m.contains("root")));
        assert_eq!(ns.root_exit(), None);
        a.ready().unwrap();
        assert_eq!(ns.not_ready(), ["b"]);
    }

    #[test]
    fn list_pages() {
        let ns = NameServer::new(&manifest());
        let a = Names::new(ns.door_for_domain(0));
        for i in 0..100 {
            a.bind(&format!("n{i:03}"), echo()).unwrap();
        }
        let all = a.list("n").unwrap();
        assert_eq!(all.len(), 100);
        assert_eq!(all[99], "n099");
    }
}
