//! The name service: a door-based map from names to doors, served by the
//! supervisor. Every domain gets its own door to it at boot (the datum says
//! which domain is asking, so a domain can bind only the services placed in
//! it and names under `domain/<its name>/`); tools that connect from
//! outside get a door that can only look up and list.
//!
//! A lookup of a name not bound yet waits (bounded) instead of failing, so
//! services can start in any order. A door bound by a domain that later
//! exits is dropped, and lookups of it fail at once, naming the domain.
//!
//! Wire format, kept tiny on purpose: a request is `[op: u8][arg: u32 LE]
//! [name: UTF-8]` (a bind passes the door alongside); a reply is
//! `[status: u8][payload]`, with a human-readable message as the payload
//! of every refusal, so a client's error says why.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lintel::{CallError, Door, Fault, Handler, Reply, Request};

const OP_BIND: u8 = 1;
const OP_LOOKUP: u8 = 2;
const OP_LIST: u8 = 3;
const OP_READY: u8 = 4;
const OP_AWAIT_READY: u8 = 5;
const OP_EXIT: u8 = 6;

const ST_OK: u8 = 0;
const ST_NOT_BOUND: u8 = 1;
const ST_GONE: u8 = 2;
const ST_TAKEN: u8 = 3;
const ST_REFUSED: u8 = 4;

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
    NotBound { name: String, waited: Duration },
    /// The domain that served the name exited.
    #[error("service `{name}` is gone: its domain `{domain}` exited")]
    Gone { name: String, domain: String },
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

/// A client of the name service.
///
/// ```no_run
/// # fn demo(names: &lintel_boot::Names, my_door: lintel::Door) -> Result<(), lintel_boot::NameError> {
/// names.bind("cache", my_door)?;
/// let kv = names.lookup("kv")?;
/// for name in names.list("")? {
///     println!("{name}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Names {
    door: Door,
}

impl Names {
    /// A client calling the name service through `door`.
    pub fn new(door: Door) -> Names {
        Names { door }
    }

    /// The door to the name service.
    pub fn door(&self) -> &Door {
        &self.door
    }

    /// The door bound to `name`, waiting up to 10 s for it to be bound.
    pub fn lookup(&self, name: &str) -> Result<Door, NameError> {
        self.lookup_within(name, crate::Context::LOOKUP_WAIT)
    }

    /// The door bound to `name`, waiting up to `wait` for it to be bound.
    pub fn lookup_within(&self, name: &str, wait: Duration) -> Result<Door, NameError> {
        let ms = wait.as_millis().min(u32::MAX as u128) as u32;
        let retry_until = Instant::now() + DYING_RETRY;
        loop {
            match self.request(OP_LOOKUP, ms, name, &[]) {
                Ok(mut reply) if reply.doors.len() == 1 => return Ok(reply.doors.remove(0)),
                Ok(_) => return Err(NameError::BadReply),
                // The bound door could not be passed on: its domain is dying
                // and the supervisor has not seen it exit yet. Ask again
                // shortly; the answer will be `Gone`.
                Err(NameError::Call(e)) if e != CallError::PeerDied && Instant::now() < retry_until => {
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
        self.request(OP_BIND, 0, name, &[door]).map(drop)
    }

    /// Every bound name starting with `prefix`, sorted.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, NameError> {
        let mut out = Vec::new();
        loop {
            let reply = self.request(OP_LIST, out.len() as u32, prefix, &[])?;
            let (&more, rest) = reply.data[1..].split_first().ok_or(NameError::BadReply)?;
            let text = std::str::from_utf8(rest).map_err(|_| NameError::BadReply)?;
            out.extend(text.split('\n').filter(|s| !s.is_empty()).map(String::from));
            if more == 0 {
                return Ok(out);
            }
        }
    }

    /// This domain has bound all its services.
    pub(crate) fn ready(&self) -> Result<(), NameError> {
        self.request(OP_READY, 0, "", &[]).map(drop)
    }

    /// Wait until the supervisor has seen every domain ready.
    pub(crate) fn await_ready(&self, wait: Duration) -> Result<(), NameError> {
        let ms = wait.as_millis().min(u32::MAX as u128) as u32;
        self.request(OP_AWAIT_READY, ms, "", &[]).map(drop)
    }

    /// The root driver returned with `code`.
    pub(crate) fn exit(&self, code: i32) -> Result<(), NameError> {
        self.request(OP_EXIT, code as u32, "", &[]).map(drop)
    }

    fn request(&self, op: u8, arg: u32, name: &str, doors: &[Door]) -> Result<Reply, NameError> {
        let mut data = Vec::with_capacity(5 + name.len());
        data.push(op);
        data.extend_from_slice(&arg.to_le_bytes());
        data.extend_from_slice(name.as_bytes());
        let mut reply = Reply::new();
        self.door.call(&data, doors, &mut reply)?;
        let (&status, rest) = reply.data.split_first().ok_or(NameError::BadReply)?;
        let msg = || String::from_utf8_lossy(rest).into_owned();
        match status {
            ST_OK => Ok(reply),
            ST_NOT_BOUND => Err(NameError::NotBound {
                name: name.to_string(),
                waited: Duration::from_millis(arg as u64),
            }),
            ST_GONE => Err(NameError::Gone {
                name: name.to_string(),
                domain: msg(),
            }),
            ST_TAKEN => Err(NameError::Taken(name.to_string())),
            ST_REFUSED => Err(NameError::Refused(msg())),
            _ => Err(NameError::BadReply),
        }
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
    /// Names whose domain exited: name → domain.
    gone: HashMap<String, String>,
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

/// Who calls, from the door's datum.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A tool connected from outside: lookup and list only.
    Outside,
    Domain(usize),
}

const DATUM_OUTSIDE: u64 = 0;

impl NameServer {
    pub fn new(manifest: &crate::Manifest) -> Arc<NameServer> {
        let domains: Vec<String> = manifest.domains.iter().map(|d| d.name.clone()).collect();
        let placed = manifest
            .domains
            .iter()
            .enumerate()
            .flat_map(|(i, d)| d.services.iter().map(move |s| (s.clone(), i)))
            .collect();
        let root_domain = manifest
            .root
            .as_ref()
            .and_then(|r| manifest.domains.iter().position(|d| d.services.contains(r)));
        Arc::new(NameServer {
            st: Mutex::new(State {
                bound: BTreeMap::new(),
                gone: HashMap::new(),
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
        Door::create(index as u64 + 1, NsDoor(self.clone()))
    }

    /// The door handed to tools that connect to the supervisor's socket.
    pub fn door_for_outside(self: &Arc<Self>) -> Door {
        Door::create(DATUM_OUTSIDE, NsDoor(self.clone()))
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

    /// Domain `index` exited (`how` says how): drop what it bound.
    pub fn domain_exited(&self, index: usize, how: &str) {
        let mut st = self.lock();
        st.exited[index] = Some(how.to_string());
        let names: Vec<String> = st
            .bound
            .iter()
            .filter(|(_, b)| b.owner == Some(index))
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            st.bound.remove(&n);
            st.gone.insert(n, self.domains[index].clone());
        }
        for (svc, &d) in &self.placed {
            if d == index && !st.gone.contains_key(svc) {
                st.gone.insert(svc.clone(), self.domains[index].clone());
            }
        }
        drop(st);
        self.cv.notify_all();
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

    fn serve(&self, caller: Caller, op: u8, arg: u32, name: &str, mut doors: Vec<Door>, reply: &mut Reply) {
        let refuse = |reply: &mut Reply, msg: &str| {
            reply.data.push(ST_REFUSED);
            reply.data.extend_from_slice(msg.as_bytes());
        };
        match (op, caller) {
            (OP_LOOKUP, _) => self.lookup(name, Duration::from_millis(arg as u64), reply),
            (OP_LIST, _) => self.list(name, arg as usize, reply),
            (_, Caller::Outside) => refuse(reply, "this door may only look up and list names"),
            (OP_BIND, Caller::Domain(d)) => {
                if doors.len() != 1 {
                    return refuse(reply, "bind passes exactly one door");
                }
                match self.may_bind(d, name) {
                    Ok(()) => {}
                    Err(msg) => return refuse(reply, &msg),
                }
                let mut st = self.lock();
                if st.bound.contains_key(name) {
                    reply.data.push(ST_TAKEN);
                    return;
                }
                st.gone.remove(name);
                st.bound.insert(
                    name.to_string(),
                    Bound {
                        door: doors.remove(0),
                        owner: Some(d),
                    },
                );
                drop(st);
                self.cv.notify_all();
                tracing::debug!(name, domain = %self.domains[d], "bound");
                reply.data.push(ST_OK);
            }
            (OP_READY, Caller::Domain(d)) => {
                self.lock().ready[d] = true;
                self.cv.notify_all();
                reply.data.push(ST_OK);
            }
            (OP_AWAIT_READY, Caller::Domain(_)) => {
                let deadline = Instant::now() + Duration::from_millis(arg as u64).min(MAX_WAIT);
                let mut st = self.lock();
                loop {
                    if let Some(i) = st.exited.iter().position(|e| e.is_some()) {
                        let how = st.exited[i].clone().unwrap_or_default();
                        return refuse(reply, &format!("domain `{}` {how}", self.domains[i]));
                    }
                    if st.announced {
                        reply.data.push(ST_OK);
                        return;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        drop(st);
                        let late = self.not_ready().join(", ");
                        return refuse(reply, &format!("domains not ready in time: {late}"));
                    }
                    st = self
                        .cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            (OP_EXIT, Caller::Domain(d)) => {
                if Some(d) != self.root_domain {
                    return refuse(reply, "only the root service's domain may end the system");
                }
                self.lock().root_exit = Some(arg as i32);
                self.cv.notify_all();
                reply.data.push(ST_OK);
            }
            _ => refuse(reply, &format!("unknown operation {op}")),
        }
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

    fn lookup(&self, name: &str, wait: Duration, reply: &mut Reply) {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let mut st = self.lock();
        loop {
            if let Some(b) = st.bound.get(name) {
                reply.data.push(ST_OK);
                reply.doors.push(b.door.clone());
                return;
            }
            if let Some(domain) = st.gone.get(name) {
                reply.data.push(ST_GONE);
                reply.data.extend_from_slice(domain.as_bytes());
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                reply.data.push(ST_NOT_BOUND);
                return;
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn list(&self, prefix: &str, skip: usize, reply: &mut Reply) {
        let st = self.lock();
        let mut names = st
            .bound
            .range(prefix.to_string()..)
            .map(|(n, _)| n)
            .take_while(|n| n.starts_with(prefix))
            .skip(skip);
        let mut body = Vec::new();
        let mut more = 0;
        for (i, n) in names.by_ref().enumerate() {
            if i == LIST_PAGE {
                more = 1;
                break;
            }
            body.extend_from_slice(n.as_bytes());
            body.push(b'\n');
        }
        reply.data.push(ST_OK);
        reply.data.push(more);
        reply.data.extend_from_slice(&body);
    }
}

struct NsDoor(Arc<NameServer>);

impl Handler for NsDoor {
    fn invoke(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        let caller = match req.datum {
            DATUM_OUTSIDE => Caller::Outside,
            n => Caller::Domain((n - 1) as usize),
        };
        let Some((&op, rest)) = req.data.split_first() else {
            return Err(Fault(1));
        };
        if rest.len() < 4 || rest.len() - 4 > MAX_NAME {
            reply.data.push(ST_REFUSED);
            reply
                .data
                .extend_from_slice(b"request too short or name too long");
            return Ok(());
        }
        let arg = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let Ok(name) = std::str::from_utf8(&rest[4..]) else {
            reply.data.push(ST_REFUSED);
            reply.data.extend_from_slice(b"name is not UTF-8");
            return Ok(());
        };
        self.0.serve(caller, op, arg, name, req.doors.into_vec(), reply);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                },
                crate::DomainSpec {
                    name: "b".into(),
                    services: vec!["clock".into()],
                    max_threads: None,
                    spin: None,
                    max_message: None,
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
        ns.domain_exited(1, "exited: status 1");
        let e = a.lookup_within("clock", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.to_string(), "service `clock` is gone: its domain `b` exited");
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
