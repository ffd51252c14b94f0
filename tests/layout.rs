//! The workspace's layout, kept by a test rather than by care, in every crate (the core, the
//! adapters, the HTTP crate, the functions, the client, the tools and the test crates alike):
//! - no source file over 600 lines of code (a trailing `#[cfg(test)] mod tests` is not counted:
//!   tests may be as long as their tables need);
//! - no function over 80 lines, unless the line above it (or above its attributes) is a
//!   comment starting `// Long:` that says why (a table or a match read top to bottom);
//! - no module of a crate imports a sibling that imports it back, at any depth: at the top,
//!   a folder (its `mod.rs` and its files) counts as one capability; inside a folder, its
//!   files and subfolders are the siblings (cycles are what make a tree hard to read).
//!
//! `src/`, `tests/`, `benches/` and `examples/` of every package are measured; `fuzz/` (a
//! workspace of its own) too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;
/// The comment that excepts the function below it from [`MAX_FN_LINES`], with its reason.
const LONG_MARK: &str = "// Long:";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every package's directory: the root package, `crates/*`, `functions/*`, `examples/*`, `fuzz`.
fn packages() -> Vec<PathBuf> {
    let mut out = vec![root()];
    for group in ["crates", "functions", "examples"] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join(group))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("Cargo.toml").is_file())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out.push(root().join("fuzz"));
    out
}

/// Every `.rs` file under `dir`, by its path relative to `dir`.
fn sources(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(at) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let code = std::fs::read_to_string(&path).unwrap();
                // Only the code: a file's unit tests are not counted.
                let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or_default().to_owned();
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), code);
            }
        }
    }
    out
}

/// Every measured file of the workspace, by its path from the root.
fn all_files() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for package in packages() {
        for part in ["src", "tests", "benches", "examples", "fuzz_targets"] {
            for (rel, code) in sources(&package.join(part)) {
                let full = package.join(part).join(rel);
                out.insert(full.strip_prefix(root()).unwrap().display().to_string(), code);
            }
        }
    }
    out
}

/// A package's `src/` modules by module path (`log::commit`, `queues`, …).
fn modules(package: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (rel, code) in sources(&package.join("src")) {
        let rel = rel.with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        out.insert(parts.join("::"), code);
    }
    out
}

/// A module path as its segments (`log::commit` → `["log", "commit"]`; the root is empty).
fn segments(module: &str) -> Vec<String> {
    module.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// The module paths a line of `module`'s code names, resolved from the crate root: every
/// `crate::a::b…` and `super::…` path, and each item of a `crate::{a, b::c}` group.
fn paths_named(module: &[String], line: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = ["crate::", "super::"].iter().filter_map(|p| line[at..].find(p).map(|i| (at + i, *p))).min()
    {
        let (start, prefix) = found;
        at = start + prefix.len();
        if start > 0 && line[..start].ends_with(|c: char| ident(c) || c == ':') {
            continue; // the middle of a longer path (`super::super::x`) was taken with its start
        }
        let mut base: Vec<String> =
            if prefix == "super::" { module[..module.len().saturating_sub(1)].to_vec() } else { Vec::new() };
        let mut rest = &line[at..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let chain = |text: &str| -> Vec<String> {
            let end = text.find(|c: char| !ident(c) && c != ':').unwrap_or(text.len());
            text[..end].split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
        };
        let head = chain(rest);
        let after = &rest[rest.find(|c: char| !ident(c) && c != ':').unwrap_or(rest.len())..];
        if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                out.push([base.clone(), head.clone(), chain(item.trim())].concat());
            }
        } else {
            out.push([base, head].concat());
        }
    }
    out
}

/// The import edges between sibling modules, by their parent: `a::b` naming `crate::a::c::X`
/// is an edge `b -> c` under `a`; `x` naming `crate::y` an edge `x -> y` under the root.
/// Only modules of the crate count (a path's tail past its modules names an item).
fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let known: BTreeSet<Vec<String>> = modules
        .keys()
        .flat_map(|m| {
            let s = segments(m);
            (1..=s.len()).map(move |n| s[..n].to_vec())
        })
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, code) in modules {
        let from = segments(module);
        for line in code.lines().map(|l| l.split("//").next().unwrap_or_default()) {
            for to in paths_named(&from, line) {
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common < from.len() && common < to.len() && known.contains(&to[..=common]) {
                    let level = edges.entry(from[..common].to_vec()).or_default();
                    level.entry(from[common].clone()).or_default().insert(to[common].clone());
                }
            }
        }
    }
    edges
}

/// Every cycle of any length in `edges`, by a depth-first search from each module.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    out.push(format!("{} -> {start}", path.join(" -> ")));
                } else if !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    out
}

/// The functions of `code` over [`MAX_FN_LINES`] without a [`LONG_MARK`], as (line, length).
fn long_functions(code: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let head =
            ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| trimmed.strip_prefix(p)).unwrap_or(trimmed);
        let head = head.strip_prefix("async ").unwrap_or(head);
        if !head.starts_with("fn ") || line.trim_end().ends_with(';') {
            continue;
        }
        let end = lines[i..].iter().position(|l| *l == format!("{indent}}}")).map_or(0, |e| e + 1);
        // The comment above the function, past its attributes and doc comments.
        let marked = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .find(|l| !l.starts_with("#[") && !l.starts_with("///"))
            .is_some_and(|l| l.starts_with(LONG_MARK));
        if end > MAX_FN_LINES && !marked {
            out.push((i + 1, end));
        }
    }
    out
}

#[test]
fn no_capability_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for package in packages() {
        let name = package.strip_prefix(root()).unwrap().display().to_string();
        for (parent, edges) in imports(&modules(&package)) {
            let parent = if parent.is_empty() { "crate".to_owned() } else { parent.join("::") };
            found.extend(cycles(&edges).into_iter().map(|c| format!("{name}: under {parent}: {c}")));
        }
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

#[test]
fn no_file_is_over_its_bound() {
    let long: Vec<(String, usize)> = all_files()
        .into_iter()
        .map(|(path, code)| (path, code.lines().count()))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .collect();
    assert!(long.is_empty(), "files over {MAX_FILE_LINES} lines of code: {long:#?}");
}

#[test]
fn no_function_is_over_its_bound() {
    let mut long = Vec::new();
    for (path, code) in all_files() {
        long.extend(long_functions(&code).into_iter().map(|(line, n)| format!("{path}:{line} ({n} lines)")));
    }
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines (mark a table with `{LONG_MARK} why`): {long:#?}");
}

#[test]
fn the_measure_sees_what_it_bounds() {
    // A cycle, a long function and a marked one: the checks above cannot pass by seeing nothing.
    let edges = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(cycles(&edges).len(), 2);
    let body = "    x();\n".repeat(MAX_FN_LINES);
    let long = format!("fn f() {{\n{body}}}\n");
    assert_eq!(long_functions(&long), vec![(1, MAX_FN_LINES + 2)]);
    let marked = format!("{LONG_MARK} a table.\n#[test]\n{long}");
    assert!(long_functions(&marked).is_empty());
    let modules = BTreeMap::from([
        ("a".to_owned(), "use crate::b::X;".to_owned()),
        ("b::c".to_owned(), "use crate::{a::Y, b};".to_owned()),
        // Siblings in a folder: `d::e` and `d::f` name each other, one through `super::`.
        ("d::e".to_owned(), "use crate::d::f::g;".to_owned()),
        ("d::f".to_owned(), "use super::e::{h, i};".to_owned()),
    ]);
    let edges = imports(&modules);
    assert_eq!(cycles(&edges[&Vec::new()]).len(), 2, "{edges:?}");
    assert_eq!(cycles(&edges[&vec!["d".to_owned()]]).len(), 2, "{edges:?}");
    assert!(packages().iter().any(|p| p.ends_with("crates/core")), "packages: {:?}", packages());
    assert!(all_files().keys().any(|p| p.starts_with("crates/core/src/")));
}
