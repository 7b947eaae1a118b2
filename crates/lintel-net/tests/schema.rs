//! The generated code in `src/lintel_capnp.rs` is what the Cap'n Proto
//! compiler makes of `schema/lintel.capnp` (`capnp`, Debian's `capnproto`,
//! must be installed; `.ci/run` installs it). `LINTEL_NET_REGEN=1` writes
//! it anew instead of comparing.

use std::path::Path;

#[test]
fn generated_code_matches_the_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    capnpc::CompilerCommand::new()
        .src_prefix(root.join("schema"))
        .file(root.join("schema/lintel.capnp"))
        .output_path(out.path())
        .run()
        .expect("the capnp compiler (Debian's capnproto) runs on the schema");
    let made = std::fs::read_to_string(out.path().join("lintel_capnp.rs")).unwrap();
    let committed = root.join("src/lintel_capnp.rs");
    if std::env::var_os("LINTEL_NET_REGEN").is_some() {
        std::fs::write(&committed, &made).unwrap();
    }
    let have = std::fs::read_to_string(&committed).unwrap();
    assert!(
        have == made,
        "src/lintel_capnp.rs is not what the schema compiles to: run LINTEL_NET_REGEN=1 cargo test -p lintel-net --test schema"
    );
}
