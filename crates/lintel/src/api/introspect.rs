//! Counts of this domain's live runtime objects, for tests and monitoring.

/// Connections to other domains that are alive.
pub fn connections() -> usize {
    crate::domain::get().conn_count()
}
/// Whether this domain has a live connection to process `pid`.
pub fn connected_to(pid: u32) -> bool {
    crate::object::conn::Home::conn_to(crate::domain::get(), pid).is_some()
}
/// Doors served elsewhere that this domain holds.
pub fn remote_doors() -> usize {
    crate::domain::get().remote_count()
}
/// Doors served by process `pid` that this domain holds.
pub fn remote_doors_from(pid: u32) -> usize {
    crate::domain::get().remote_count_from(pid)
}
/// For a door this domain serves, how many holders it counts: other
/// domains holding it and tickets for it in transit. `None` for a door
/// served elsewhere.
///
/// ```
/// let d = lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()));
/// assert_eq!(lintel::introspect::holders(&d), Some(0));
/// ```
pub fn holders(door: &crate::object::door::Door) -> Option<u32> {
    match &door.base().0 {
        crate::object::door::Inner::Local(core) => Some(core.holder_count()),
        _ => None,
    }
}
/// Release messages this domain has sent to process `pid` over its
/// live connection (releases of dropped doors go in batches).
pub fn release_messages_to(pid: u32) -> u64 {
    crate::object::conn::Home::conn_to(crate::domain::get(), pid).map_or(0, |c| c.releases_sent())
}
/// Tickets minted here and not yet redeemed or dropped.
pub fn tickets() -> usize {
    crate::domain::get().ticket_count()
}
