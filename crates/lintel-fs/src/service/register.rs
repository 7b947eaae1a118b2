//! The service's place in a `lintel_system` registry: a manifest's
//! `[service.NAME]` table configures an export.

use crate::service::export::Service;

/// Register the file service as `name` in a `lintel_system` registry. The
/// manifest configures it in `[service.NAME]`: `root`, the directory to
/// export (relative to the manifest's directory), `read_only` (default
/// `false`), and `map_ahead` (default [`MAP_AHEAD`](crate::MAP_AHEAD),
/// see [`Service::with_map_ahead`]).
///
/// ```toml
/// [domain.files]
/// services = ["fs"]
///
/// [service.fs]
/// root = "data"
/// read_only = false
/// map_ahead = 8
/// ```
pub fn register(registry: &mut lintel_system::Registry, name: &str) {
    registry.service(name, |ctx| {
        let root = ctx.setting_path("root").ok_or_else(|| {
            format!(
                "service `{}` needs a `root` setting: the directory to export",
                ctx.service()
            )
        })?;
        let read_only = match ctx.setting("read_only") {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => return Err(format!("read_only = {v}: expected true or false").into()),
        };
        let map_ahead = match ctx.setting("map_ahead") {
            None => crate::service::export::MAP_AHEAD,
            Some(v) => v
                .parse()
                .map_err(|_| format!("map_ahead = {v}: expected a count of 64 KiB chunks"))?,
        };
        let service =
            Service::new(&root, read_only).map_err(|e| format!("cannot export {}: {e}", root.display()))?;
        Ok(service.with_map_ahead(map_ahead).into_door())
    });
}
