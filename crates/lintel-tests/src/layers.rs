//! The crates' layering, checked by `tests/layers.rs`: each folder of a
//! crate's `src` (or module at its root) has a rank, and a file may name,
//! through a path from the crate's root, only its own folder or folders of
//! lower rank; folders of equal rank do not name each other. Inside the
//! crate only folders (and crates re-exported at the root) may be named: a
//! root re-export (`crate::Door`) would hide which layer a path reaches
//! into. The protocol (`abi`) is never imported by wildcard. And the
//! modules of one folder do not use each other in a ring, but where a
//! crate's doc names the one it permits.
//!
//! Every `.rs` file is read and cut into tokens (comments, strings and
//! character literals dropped, lines kept); each path from the crate's
//! root is cut to its first two segments (the folder and the module in
//! it): `crate::x::y` (in a `use` or inline), each item of a group
//! `crate::{x, y::{z, w}}`, and `super::…` chains.

use std::path::{Path, PathBuf};

/// A token and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    /// `::`
    Path,
    Open,
    Close,
    Comma,
    Other(char),
}

/// `src`'s tokens, without comments, strings and character literals.
pub fn tokens(src: &str) -> Vec<(Tok, usize)> {
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

/// A path from the crate's root, cut to its first segments, and its line.
pub type Named = (Vec<String>, usize);

/// One module's use of another in the same folder: `(from, to, where)`.
pub type Use = (String, String, String);

/// How many segments of a path from the root matter here: the layer
/// (`service`) and the module within it (`node`).
pub const SEGMENTS: usize = 2;

/// The paths from the crate's root a file names, each cut to its first
/// [`SEGMENTS`] segments (fewer if it is shorter), with the line of its
/// last segment. `module` is the file's module path (`["service",
/// "open"]` for `src/service/open.rs`), against which `super::` is
/// resolved (inline `mod name { … }` blocks counted).
pub fn paths_named(src: &str, module: &[String]) -> Vec<Named> {
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
    for k in 0..t.len() {
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
        // `x::crate` and `x::super` are no paths from here.
        if k > 0 && is(k - 1, &Tok::Path) {
            continue;
        }
        // Where the path goes on, and the module it has reached there.
        let start = if ident(k) == Some("crate") && is(k + 1, &Tok::Path) {
            Some((k + 2, Vec::new()))
        } else if ident(k) == Some("super") && is(k + 1, &Tok::Path) {
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline.iter().map(|(n, _)| n.clone()));
            let mut j = k;
            let mut climbed = true;
            while ident(j) == Some("super") && is(j + 1, &Tok::Path) {
                climbed &= here.pop().is_some();
                j += 2;
            }
            climbed.then_some((j, here))
        } else {
            None
        };
        if let Some((at, prefix)) = start {
            heads(&t, at, prefix, &mut named);
        }
    }
    named
}

/// The paths the use tree at `t[at..]` names below `prefix`, cut to
/// [`SEGMENTS`] segments: `a::b::c` is `a::b`, `{a, b::{c, d}}` is `a`,
/// `b::c` and `b::d`, `self` in a group is the prefix itself.
fn heads(t: &[(Tok, usize)], at: usize, prefix: Vec<String>, out: &mut Vec<Named>) {
    let line = t.get(at.saturating_sub(1)).map_or(0, |x| x.1);
    if prefix.len() >= SEGMENTS {
        out.push((prefix, line));
        return;
    }
    match t.get(at) {
        Some((Tok::Ident(w), line)) if w == "self" => out.push((prefix, *line)),
        Some((Tok::Ident(w), line)) => {
            let mut path = prefix;
            path.push(w.clone());
            if t.get(at + 1).is_some_and(|x| x.0 == Tok::Path) && path.len() < SEGMENTS {
                heads(t, at + 2, path, out);
            } else {
                out.push((path, *line));
            }
        }
        Some((Tok::Open, _)) => {
            // Each item of the group, from just after `{` or a `,` at its
            // own depth.
            let mut d = 0;
            for j in at..t.len() {
                match t[j].0 {
                    Tok::Open => d += 1,
                    Tok::Close => d -= 1,
                    _ => {}
                }
                if d == 0 {
                    break;
                }
                if d == 1 && matches!(t[j].0, Tok::Open | Tok::Comma) {
                    heads(t, j + 1, prefix.clone(), out);
                }
            }
        }
        // A glob (`a::*`) names everything below its prefix: kept as a
        // segment of its own, so that a wildcard import can be told apart.
        Some((Tok::Other('*'), line)) => {
            let mut path = prefix;
            path.push("*".to_string());
            out.push((path, *line));
        }
        _ if !prefix.is_empty() => out.push((prefix, line)),
        _ => {}
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

/// Each `.rs` file under `src`: its path from there, its module path and
/// the paths it names.
pub fn sources(src: &Path) -> Vec<(PathBuf, Vec<String>, Vec<Named>)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).unwrap().to_path_buf();
            let module = module_of(&rel);
            let named = paths_named(&std::fs::read_to_string(&file).unwrap(), &module);
            (rel, module, named)
        })
        .collect()
}

/// The uses among the modules of the folder `layer`: `(from, to, where)`
/// for each `crate::layer::to` that the file of module `from` names.
pub fn uses_within(src: &Path, layer: &str) -> Vec<Use> {
    let mut uses = Vec::new();
    for (rel, module, named) in sources(src) {
        if module.len() != 2 || module[0] != layer {
            continue;
        }
        for (path, line) in named {
            if path.len() == 2 && path[0] == layer && path[1] != module[1] {
                let at = format!("src/{}:{line}", rel.display());
                uses.push((module[1].clone(), path[1].clone(), at));
            }
        }
    }
    uses
}

/// A cycle of `uses`, as the uses that make it, if there is one.
pub fn cycle(uses: &[Use]) -> Option<Vec<String>> {
    // Depth first from each module; `path` holds the uses followed.
    fn visit<'a>(
        at: &'a str,
        uses: &'a [Use],
        path: &mut Vec<&'a Use>,
        done: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|u| u.0 == at) {
            return Some(
                path[i..]
                    .iter()
                    .map(|u| format!("{} uses {} ({})", u.0, u.1, u.2))
                    .collect(),
            );
        }
        if done.contains(&at) {
            return None;
        }
        for u in uses.iter().filter(|u| u.0 == at) {
            path.push(u);
            if let Some(c) = visit(&u.1, uses, path, done) {
                return Some(c);
            }
            path.pop();
        }
        done.push(at);
        None
    }
    let mut done = Vec::new();
    uses.iter()
        .find_map(|u| visit(&u.0, uses, &mut Vec::new(), &mut done))
}

/// A crate's layering: the rank of each folder (or module at the root).
pub struct Rules<'a> {
    /// Folder (or root module) and its rank; `lib.rs` ranks above all.
    pub ranks: &'a [(&'a str, u32)],
    /// Names at the root any file may use: crates re-exported there.
    pub external: &'a [&'a str],
}

/// Every import against `rules` in the files under `src`, as
/// `src/file:line: what`, in file and line order.
pub fn violations(src: &Path, rules: &Rules<'_>) -> Vec<String> {
    let rank = |name: &str| rules.ranks.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
    let mut bad = Vec::new();
    for (rel, module, named) in sources(src) {
        let at = format!("src/{}", rel.display());
        let Some(layer) = module.first() else { continue }; // lib.rs
        let Some(mine) = rank(layer) else {
            bad.push(format!("{at}: `{layer}` has no rank"));
            continue;
        };
        for (path, line) in named {
            let head = path[0].as_str();
            if head == "abi" && path.get(1).is_some_and(|s| s == "*") {
                bad.push(format!("{at}:{line}: a wildcard import of the protocol"));
                continue;
            }
            if head == layer.as_str() || rules.external.contains(&head) {
                continue;
            }
            match rank(head) {
                None => bad.push(format!("{at}:{line}: names `crate::{head}`, not a folder")),
                Some(r) if r >= mine => bad.push(format!(
                    "{at}:{line}: `{layer}` (rank {mine}) names `crate::{head}` (rank {r})"
                )),
                Some(_) => {}
            }
        }
    }
    bad.dedup();
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checker_sees_every_form_of_a_path_from_the_root() {
        let names = |src: &str, module: &[&str]| -> Vec<(String, usize)> {
            let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
            paths_named(src, &module)
                .into_iter()
                .map(|(p, line)| (p.join("::"), line))
                .collect()
        };
        let n = |w: &str, l: usize| (w.to_string(), l);
        assert_eq!(
            names("use crate::proto::FsError;", &["client"]),
            [n("proto::FsError", 1)]
        );
        assert_eq!(
            names(
                "use crate::{\n    proto::{a, b},\n    service::x::y,\n    shm,\n};",
                &["client"]
            ),
            [
                n("proto::a", 2),
                n("proto::b", 2),
                n("service::x", 3),
                n("shm", 4)
            ],
            "a grouped use over lines"
        );
        assert_eq!(
            names(
                "use crate::service::node::{self, Node};\nuse crate::service::{lock, readonly};",
                &["service"]
            ),
            [
                n("service::node", 1),
                n("service::lock", 2),
                n("service::readonly", 2)
            ],
            "a group below two segments, and one at the second"
        );
        assert_eq!(
            names("fn f() { let s = crate::service::Service::new(); }", &["client"]),
            [n("service::Service", 1)],
            "an inline path"
        );
        assert_eq!(
            names("use super::super::service;", &["client", "fs"]),
            [n("service", 1)],
            "`super` climbing to the root"
        );
        assert_eq!(
            names("use super::mapped::View;", &["client", "fs"]),
            [n("client::mapped", 1)],
            "`super` that stays in the folder"
        );
        assert_eq!(
            names(
                "mod tests {\n    use super::x;\n    use super::super::y;\n}\nuse super::z;",
                &["client"]
            ),
            [n("client::x", 2), n("y", 3), n("z", 5)],
            "`super` from an inline module climbs one step more"
        );
        assert_eq!(
            names(
                "// crate::service\n/* crate::service /* nested */ crate::service */\n\
                 let s = \"crate::service\"; let r = r#\"crate::service\"#;\n\
                 let c = '\"'; let l: &'static str = \"\"; crate::proto::X",
                &["client"]
            ),
            [n("proto::X", 4)],
            "comments, strings, characters and lifetimes are not paths"
        );
        assert_eq!(
            names("lintel::crate::service", &["client"]),
            [],
            "not from the root"
        );
        assert_eq!(
            names("let r#type = 1; crate::proto::X", &["client"]),
            [n("proto::X", 1)],
            "a raw identifier"
        );
    }

    #[test]
    fn a_ring_of_uses_is_found() {
        let u = |a: &str, b: &str| (a.to_string(), b.to_string(), format!("{a}.rs"));
        assert_eq!(cycle(&[u("a", "b"), u("b", "c"), u("a", "c")]), None);
        assert_eq!(
            cycle(&[u("x", "a"), u("a", "b"), u("b", "c"), u("c", "a")]),
            Some(vec![
                "a uses b (a.rs)".to_string(),
                "b uses c (b.rs)".to_string(),
                "c uses a (c.rs)".to_string(),
            ])
        );
    }
}
