//! A service held by its name: a client that finds the server's new
//! instance after the old one died.
//!
//! A call in flight when its server dies fails with `PeerDied`, and is
//! never made again behind the caller's back: it may have had its effect.
//! What [`Named`] adds is the next call: once the door it holds is dead
//! (a call failed so, or this process's runtime saw the server's process
//! end), [`Named::get`] looks the name up again, waiting while the
//! supervisor restarts the domain, and hands out a client of the new
//! instance.
//!
//! A call made after the server died but before this process learnt it
//! (its runtime notices within milliseconds) fails with `PeerDied` too:
//! lintel cannot tell it from a call in flight.

use std::sync::Mutex;
use std::time::Duration;

use lintel::Door;

use crate::names::{NameError, Names};

/// A client of the service bound to a name, looked up again after its
/// server died. `C` is a typed client (anything made from a door, as the
/// clients `#[lintel::interface]` generates are) or a plain [`Door`].
///
/// ```no_run
/// # #[lintel::interface] trait Kv { fn get(&self, key: &str) -> Result<Vec<u8>, lintel::stub::StubError>; }
/// # fn demo(ctx: &lintel_system::Context) -> Result<(), lintel_system::BoxError> {
/// let kv = ctx.named::<KvClient>("kv")?;
/// match kv.get()?.get("a") {
///     Ok(v) => println!("{v:?}"),
///     // The kv domain died during the call; the next `kv.get()` finds
///     // its new instance.
///     Err(e) => eprintln!("{e}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Named<C = Door> {
    names: Names,
    name: String,
    wait: Duration,
    current: Mutex<(Door, C)>,
}

impl<C: From<Door> + Clone> Named<C> {
    /// Look `name` up now (waiting up to `wait` for it) and on each later
    /// [`get`](Self::get) that finds the server dead.
    pub fn new(names: &Names, name: &str, wait: Duration) -> Result<Named<C>, NameError> {
        let door = names.lookup_following(name, wait)?;
        Ok(Named {
            names: names.clone(),
            name: name.to_string(),
            wait,
            current: Mutex::new((door.clone(), C::from(door))),
        })
    }

    /// A client of the live instance: the one held, or, if its server is
    /// known to be dead, one of the instance now bound to the name
    /// (waiting up to the wait given at [`new`](Self::new) while the
    /// domain restarts).
    pub fn get(&self) -> Result<C, NameError> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.0.is_dead() {
            let door = self.names.lookup_following(&self.name, self.wait)?;
            *cur = (door.clone(), C::from(door));
        }
        Ok(cur.1.clone())
    }

    /// The name followed.
    pub fn name(&self) -> &str {
        &self.name
    }
}
