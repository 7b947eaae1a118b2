//! The service registry: every service the binary can host, by name. The
//! same registry runs in every domain (the binary re-executes itself), so a
//! manifest can place any service anywhere without a code change.

use std::future::Future;
use std::time::Duration;

use lintel::Door;

use crate::named::Named;
use crate::names::{NameError, Names};

/// Any error a service or driver returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Factory = Box<dyn Fn(&Context) -> Result<Door, BoxError> + Send + Sync>;
type Driver = Box<dyn Fn(&Context) -> Result<(), BoxError> + Send + Sync>;

pub(crate) enum Kind {
    /// Builds the service's door.
    Service(Factory),
    /// Runs the system (the manifest's root); serves no door.
    Driver(Driver),
}

/// Services by name.
///
/// ```
/// use lintel::{Door, Reply, Request};
/// use lintel_system::Registry;
/// let mut reg = Registry::new();
/// reg.service("echo", |_ctx| {
///     Ok(Door::create(0, |req: Request<'_>, reply: &mut Reply| {
///         reply.data.extend_from_slice(req.data);
///         Ok(())
///     }))
/// });
/// reg.driver("main", |ctx| {
///     let echo = ctx.lookup("echo")?;
///     println!("{:?}", echo.call_bytes(b"hi")?);
///     Ok(())
/// });
/// assert_eq!(reg.names().collect::<Vec<_>>(), ["echo", "main"]);
/// ```
#[derive(Default)]
pub struct Registry {
    entries: Vec<(String, Kind)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Register a service: `factory` builds its door in the domain the
    /// manifest places it in, once, at boot. It may look up other services
    /// through the [`Context`] (waiting for them to start).
    ///
    /// Panics if `name` is already registered or is not 1-64 letters,
    /// digits, `-`, `_` or `.` (names are fixed at build time, so either is
    /// a bug in the program).
    pub fn service(
        &mut self,
        name: &str,
        factory: impl Fn(&Context) -> Result<Door, BoxError> + Send + Sync + 'static,
    ) -> &mut Registry {
        self.add(name, Kind::Service(Box::new(factory)))
    }

    /// Register a driver: a service without a door whose `run` drives the
    /// system. A manifest places it as its `root`; when `run` returns the
    /// system shuts down, with exit status 0 for `Ok`, 1 for `Err`, 101 if it panics.
    ///
    /// Panics as [`Registry::service`] does.
    pub fn driver(
        &mut self,
        name: &str,
        run: impl Fn(&Context) -> Result<(), BoxError> + Send + Sync + 'static,
    ) -> &mut Registry {
        self.add(name, Kind::Driver(Box::new(run)))
    }

    /// Register a service built by an async factory, whose door is
    /// typically served by async handlers (`FooAsyncServer::door(imp)`,
    /// `lintel::Door::create_async`): the factory runs on the domain's
    /// tokio runtime ([`Context::runtime`]), where those handlers' tasks
    /// then run too.
    ///
    /// ```
    /// use lintel::{AsyncRequest, Door, Reply};
    /// use lintel_system::Registry;
    /// let mut reg = Registry::new();
    /// reg.async_service("echo", |_ctx| async move {
    ///     Ok(Door::create_async(0, |req: AsyncRequest| async move {
    ///         Ok(Reply { data: req.data, ..Reply::default() })
    ///     }))
    /// });
    /// ```
    ///
    /// Panics as [`Registry::service`] does.
    pub fn async_service<F>(
        &mut self,
        name: &str,
        factory: impl Fn(Context) -> F + Send + Sync + 'static,
    ) -> &mut Registry
    where
        F: Future<Output = Result<Door, BoxError>> + Send + 'static,
    {
        self.service(name, move |ctx| ctx.runtime().block_on(factory(ctx.clone())))
    }

    /// Register a driver written as an async function: it runs on the
    /// domain's tokio runtime ([`Context::runtime`]).
    ///
    /// Panics as [`Registry::service`] does.
    pub fn async_driver<F>(
        &mut self,
        name: &str,
        run: impl Fn(Context) -> F + Send + Sync + 'static,
    ) -> &mut Registry
    where
        F: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.driver(name, move |ctx| ctx.runtime().block_on(run(ctx.clone())))
    }

    /// Registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    pub(crate) fn kind(&self, name: &str) -> Option<&Kind> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, k)| k)
    }

    fn add(&mut self, name: &str, kind: Kind) -> &mut Registry {
        assert!(
            valid_service_name(name),
            "lintel-system: service name {name:?} must be 1-64 letters, digits, `-`, `_` or `.`"
        );
        assert!(
            self.kind(name).is_none(),
            "lintel-system: service {name:?} is registered twice"
        );
        self.entries.push((name.to_string(), kind));
        self
    }
}

pub(crate) fn valid_service_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What a service's factory (or a driver) is given: where it runs, and the
/// name service.
#[derive(Clone)]
pub struct Context {
    pub(crate) system: String,
    pub(crate) domain: String,
    pub(crate) service: String,
    pub(crate) names: Names,
    pub(crate) settings: std::collections::BTreeMap<String, String>,
    pub(crate) base: std::path::PathBuf,
}

impl Context {
    /// How long [`Context::lookup`] waits for a service to be bound.
    pub const LOOKUP_WAIT: Duration = Duration::from_secs(10);

    /// The domain's tokio runtime, made on first use (multi-threaded, a
    /// worker per CPU): async services and drivers run on it, and a
    /// blocking factory may serve async handlers on it
    /// (`lintel::Door::create_async_on(ctx.runtime(), …)`).
    pub fn runtime(&self) -> lintel::RuntimeHandle {
        static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .thread_name("lintel-async")
                    .enable_all()
                    .build()
                    .expect("the domain's tokio runtime")
            })
            .handle()
            .clone()
    }

    /// The system's name (from the manifest).
    pub fn system(&self) -> &str {
        &self.system
    }

    /// The domain this code runs in.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The service being built (or the driver being run).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The door bound to `name`, waiting up to [`Context::LOOKUP_WAIT`] for
    /// a service that has not started yet. A service hosted in this domain
    /// comes back as its local door ([`Door::is_local`]), so calls on it
    /// are direct calls.
    pub fn lookup(&self, name: &str) -> Result<Door, NameError> {
        self.names.lookup(name)
    }

    /// Like [`Context::lookup`] with another bound on the wait.
    pub fn lookup_within(&self, name: &str, wait: Duration) -> Result<Door, NameError> {
        self.names.lookup_within(name, wait)
    }

    /// The service bound to `name`, held by its name: after its domain
    /// dies, the next [`Named::get`] finds the new instance (waiting up to
    /// [`Context::LOOKUP_WAIT`] while it restarts). A service that holds
    /// what it looked up at start-up this way does not depend on the
    /// instance it found, and is not restarted after it (as it is after a
    /// plain [`Context::lookup`]; see the crate docs on restarts).
    pub fn named<C: From<Door> + Clone>(&self, name: &str) -> Result<Named<C>, NameError> {
        Named::new(&self.names, name, Self::LOOKUP_WAIT)
    }

    /// This service's setting `key`, from the manifest's `[service.NAME]`
    /// table (numbers and booleans as their text).
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    /// Setting `key` as a path; a relative one is taken from the
    /// manifest's directory.
    pub fn setting_path(&self, key: &str) -> Option<std::path::PathBuf> {
        self.setting(key).map(|p| self.base.join(p))
    }

    /// The name service itself, e.g. to bind more names or list them.
    pub fn names(&self) -> &Names {
        &self.names
    }
}
