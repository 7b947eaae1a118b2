//! The service's place in a `lintel_system` registry: a manifest's
//! `[service.NAME]` table configures an export.

use crate::service::export::Service;

/// Register the file service as `name` in a `lintel_system` registry. The
/// manifest configures it in `[service.NAME]`: `root`, the directory to
/// export (relative to the manifest's directory), and `read_only`
/// (default `false`).
///
/// ```toml
/// [domain.files]
/// services = ["fs"]
///
/// [service.fs]
/// root = "data"
/// read_only = false
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
        let service =
            Service::new(&root, read_only).map_err(|e| format!("cannot export {}: {e}", root.display()))?;
        Ok(service.into_door())
    });
}
