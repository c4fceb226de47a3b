//! Reading Rust definitions from the workspace's source: balanced brackets, top-level
//! commas, attributes and what serde makes of them.

use super::*;

/// A definition found in the sources: its attributes' text and its body (between the braces,
/// comments removed), or a tuple struct's parenthesized part.
pub(crate) struct Item {
    pub(crate) file: PathBuf,
    pub(crate) kind: &'static str,
    pub(crate) attributes: String,
    pub(crate) body: String,
    pub(crate) tuple: bool,
}

/// Every `.rs` file of the workspace's crates, read once.
pub(crate) struct Sources {
    pub(crate) files: Vec<(PathBuf, String)>,
}

/// The text from `open` (an opening bracket at `start`) to its match, with `//` and `/* */`
/// comments removed and string and char literals kept whole.
pub(crate) fn balanced(text: &str, start: usize) -> String {
    let bytes = text.as_bytes();
    let (open, close) = match bytes[start] {
        b'{' => (b'{', b'}'),
        b'(' => (b'(', b')'),
        other => panic!("no bracket at {start}: {:?}", other as char),
    };
    let mut out = String::new();
    let mut depth = 0;
    let mut i = start;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
            continue;
        }
        let c = bytes[i];
        if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str(&text[i..=j.min(bytes.len() - 1)]);
            i = j + 1;
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return out[1..].to_string();
            }
        }
        out.push(c as char);
        i += 1;
    }
    panic!("unbalanced {:?} in {}", open as char, &text[start..])
}

/// Splits `text` at commas outside brackets and string literals.
pub(crate) fn split_top(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0i32;
    let mut in_string = false;
    let mut prev = ' ';
    for c in text.chars() {
        if in_string {
            in_string = !(c == '"' && prev != '\\');
        } else {
            match c {
                '"' => in_string = true,
                '(' | '[' | '{' | '<' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                '>' if prev != '-' && prev != '=' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(String::new());
                    prev = c;
                    continue;
                }
                _ => {}
            }
        }
        parts.last_mut().unwrap().push(c);
        prev = c;
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Takes the leading `#[...]` attributes off `text`: (their text, the rest).
pub(crate) fn take_attributes(text: &str) -> (String, &str) {
    let mut attributes = String::new();
    let mut rest = text.trim_start();
    while rest.starts_with("#[") {
        let mut depth = 0;
        let end = rest
            .char_indices()
            .skip(1)
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("unclosed attribute: {rest}"));
        attributes.push_str(&rest[..=end]);
        attributes.push('\n');
        rest = rest[end + 1..].trim_start();
    }
    (attributes, rest)
}

/// The value of `key = "value"` inside `#[serde(...)]` attributes.
pub(crate) fn serde_value(attributes: &str, key: &str) -> Option<String> {
    serde_args(attributes).find_map(|arg| {
        let (k, v) = arg.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The arguments of every `#[serde(...)]` in `attributes`.
pub(crate) fn serde_args(attributes: &str) -> impl Iterator<Item = String> + '_ {
    attributes
        .match_indices("serde(")
        .flat_map(|(at, _)| split_top(&balanced(attributes, at + "serde".len())))
}

pub(crate) fn serde_flag(attributes: &str, flag: &str) -> bool {
    serde_args(attributes).any(|arg| arg.trim() == flag)
}

/// A variant's name as serde writes it under `rename_all`.
pub(crate) fn renamed(name: &str, rule: Option<&str>) -> String {
    let snake = || {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    };
    match rule {
        None => name.to_string(),
        Some("snake_case") => snake(),
        Some("kebab-case") => snake().replace('_', "-"),
        Some("lowercase") => name.to_ascii_lowercase(),
        Some(other) => panic!("docs_drift: teach `renamed` serde's rename_all = {other:?}"),
    }
}

impl Sources {
    pub(crate) fn load() -> Self {
        let mut paths = Vec::new();
        files_under(&root().join("crates"), ".rs", &mut paths);
        let files = paths
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p, text)
            })
            .collect();
        Self { files }
    }

    /// The struct or enum `name`, preferring (in turn) the file `near`, files under the module
    /// path `hint` names (`crate::verdicts::spread::X`: src/verdicts/spread, in any crate), and
    /// the crate of `near`; more than one candidate left is an error that names them.
    pub(crate) fn find(&self, name: &str, hint: &[&str], near: &Path) -> Item {
        let mut found = Vec::new();
        for (file, text) in &self.files {
            for (at, _) in text.match_indices(name) {
                let before = &text[..at];
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                let head = text[line_start..at].trim();
                let kind = match head.rsplit(' ').next() {
                    Some("struct") => "struct",
                    Some("enum") => "enum",
                    _ => continue,
                };
                if !matches!(head, "pub struct" | "pub enum" | "struct" | "enum")
                    && !head.starts_with("pub(")
                {
                    continue;
                }
                let after = &text[at + name.len()..];
                let Some(open) = after.find(['{', '(', ';']) else {
                    continue;
                };
                if !after[..open].trim().is_empty() {
                    // `struct NameSuffix`, or generics, which no schema type has.
                    continue;
                }
                let tuple = after.as_bytes()[open] == b'(';
                let body = match after.as_bytes()[open] {
                    b';' => String::new(),
                    _ => balanced(text, at + name.len() + open),
                };
                found.push(Item {
                    file: file.clone(),
                    kind,
                    attributes: attributes_above(&text[..line_start]),
                    body,
                    tuple,
                });
            }
        }
        let crate_of = |p: &Path| {
            p.strip_prefix(root().join("crates"))
                .ok()
                .and_then(|r| r.components().next())
                .map(|c| c.as_os_str().to_owned())
        };
        let module = hint.join("/");
        let filters: [&dyn Fn(&Item) -> bool; 3] = [
            &|i| i.file == near,
            // In any crate: a module may move to another crate and be re-exported.
            &|i| !hint.is_empty() && i.file.to_string_lossy().contains(&format!("src/{module}")),
            &|i| crate_of(&i.file) == crate_of(near),
        ];
        for filter in filters {
            let mut matching: Vec<Item> = Vec::new();
            let mut rest = Vec::new();
            for item in found {
                if filter(&item) {
                    matching.push(item);
                } else {
                    rest.push(item);
                }
            }
            if matching.len() == 1 {
                return matching.pop().unwrap();
            }
            if matching.len() > 1 {
                found = matching;
                continue;
            }
            found = rest;
        }
        match found.len() {
            1 => found.pop().unwrap(),
            0 => panic!(
                "docs_drift: the JSON schema names type {name} (from {}), found nowhere under \
                 crates/",
                near.display()
            ),
            _ => panic!(
                "docs_drift: type {name} (from {}) is defined in several files: {:?}; give its \
                 path in the schema, or teach Sources::find",
                near.display(),
                found.iter().map(|i| &i.file).collect::<Vec<_>>()
            ),
        }
    }
}

/// The attributes written right above a definition (after its doc comment).
pub(crate) fn attributes_above(before: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let mut in_multiline = false;
    for line in before.lines().rev() {
        let t = line.trim();
        if in_multiline {
            lines.push(t);
            in_multiline = !t.starts_with("#[");
            continue;
        }
        if t.starts_with("#[") || t.starts_with("//") {
            lines.push(t);
        } else if t.ends_with(")]") || t.ends_with(']') {
            lines.push(t);
            in_multiline = true;
        } else {
            break;
        }
    }
    lines.reverse();
    lines
        .into_iter()
        .filter(|l| !l.starts_with("//"))
        .collect::<Vec<_>>()
        .join(" ")
}
