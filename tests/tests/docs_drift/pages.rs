//! The security page's tests exist, and links between the pages resolve.

use super::*;

/// Every name the Rust sources define with `fn` or `mod`, and every .rs, .sh file and folder
/// name under crates/, tests/ and benches/.
pub(crate) fn defined_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for top in ["crates", "tests", "benches"] {
        let mut files = Vec::new();
        files_under(&root().join(top), "", &mut files);
        for file in files {
            let mut path = file.as_path();
            while let Ok(rest) = path.strip_prefix(root()) {
                if rest.as_os_str().is_empty() {
                    break;
                }
                if let Some(name) = path.file_name() {
                    names.insert(name.to_string_lossy().into_owned());
                    if let Some(stem) = path.file_stem() {
                        names.insert(stem.to_string_lossy().into_owned());
                    }
                }
                path = path.parent().unwrap();
            }
            if file.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                for keyword in ["fn ", "mod "] {
                    for (at, _) in text.match_indices(keyword) {
                        if let Some(word) = words(&text[at + keyword.len()..]).next() {
                            names.insert(word.to_string());
                        }
                    }
                }
            }
        }
    }
    names
}

#[test]
pub(crate) fn every_test_the_security_page_names_exists() {
    let page = read("docs/security.md");
    let names = defined_names();
    let mut rows = 0;
    let mut missing = Vec::new();
    for line in page.lines().skip_while(|l| !l.starts_with("| promise")) {
        if !line.starts_with('|') {
            break;
        }
        let Some(kept_by) = line.trim_end_matches('|').rsplit('|').next() else {
            continue;
        };
        rows += 1;
        for span in code_spans(kept_by) {
            let exists = if span.contains('/') {
                root().join(&span).exists()
            } else {
                span.split("::")
                    .filter(|s| *s != "*" && *s != "tests")
                    .all(|s| names.contains(s) || names.contains(&s.replace('_', "-")))
            };
            if !exists {
                missing.push(span);
            }
        }
    }
    assert!(
        rows > 5,
        "docs/security.md has no `| promise | kept by |` table"
    );
    assert!(
        missing.is_empty(),
        "docs/security.md names tests that keep its promises, but these are defined nowhere \
         (no such fn, mod or file): {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
pub(crate) fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown page's headings.
pub(crate) fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for section in sections(markdown).iter().skip(1) {
        let base = slug(&section.heading);
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `target` (a file, maybe with `#anchor`) resolved from `dir`: None when it exists.
pub(crate) fn broken(dir: &Path, target: &str) -> Option<String> {
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    let path = if file.is_empty() {
        return None;
    } else {
        dir.join(file)
    };
    if !path.exists() {
        return Some(format!("{target}: no such file"));
    }
    if !anchor.is_empty() && file.ends_with(".md") {
        let text = std::fs::read_to_string(&path).unwrap();
        if !anchors(&text).contains(anchor) {
            return Some(format!("{target}: no heading makes #{anchor}"));
        }
    }
    None
}

#[test]
pub(crate) fn links_between_the_pages_resolve() {
    let mut pages = vec![root().join("README.md")];
    files_under(&root().join("docs"), ".md", &mut pages);
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap();
        let mut fenced = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for (at, _) in line.match_indices("](") {
                let target = line[at + 2..].split(')').next().unwrap().trim();
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let problem = if let Some(anchor) = target.strip_prefix('#') {
                    (!anchors(&text).contains(anchor)).then(|| format!("{target}: no such heading"))
                } else {
                    broken(dir, target)
                };
                if let Some(problem) = problem {
                    let page = page.strip_prefix(root()).unwrap().display().to_string();
                    problems.push(format!("{page}: {problem}"));
                }
            }
        }
    }
    // Repository paths the pages name in code spans (`crates/.../volume_types.rs`): a file that
    // moved leaves its old path behind in prose.
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for span in code_spans(&text) {
            let path = span.split_whitespace().next().unwrap_or("");
            let repo_path = [
                "crates/",
                "tests/",
                "benches/",
                "deploy/",
                "proto/",
                "examples/",
            ]
            .iter()
            .any(|p| path.starts_with(p));
            // Placeholders (`fuzz/seeds/TARGET/NAME`) and patterns name no one file.
            let placeholder = path.contains(['*', '<', '{', '$'])
                || path
                    .split('/')
                    .any(|p| p.len() > 1 && p.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
            if repo_path && !placeholder && !root().join(path).exists() {
                let page = page.strip_prefix(root()).unwrap().display().to_string();
                problems.push(format!("{page}: `{path}`: no such file"));
            }
        }
    }
    // The pages the code sends its readers to (`see docs/plans.md`, `docs/ec2.md#...`).
    let mut sources = Vec::new();
    files_under(&root().join("crates"), ".rs", &mut sources);
    for file in sources {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("docs/") {
            // Not a URL's path (`https://host/docs/...`).
            if text[..at].ends_with(|c: char| c.is_alphanumeric() || matches!(c, '/' | '.' | '-')) {
                continue;
            }
            let target: String = text[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '-' | '_' | '#'))
                .collect();
            let target = target.trim_end_matches(['.', '#']);
            if !target.contains(".md") {
                continue;
            }
            if let Some(problem) = broken(&root(), target) {
                let file = file.strip_prefix(root()).unwrap().display().to_string();
                problems.push(format!("{file}: {problem}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "links that lead nowhere:\n  {}",
        problems.join("\n  ")
    );
}
