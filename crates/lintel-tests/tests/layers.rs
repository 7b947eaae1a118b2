//! The crates' layers, checked: each folder of a crate's `src` has a rank,
//! and a file may name (through a `crate::` path) only folders of lower
//! rank, or its own. Folders of equal rank do not name each other. The
//! crate docs draw the same map; this test is what keeps it true.
//!
//! The check reads the source as text: comments and string literals are
//! skipped, then every `crate::` path gives its first segment (inside a
//! grouped `use crate::{a, b::c}` each item does). A path through a
//! re-export at the crate root (`crate::Door`) hides which layer it
//! reaches into, so inside the crate only folders may be named; nor may
//! a file import the protocol (`abi`) by wildcard, which hides where a
//! constant comes from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A crate's layering: folder name and its rank. The crate root's own
/// files (`lib.rs`) rank above everything.
struct Layers<'a> {
    src: PathBuf,
    ranks: &'a [(&'a str, u32)],
    /// Root-level names (not folders) any file may use: re-exported crates.
    external: &'a [&'a str],
}

#[test]
fn the_core_crate_imports_only_downwards() {
    let layers = Layers {
        src: crate_src("lintel"),
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
    assert_eq!(violations(&layers), Vec::<String>::new());
}

#[test]
fn an_import_against_the_order_is_reported() {
    let dir = tempdir("layers-plant");
    std::fs::create_dir_all(dir.join("low")).unwrap();
    std::fs::create_dir_all(dir.join("high")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod low;\nmod high;\n").unwrap();
    std::fs::write(dir.join("high/mod.rs"), "use crate::low::x;\n").unwrap();
    std::fs::write(
        dir.join("low/mod.rs"),
        concat!(
            "// crate::high in a comment is not an import\n",
            "const S: &str = \"crate::high\";\n",
            "use crate::{\n    abi,\n    high::{self, y},\n};\n",
            "fn f() { crate::Door::call(); }\n",
            "use crate::abi::*;\n",
        ),
    )
    .unwrap();
    let layers = Layers {
        src: dir.clone(),
        ranks: &[("low", 1), ("high", 2)],
        external: &["abi"],
    };
    let found = violations(&layers);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![
            "low/mod.rs:5: names crate::high (rank 2) from low (rank 1)".to_string(),
            "low/mod.rs:7: names crate::Door, a root re-export, not a folder".to_string(),
            "low/mod.rs:8: a wildcard import of the protocol".to_string(),
        ]
    );
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every import against the order, as `file:line: what`.
fn violations(layers: &Layers<'_>) -> Vec<String> {
    let ranks: BTreeMap<&str, u32> = layers.ranks.iter().copied().collect();
    let mut out = Vec::new();
    for file in rust_files(&layers.src) {
        let rel = file.strip_prefix(&layers.src).unwrap();
        let rel_s = rel.to_string_lossy().into_owned();
        let here = match rel.components().count() {
            1 if rel_s == "lib.rs" || rel_s == "main.rs" => None,
            1 => {
                out.push(format!("{rel_s}: a module outside the folders"));
                continue;
            }
            _ => {
                let folder = rel.components().next().unwrap().as_os_str().to_string_lossy();
                match ranks.get(folder.as_ref()) {
                    Some(&r) => Some((folder.into_owned(), r)),
                    None => {
                        out.push(format!("{rel_s}: folder {folder} has no rank"));
                        continue;
                    }
                }
            }
        };
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for (line, _) in code.lines().enumerate().filter(|(_, l)| l.contains("abi::*")) {
            out.push(format!("{rel_s}:{}: a wildcard import of the protocol", line + 1));
        }
        for (line, name) in crate_paths(&code) {
            if layers.external.contains(&name.as_str()) {
                continue;
            }
            let Some(&r) = ranks.get(name.as_str()) else {
                out.push(format!(
                    "{rel_s}:{line}: names crate::{name}, a root re-export, not a folder"
                ));
                continue;
            };
            if let Some((folder, mine)) = &here {
                if *folder != name && r >= *mine {
                    out.push(format!(
                        "{rel_s}:{line}: names crate::{name} (rank {r}) from {folder} (rank {mine})"
                    ));
                }
            }
        }
    }
    out.sort_by_key(|v| {
        let (file, rest) = v.split_once(':').unwrap_or((v, ""));
        let line: usize = rest.split(':').next().and_then(|l| l.parse().ok()).unwrap_or(0);
        (file.to_string(), line)
    });
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            files.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            files.push(p);
        }
    }
    files.sort();
    files
}

/// The text with comments and string and character literals blanked
/// (newlines kept, so line numbers hold).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank =
        |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            loop {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes + 1;
            body + find(&b[body..], &close).unwrap() + close.len()
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if let Some(len) = char_literal(rest) {
            i + len
        } else {
            out.push(b[i]);
            i += 1;
            continue;
        };
        blank(&mut out, &b[i..end]);
        i = end;
    }
    String::from_utf8(out).unwrap()
}

/// `r"`, `r#"`, `br"`…: the number of hashes, if a raw string starts here.
fn raw_string_start(s: &[u8]) -> Option<usize> {
    let s = s.strip_prefix(b"b").unwrap_or(s);
    let s = s.strip_prefix(b"r")?;
    let hashes = s.iter().take_while(|&&c| c == b'#').count();
    (s.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a character literal starting here (not a lifetime).
fn char_literal(s: &[u8]) -> Option<usize> {
    if s[0] != b'\'' {
        return None;
    }
    if s.get(1) == Some(&b'\\') {
        return Some(2 + s[2..].iter().position(|&c| c == b'\'')? + 1);
    }
    let ch = std::str::from_utf8(&s[1..s.len().min(5)])
        .unwrap_or_else(|e| std::str::from_utf8(&s[1..1 + e.valid_up_to()]).unwrap())
        .chars()
        .next()?;
    let after = 1 + ch.len_utf8();
    (s.get(after) == Some(&b'\'')).then_some(after + 1)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The first segment of every `crate::` path, with its line.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let line_of = |at: usize| 1 + code[..at].matches('\n').count();
    let ident_at = |at: usize| {
        let n = b[at..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        &code[at..at + n]
    };
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("crate::") {
        let at = from + k;
        from = at + 7;
        let before = at.checked_sub(1).map(|p| b[p]);
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$') {
            continue;
        }
        let mut j = from;
        while b[j].is_ascii_whitespace() {
            j += 1;
        }
        if b[j] != b'{' {
            found.push((line_of(at), ident_at(j).to_string()));
            continue;
        }
        // A group: each item at depth one starts with a segment.
        let mut depth = 0;
        let mut item_start = true;
        loop {
            match b[j] {
                b'{' => {
                    depth += 1;
                    item_start = depth == 1;
                }
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b',' if depth == 1 => item_start = true,
                c if item_start && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                    found.push((line_of(j), ident_at(j).to_string()));
                    item_start = false;
                }
                _ => {}
            }
            j += 1;
        }
        from = j;
    }
    found
}
