//! The core's layout, kept by a test rather than by care: no module imports one that
//! imports it back (a folder's `mod.rs` and its files count as one capability; cycles
//! between capabilities are what make a tree hard to read), no source file over 600 lines
//! of code, no function over 80 lines. Tests (`#[cfg(test)]` modules) are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;

/// Every source file of the core, by module path (`log::commit`, `queues`, …).
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path: PathBuf = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let code = std::fs::read_to_string(&path).unwrap();
            // Only the code: tests may be as long as their tables need.
            let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or_default().to_owned();
            out.insert(parts.join("::"), code);
        }
    }
    out
}

/// The capability a module belongs to: its first path segment (`log::commit` → `log`).
fn capability(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// Which capabilities each one names through `crate::…` paths in its code (comments aside).
fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeSet<&str> = modules.keys().map(|m| capability(m)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in modules {
        let from = capability(module).to_owned();
        for line in code.lines().map(|l| l.split("//").next().unwrap_or_default()) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let mut targets: Vec<&str> = Vec::new();
                if let Some(list) = rest.strip_prefix('{') {
                    targets.extend(list.split(['}', ',']).map(|t| t.trim().split("::").next().unwrap_or_default()));
                } else {
                    targets.push(rest.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default());
                }
                for t in targets {
                    if names.contains(t) && t != from {
                        edges.entry(from.clone()).or_default().insert(t.to_owned());
                    }
                }
            }
        }
    }
    edges
}

#[test]
fn no_capability_imports_one_that_imports_it_back() {
    let edges = imports(&modules());
    // Every cycle, of any length, by a depth-first search from each capability.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    cycles.push(format!("{} -> {start}", path.join(" -> ")));
                } else if !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}\nedges: {edges:#?}");
}

#[test]
fn no_file_is_over_its_bound() {
    let long: Vec<(String, usize)> =
        modules().into_iter().map(|(m, code)| (m, code.lines().count())).filter(|(_, n)| *n > MAX_FILE_LINES).collect();
    assert!(long.is_empty(), "files over {MAX_FILE_LINES} lines of code: {long:?}");
}

#[test]
fn no_function_is_over_its_bound() {
    let mut long = Vec::new();
    for (module, code) in modules() {
        let lines: Vec<&str> = code.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            let is_fn = ["fn ", "async fn ", "pub fn ", "pub async fn ", "pub(crate) fn ", "pub(crate) async fn "]
                .iter()
                .chain(["pub(super) fn ", "pub(super) async fn "].iter())
                .any(|p| trimmed.starts_with(p));
            if !is_fn || line.trim_end().ends_with(';') {
                continue;
            }
            let end = lines[i..].iter().position(|l| *l == format!("{indent}}}")).map_or(0, |e| e + 1);
            if end > MAX_FN_LINES {
                long.push(format!("{module}:{} ({end} lines)", i + 1));
            }
        }
    }
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines: {long:?}");
}
