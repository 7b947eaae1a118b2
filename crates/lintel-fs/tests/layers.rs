//! The crate's layering, checked: `client/` never names `service`,
//! `service/` never names `client`, `proto/` names neither, and the
//! low-level modules at the root (`shm`, `uffd`) name none of the three.
//!
//! Every `.rs` file under `src/` is read and cut into tokens (comments,
//! strings and character literals dropped, lines kept); each path that
//! starts at the crate's root is reduced to its first segment: `crate::x`
//! (in a `use` or inline), each item of a group `crate::{x, y::z}`, and
//! `super::…` chains that climb to the root. A file that names a layer it
//! may not fails the test, with the file and line.

use std::path::{Path, PathBuf};

/// A token and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Open,
    Close,
    Comma,
    Other(char),
}

/// `src`'s tokens, without comments, strings and character literals.
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    // Skip to just past `c[i..]`'s end of a quoted literal opened by
    // `quote` (escapes honoured), counting lines.
    let skip_quoted = |i: &mut usize, line: &mut usize, quote: char| {
        while *i < c.len() && c[*i] != quote {
            if c[*i] == '\\' {
                *i += 1;
            }
            if *i < c.len() && c[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        match ch {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if ch.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                // Block comments nest in Rust.
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => {
                i += 1;
                skip_quoted(&mut i, &mut line, '"');
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime
                // or label ('a), which is left as punctuation and a name.
                if next == Some('\\') {
                    i += 1;
                    skip_quoted(&mut i, &mut line, '\'');
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    out.push((Tok::Other('\''), line));
                    i += 1;
                }
            }
            _ if ch.is_alphanumeric() || ch == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                // Raw and byte strings: r"…", r#"…"#, b"…", br#"…"#.
                // (`r#name` is a raw identifier: no quote after the `#`s.)
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                let raw = matches!(word.as_str(), "r" | "br" | "cr") && c.get(i + hashes) == Some(&'"');
                if raw {
                    i += hashes + 1; // the `#`s and the opening quote
                    while i < c.len() {
                        if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                } else if matches!(word.as_str(), "b" | "c") && c.get(i) == Some(&'"') {
                    i += 1;
                    skip_quoted(&mut i, &mut line, '"');
                } else if word == "b" && c.get(i) == Some(&'\'') {
                    i += 1;
                    skip_quoted(&mut i, &mut line, '\'');
                } else {
                    out.push((Tok::Ident(word), line));
                }
            }
            ':' if next == Some(':') => {
                out.push((Tok::Path, line));
                i += 2;
            }
            '{' => {
                out.push((Tok::Open, line));
                i += 1;
            }
            '}' => {
                out.push((Tok::Close, line));
                i += 1;
            }
            ',' => {
                out.push((Tok::Comma, line));
                i += 1;
            }
            _ => {
                out.push((Tok::Other(ch), line));
                i += 1;
            }
        }
    }
    out
}

/// The crate's top-level modules a file names, with the line of each
/// naming. `module` is the file's module path (`["service", "open"]` for
/// `src/service/open.rs`), against which `super::` is resolved (inline
/// `mod name { … }` blocks counted).
fn roots_named(src: &str, module: &[String]) -> Vec<(String, usize)> {
    let t = tokens(src);
    let ident = |k: usize| match t.get(k) {
        Some((Tok::Ident(w), _)) => Some(w.as_str()),
        _ => None,
    };
    let is = |k: usize, want: &Tok| t.get(k).is_some_and(|(x, _)| x == want);
    let mut named = Vec::new();
    // Inline modules open here: their names, each with the brace depth
    // its block opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut k = 0;
    while k < t.len() {
        match &t[k].0 {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(w) if w == "mod" && ident(k + 1).is_some() && is(k + 2, &Tok::Open) => {
                inline.push((ident(k + 1).unwrap().to_string(), depth));
            }
            _ => {}
        }
        // Where a path from the root starts here: just past `crate::`, or
        // past `super::` chains that climb to the root.
        let start = if ident(k) == Some("crate") && is(k + 1, &Tok::Path) {
            // `x::crate` is not a path from the root.
            (k == 0 || !is(k - 1, &Tok::Path)).then_some(k + 2)
        } else if ident(k) == Some("super") && (k == 0 || !is(k - 1, &Tok::Path)) {
            let mut here: Vec<&str> = module.iter().map(String::as_str).collect();
            here.extend(inline.iter().map(|(n, _)| n.as_str()));
            let mut j = k;
            let mut climbed = true;
            while ident(j) == Some("super") && is(j + 1, &Tok::Path) {
                climbed = here.pop().is_some();
                j += 2;
            }
            (climbed && here.is_empty() && j > k).then_some(j)
        } else {
            None
        };
        if let Some(s) = start {
            match &t.get(s) {
                Some((Tok::Ident(w), line)) => named.push((w.clone(), *line)),
                Some((Tok::Open, _)) => {
                    // A group: the first name of each of its items.
                    let mut d = 0;
                    let mut j = s;
                    let mut item_start = true;
                    while j < t.len() {
                        match &t[j].0 {
                            Tok::Open => {
                                d += 1;
                                item_start = d == 1;
                            }
                            Tok::Close => {
                                d -= 1;
                                if d == 0 {
                                    break;
                                }
                            }
                            Tok::Comma if d == 1 => item_start = true,
                            Tok::Ident(w) if item_start && d == 1 => {
                                named.push((w.clone(), t[j].1));
                                item_start = false;
                            }
                            _ => item_start = false,
                        }
                        j += 1;
                    }
                }
                _ => {}
            }
        }
        k += 1;
    }
    named
}

/// The layers a file of `layer` may not name.
fn forbidden(layer: &str) -> &'static [&'static str] {
    match layer {
        "client" => &["service"],
        "service" => &["client"],
        "proto" => &["client", "service"],
        // The low-level modules at the root, beneath every layer.
        "shm" | "uffd" => &["client", "service", "proto"],
        _ => &[],
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/service/open.rs` → `["service", "open"]`; `mod.rs` and `lib.rs`
/// stand for their folder.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Every naming of a forbidden layer in the files under `src`, as
/// `file:line: …`.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let module = module_of(rel);
        let Some(layer) = module.first() else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        for (root, line) in roots_named(&text, &module) {
            if forbidden(layer).contains(&root.as_str()) {
                bad.push(format!(
                    "src/{}:{line}: `{layer}` names `crate::{root}`",
                    rel.display()
                ));
            }
        }
    }
    bad
}

#[test]
fn no_layer_names_one_it_may_not() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "layering broken (client and service may use proto, never each other):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_sees_every_form_of_a_path_from_the_root() {
    let names = |src: &str, module: &[&str]| -> Vec<(String, usize)> {
        let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        roots_named(src, &module)
    };
    let n = |w: &str, l: usize| (w.to_string(), l);
    assert_eq!(names("use crate::proto::FsError;", &["client"]), [n("proto", 1)]);
    assert_eq!(
        names(
            "use crate::{\n    proto::{a, b},\n    service::x,\n};",
            &["client"]
        ),
        [n("proto", 2), n("service", 3)],
        "a grouped use over lines, nested groups skipped"
    );
    assert_eq!(
        names("fn f() { let s = crate::service::Service::new(); }", &["client"]),
        [n("service", 1)],
        "an inline path"
    );
    assert_eq!(
        names("use super::super::service;", &["client", "fs"]),
        [n("service", 1)],
        "`super` climbing to the root"
    );
    assert_eq!(
        names("use super::mapped::View;", &["client", "fs"]),
        [],
        "`super` that stays in the folder"
    );
    assert_eq!(
        names(
            "mod tests {\n    use super::x;\n    use super::super::y;\n}\nuse super::z;",
            &["client"]
        ),
        [n("y", 3), n("z", 5)],
        "`super` from an inline module climbs one step more"
    );
    assert_eq!(
        names(
            "// crate::service\n/* crate::service /* nested */ crate::service */\n\
             let s = \"crate::service\"; let r = r#\"crate::service\"#;\n\
             let c = '\"'; let l: &'static str = \"\"; crate::proto::X",
            &["client"]
        ),
        [n("proto", 4)],
        "comments, strings, characters and lifetimes are not paths"
    );
    assert_eq!(
        names("lintel::crate::service", &["client"]),
        [],
        "not from the root"
    );
    assert_eq!(
        names("let r#type = 1; crate::proto::X", &["client"]),
        [n("proto", 1)],
        "a raw identifier"
    );
}

#[test]
fn a_planted_bad_import_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("lintel-fs-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("client")).unwrap();
    std::fs::create_dir_all(dir.join("proto")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod client;\nmod service;\n").unwrap();
    std::fs::write(
        dir.join("client/file.rs"),
        "use crate::proto::FsError;\nuse crate::{\n    proto::Stat,\n    service::node::Node,\n};\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("proto/mod.rs"),
        "// crate::client\npub use crate::client::File;\n",
    )
    .unwrap();
    let bad = violations(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        bad,
        [
            "src/client/file.rs:4: `client` names `crate::service`",
            "src/proto/mod.rs:2: `proto` names `crate::client`",
        ]
    );
}
