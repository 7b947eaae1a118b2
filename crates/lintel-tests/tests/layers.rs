//! The crates' layers, checked (see `lintel_tests::layers`): each crate's
//! map in its doc is the rank table here, and a change that imports against
//! it fails with the file and line.

use std::path::{Path, PathBuf};

use lintel_tests::layers::{cycle, uses_within, violations, Rules};

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

fn assert_layered(name: &str, rules: &Rules<'_>) {
    let bad = violations(&crate_src(name), rules);
    assert!(
        bad.is_empty(),
        "{name}: imports against its layers:\n{}",
        bad.join("\n")
    );
}

fn assert_no_ring(name: &str, folders: &[&str]) {
    for folder in folders {
        if let Some(ring) = cycle(&uses_within(&crate_src(name), folder)) {
            panic!(
                "{name}: the modules of {folder}/ use each other in a ring:\n{}",
                ring.join("\n")
            );
        }
    }
}

/// The core: `sys` < `state` < `context` < `object` < `client`, `server`
/// < `domain` < `api`, `stub` (the crate doc's map).
#[test]
fn the_core_imports_only_downwards() {
    let rules = Rules {
        ranks: &[
            ("sys", 1),
            ("state", 2),
            ("context", 3),
            ("object", 4),
            ("client", 5),
            ("server", 5),
            ("domain", 6),
            ("api", 7),
            ("stub", 7),
        ],
        external: &["abi"],
    };
    assert_layered("lintel", &rules);
    // `object/` holds the one permitted ring: door, buffer and connection.
    assert_no_ring(
        "lintel",
        &[
            "sys", "state", "context", "client", "server", "domain", "api", "stub",
        ],
    );
}

/// The file service: `uffd` < `proto` < `client`, `service`; the
/// client never names the service, nor the service the client.
#[test]
fn the_file_service_keeps_client_and_service_apart() {
    let rules = Rules {
        ranks: &[("uffd", 1), ("proto", 2), ("client", 3), ("service", 3)],
        external: &[],
    };
    assert_layered("lintel-fs", &rules);
    assert_no_ring("lintel-fs", &["proto", "client", "service"]);
}

/// The emulation library: the program's memory, paths and descriptor
/// table < symlinks and static images < the trap < the emulated calls,
/// whose families use each other without a ring.
#[test]
fn the_emulation_is_layered_by_family() {
    let rules = Rules {
        ranks: &[
            ("env", 1),
            ("fdtable", 1),
            ("paths", 1),
            ("user", 1),
            ("links", 2),
            ("image", 2),
            ("trap", 3),
            ("emulate", 4),
        ],
        external: &[],
    };
    assert_layered("lintel-unix", &rules);
    assert_no_ring("lintel-unix", &["emulate"]);
}

/// The checker fails on each kind of import against the order.
#[test]
fn an_import_against_the_order_is_reported() {
    let dir = std::env::temp_dir().join(format!("lintel-layers-plant-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("low")).unwrap();
    std::fs::create_dir_all(dir.join("high")).unwrap();
    let files = [
        ("lib.rs", "mod low;\nmod high;\npub use low::x;\n"),
        ("high/mod.rs", "use crate::low::x;\n"),
        (
            "low/mod.rs",
            concat!(
                "// crate::high in a comment is not an import\n",
                "const S: &str = \"crate::high\";\n",
                "use crate::{\n    abi,\n    high::{self, y},\n};\n",
                "fn f() { crate::Door::call(); }\n",
                "use crate::abi::*;\n",
            ),
        ),
    ];
    for (path, text) in files {
        std::fs::write(dir.join(path), text).unwrap();
    }
    let rules = Rules {
        ranks: &[("low", 1), ("high", 2)],
        external: &["abi"],
    };
    let found = violations(&dir, &rules);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            "src/low/mod.rs:5: `low` (rank 1) names `crate::high` (rank 2)",
            "src/low/mod.rs:7: names `crate::Door`, not a folder",
            "src/low/mod.rs:8: a wildcard import of the protocol",
        ]
    );
}
