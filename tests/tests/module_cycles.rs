//! No import circles inside any crate of the workspace: read from the source files, every
//! module's references to its siblings and cousins (`crate::a::b`, `super::x`) make a graph,
//! and a strongly connected part of more than one module is a circle, named here by its
//! modules. A module and its own ancestors or descendants do not count (a parent declares its
//! children and re-exports their items; a child reads its parent's), and test code may reach
//! anywhere.
//!
//! A circle means neither module can be read, tested or moved to a crate of its own without
//! the other: the controller's split into layers starts from none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path under `src`: `src/report/table.rs` -> [report, table],
/// `src/service/mod.rs` -> [service], `src/lib.rs` -> [].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file without its tests and comments; `None` for a file of tests only.
fn code_of(path: &Path, text: &str) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    Some(
        code.lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Every path a piece of code names, as written: `crate::a::b::C`, `super::super::x`, and the
/// items of a `use crate::a::{b, c::d}` group, each expanded.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 8)].iter().collect();
        let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && (i == 0 || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut segments = Vec::new();
        let mut current = String::new();
        while j < bytes.len() {
            let c = bytes[j];
            if c.is_alphanumeric() || c == '_' {
                current.push(c);
                j += 1;
            } else if c == ':' && bytes.get(j + 1) == Some(&':') {
                segments.push(std::mem::take(&mut current));
                j += 2;
            } else {
                break;
            }
        }
        if !current.is_empty() {
            segments.push(current);
        }
        if bytes.get(j) == Some(&'{') {
            // A group: each top-level item of it, after the prefix.
            let mut depth = 0;
            let mut item = String::new();
            let mut k = j;
            while k < bytes.len() {
                let c = bytes[k];
                match c {
                    '{' => {
                        depth += 1;
                        if depth > 1 {
                            item.push(c);
                        }
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                        item.push(c);
                    }
                    ',' if depth == 1 => {
                        group_item(&segments, &item, &mut out);
                        item.clear();
                    }
                    _ => item.push(c),
                }
                k += 1;
            }
            group_item(&segments, &item, &mut out);
            j = k;
        } else {
            out.push(segments);
        }
        i = j.max(i + 1);
    }
    out
}

fn group_item(prefix: &[String], item: &str, out: &mut Vec<Vec<String>>) {
    let head: String = item
        .trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    if head.is_empty() || head == "self" {
        out.push(prefix.to_vec());
        return;
    }
    let mut path = prefix.to_vec();
    path.extend(
        head.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    out.push(path);
}

/// The module a path written in module `from` lands in: the longest known module its
/// segments name.
fn resolve(
    from: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("super") => {
            base = from.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut best = None;
    let mut candidate = base.clone();
    for segment in rest {
        candidate.push(segment.clone());
        if modules.contains(&candidate) {
            best = Some(candidate.clone());
        }
    }
    best
}

fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The circles of a crate's module graph (Tarjan's strongly connected components of more
/// than one module).
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let Some(code) = code_of(file, &std::fs::read_to_string(file).unwrap()) else {
            continue;
        };
        for path in paths_in(&code) {
            if let Some(to) = resolve(&from, &path, &modules)
                && !related(&from, &to)
            {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    strongly_connected(&modules, &edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| m.join("::")).collect())
        .collect()
}

fn strongly_connected(
    nodes: &BTreeSet<Vec<String>>,
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

/// Every crate's `src` under crates/, with the tests and benches crates'.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("src").is_dir() {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, dir.join("src")));
        }
    }
    out.push(("quietbench-benches".into(), workspace().join("benches/src")));
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut found = Vec::new();
    for (name, src) in crate_sources() {
        for circle in circles(&src) {
            found.push(format!("{name}: {}", circle.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other, directly or around a circle:\n{}",
        found.join("\n")
    );
}

/// The finder itself, on a made-up crate: a three-module circle through a `use` group and a
/// `super::` path is found; parent and child reading each other is not a circle.
#[test]
fn the_finder_finds_a_circle_of_three_and_ignores_parents() {
    let dir = std::env::temp_dir().join(format!("qb-cycles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).unwrap();
    write("lib.rs", "mod a; mod b; mod c;\n");
    write("a.rs", "use crate::b::{inner::Thing, other};\n");
    write(
        "b/mod.rs",
        "pub mod inner; pub mod other;\nuse inner::Thing;\n",
    );
    write(
        "b/inner.rs",
        "use super::super::c::f; // crate::a::x in a comment\n",
    );
    write("b/other.rs", "pub fn o() {}\n");
    write(
        "c.rs",
        "pub fn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { use crate::b::inner; }\n",
    );
    let found = circles(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, vec![vec!["a", "b::inner", "c"]], "{found:?}");
}
