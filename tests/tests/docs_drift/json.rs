//! Every field the JSON report emits is in docs/json-report.md.

use super::*;
use crate::source::*;

/// The fields of the report: dotted paths, `[]` after an array (`hosts[].fingerprint.nics[]`),
/// and for each internally tagged enum the tag's path and its values.
#[derive(Default)]
pub(crate) struct Schema {
    pub(crate) fields: BTreeSet<String>,
    pub(crate) tags: BTreeMap<String, BTreeSet<String>>,
}

pub(crate) struct SchemaReader {
    pub(crate) sources: Sources,
    pub(crate) proto: Proto,
    pub(crate) schema: Schema,
    /// The types being walked, so a recursive type stops.
    pub(crate) stack: Vec<String>,
}

pub(crate) const PRIMITIVES: &[&str] = &[
    "bool", "char", "str", "String", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16",
    "i32", "i64", "i128", "isize", "f32", "f64", "PathBuf", "Value",
];

pub(crate) fn generic_arg<'a>(ty: &'a str, wrapper: &str) -> Option<&'a str> {
    let inner = ty
        .strip_prefix(wrapper)?
        .strip_prefix('<')?
        .strip_suffix('>')?;
    Some(inner.trim())
}

impl SchemaReader {
    /// Adds the fields of a value of type `ty` (written in `near`) at `path`.
    pub(crate) fn walk_type(&mut self, ty: &str, near: &Path, path: &str) {
        let ty = ty.trim();
        let ty = ty
            .strip_prefix("&'static ")
            .or(ty.strip_prefix('&'))
            .unwrap_or(ty)
            .trim();
        for wrapper in ["Option", "Box", "Arc"] {
            if let Some(inner) = generic_arg(ty, wrapper) {
                return self.walk_type(inner, near, path);
            }
        }
        if let Some(inner) = generic_arg(ty, "Vec") {
            let element = format!("{path}[]");
            return self.walk_type(inner, near, &element);
        }
        if ty.starts_with('[') {
            let inner = ty.trim_matches(['[', ']']).split(';').next().unwrap();
            return self.walk_type(inner, near, &format!("{path}[]"));
        }
        // Maps have the data's keys, not the schema's; tuples are arrays of values.
        if ty.starts_with("BTreeMap<") || ty.starts_with("HashMap<") || ty.starts_with('(') {
            return;
        }
        let segments: Vec<&str> = ty.split("::").collect();
        let name = *segments.last().unwrap();
        if PRIMITIVES.contains(&name) {
            return;
        }
        if segments[0] == "pb" || ty.starts_with("quietbench_proto::v1::") {
            return self.walk_message(name, path);
        }
        let hint: Vec<&str> = segments[..segments.len() - 1]
            .iter()
            .copied()
            // `crate::verdicts::x` and `quietbench_record::verdicts::x` both hint src/verdicts/x.
            .filter(|s| !matches!(*s, "crate" | "super" | "self") && !s.starts_with("quietbench_"))
            .collect();
        let item = self.sources.find(name, &hint, near);
        if self.stack.iter().any(|t| t == name) {
            return;
        }
        self.stack.push(name.to_string());
        self.walk_item(name, &item, path);
        self.stack.pop();
    }

    pub(crate) fn walk_item(&mut self, name: &str, item: &Item, path: &str) {
        let derives_serialize = item
            .attributes
            .replace("Deserialize", "")
            .contains("Serialize");
        if !derives_serialize {
            panic!(
                "docs_drift: {name} ({}) is in the JSON report but does not derive Serialize: \
                 teach tests/tests/docs_drift/json.rs its hand-written shape",
                item.file.display()
            );
        }
        if serde_flag(&item.attributes, "transparent") || item.tuple {
            let fields = split_top(&item.body);
            assert!(
                fields.len() == 1,
                "docs_drift: tuple struct {name} with {} fields",
                fields.len()
            );
            let (_, ty) = take_attributes(&fields[0]);
            let ty = ty.trim_start_matches("pub ").to_string();
            return self.walk_type(&ty, &item.file.clone(), path);
        }
        match item.kind {
            "struct" => self.walk_fields(&item.body, &item.file, path),
            _ => self.walk_enum(name, item, path),
        }
    }

    /// Named fields (a struct's body, or a struct variant's), added under `path`.
    pub(crate) fn walk_fields(&mut self, body: &str, file: &Path, path: &str) {
        for field in split_top(body) {
            let (attributes, rest) = take_attributes(&field);
            let rest = rest
                .strip_prefix("pub(crate) ")
                .or(rest.strip_prefix("pub(super) "))
                .or(rest.strip_prefix("pub "))
                .unwrap_or(rest);
            let (name, ty) = rest
                .split_once(':')
                .unwrap_or_else(|| panic!("docs_drift: cannot read field {field:?} in {file:?}"));
            if serde_flag(&attributes, "skip") || serde_flag(&attributes, "skip_serializing") {
                continue;
            }
            if serde_flag(&attributes, "flatten") {
                self.walk_type(ty, file, path);
                continue;
            }
            let name = serde_value(&attributes, "rename")
                .unwrap_or_else(|| name.trim().trim_start_matches("r#").to_string());
            let field_path = if path.is_empty() {
                name
            } else {
                format!("{path}.{name}")
            };
            self.schema.fields.insert(field_path.clone());
            if serde_value(&attributes, "serialize_with").is_none() {
                self.walk_type(ty, file, &field_path);
            }
        }
    }

    pub(crate) fn walk_enum(&mut self, name: &str, item: &Item, path: &str) {
        let tag = serde_value(&item.attributes, "tag");
        let rule = serde_value(&item.attributes, "rename_all");
        let variants = split_top(&item.body);
        let unit = |v: &String| {
            let (_, rest) = take_attributes(v);
            !rest.contains(['{', '('])
        };
        match tag {
            None if variants.iter().all(unit) => {} // a string
            None => panic!(
                "docs_drift: enum {name} ({}) carries data without `#[serde(tag = ...)]`: \
                 teach tests/tests/docs_drift/json.rs its shape",
                item.file.display()
            ),
            Some(tag) => {
                let tag_path = if path.is_empty() {
                    tag.clone()
                } else {
                    format!("{path}.{tag}")
                };
                self.schema.fields.insert(tag_path.clone());
                for variant in &variants {
                    let (attributes, rest) = take_attributes(variant);
                    let variant_name = rest.split(['{', '(', ' ']).next().unwrap().trim();
                    let value = serde_value(&attributes, "rename")
                        .unwrap_or_else(|| renamed(variant_name, rule.as_deref()));
                    self.schema
                        .tags
                        .entry(tag_path.clone())
                        .or_default()
                        .insert(value);
                    if let Some(open) = rest.find('{') {
                        let body = balanced(rest, open);
                        self.walk_fields(&body, &item.file.clone(), path);
                    } else if let Some(open) = rest.find('(') {
                        let inner = balanced(rest, open);
                        self.walk_type(&inner, &item.file.clone(), path);
                    }
                }
            }
        }
    }

    /// A prost message with a derived Serialize: its proto fields, by their proto names.
    pub(crate) fn walk_message(&mut self, name: &str, path: &str) {
        if let Some(oneof) = self.proto.oneofs.get(name) {
            panic!("docs_drift: pb::{name} has oneof {oneof}: teach walk_message its JSON shape");
        }
        let fields = self.proto.messages.get(name).cloned().unwrap_or_else(|| {
            panic!("docs_drift: the JSON schema embeds pb::{name}, not found in proto/")
        });
        for (field, ty) in fields {
            let field_path = format!("{path}.{field}");
            self.schema.fields.insert(field_path.clone());
            match ty {
                ProtoType::Message(m, repeated) => {
                    let at = if repeated {
                        format!("{field_path}[]")
                    } else {
                        field_path
                    };
                    if !self.stack.contains(&m) {
                        self.stack.push(m.clone());
                        self.walk_message(&m, &at);
                        self.stack.pop();
                    }
                }
                ProtoType::Leaf => {}
            }
        }
    }
}

#[derive(Clone)]
pub(crate) enum ProtoType {
    /// A message, and whether the field is repeated.
    Message(String, bool),
    /// A scalar, an enum (an integer on the wire and in JSON), or a map.
    Leaf,
}

/// proto/'s messages: their fields in order, with each field's type.
pub(crate) struct Proto {
    pub(crate) messages: BTreeMap<String, Vec<(String, ProtoType)>>,
    /// A oneof of each message that has one.
    pub(crate) oneofs: BTreeMap<String, String>,
}

impl Proto {
    pub(crate) fn load() -> Self {
        let mut paths = Vec::new();
        files_under(&root().join("proto"), ".proto", &mut paths);
        let mut raw: BTreeMap<String, Vec<(String, String, bool)>> = BTreeMap::new();
        let mut enums = BTreeSet::new();
        let mut oneofs = BTreeMap::new();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            // (kind, name) of each open block.
            let mut open: Vec<(String, String)> = Vec::new();
            for line in text.lines() {
                let line = line.split("//").next().unwrap().trim();
                let mut tokens = line.split_whitespace();
                let first = tokens.next().unwrap_or("");
                if matches!(first, "message" | "enum" | "oneof" | "service") && line.ends_with('{')
                {
                    let name = tokens.next().unwrap_or("").to_string();
                    if first == "enum" {
                        enums.insert(name.clone());
                    }
                    if first == "oneof"
                        && let Some((_, message)) = open.iter().rev().find(|(k, _)| k == "message")
                    {
                        oneofs.insert(message.clone(), name.clone());
                    }
                    open.push((first.to_string(), name));
                    continue;
                }
                if line.starts_with('}') {
                    open.pop();
                    continue;
                }
                let Some((kind, message)) = open.last() else {
                    continue;
                };
                if kind != "message" || !line.contains('=') || first == "reserved" {
                    continue;
                }
                let declaration = line.split('=').next().unwrap();
                let parts: Vec<&str> = declaration.split_whitespace().collect();
                let (ty, field, repeated) = match parts.as_slice() {
                    [ty, field] if ty.starts_with("map<") => ("map".to_string(), *field, false),
                    [_, _] if declaration.contains("map<") => {
                        let field = parts.last().unwrap();
                        ("map".to_string(), *field, false)
                    }
                    ["repeated", ty, field] => (ty.to_string(), *field, true),
                    ["optional", ty, field] | [ty, field] => (ty.to_string(), *field, false),
                    _ if declaration.contains("map<") => {
                        ("map".to_string(), *parts.last().unwrap(), false)
                    }
                    _ => panic!("docs_drift: cannot read proto field {line:?} in {message}"),
                };
                raw.entry(message.clone())
                    .or_default()
                    .push((field.to_string(), ty, repeated));
            }
        }
        let messages = raw
            .iter()
            .map(|(name, fields)| {
                let fields = fields
                    .iter()
                    .map(|(field, ty, repeated)| {
                        let ty = ty.rsplit('.').next().unwrap().to_string();
                        let kind = if raw.contains_key(&ty) && !enums.contains(&ty) {
                            ProtoType::Message(ty, *repeated)
                        } else {
                            ProtoType::Leaf
                        };
                        (field.clone(), kind)
                    })
                    .collect();
                (name.clone(), fields)
            })
            .collect();
        Self { messages, oneofs }
    }
}

pub(crate) const SCHEMA_FILE: &str = "crates/quietbench-report/src/json/schema.rs";

pub(crate) fn report_schema() -> Schema {
    let mut reader = SchemaReader {
        sources: Sources::load(),
        proto: Proto::load(),
        schema: Schema::default(),
        stack: Vec::new(),
    };
    let near = root().join(SCHEMA_FILE);
    reader.walk_type("Report", &near, "");
    assert!(
        reader.schema.fields.len() > 100,
        "docs_drift read only {} fields from {SCHEMA_FILE}: has the report moved?",
        reader.schema.fields.len()
    );
    reader.schema
}

/// Field sections of docs/json-report.md: "Top level" is the report itself, and a heading
/// naming `hosts[].fingerprint` holds that object's fields.
pub(crate) fn json_section_path(heading: &str) -> Option<Vec<String>> {
    if heading.eq_ignore_ascii_case("top level") {
        return Some(Vec::new());
    }
    let span = code_spans(heading).into_iter().next()?;
    let parts: Vec<String> = span
        .split('.')
        .map(|p| p.trim_end_matches("[]").to_string())
        .collect();
    parts
        .iter()
        .all(|p| !p.is_empty() && words(p).next() == Some(p.as_str()))
        .then_some(parts)
}

/// Whether field `path` lies below field `parent` (`a.b[].c` below `a.b`).
pub(crate) fn is_below(path: &str, parent: &str) -> bool {
    path.strip_prefix(parent)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]."))
}

pub(crate) fn components(path: &str) -> Vec<String> {
    path.split('.')
        .map(|p| p.trim_end_matches("[]").to_string())
        .collect()
}

/// Whether docs/json-report.md documents `path`: a section for one of its ancestors has a row
/// naming the next component in its first cell, and that row names every component below it
/// (a nested object's fields may be listed in its parent's row: `topology` ... `nodes` (`id`)).
pub(crate) fn json_documented(sections: &[Section], path: &[String]) -> bool {
    (0..path.len()).any(|k| {
        sections.iter().any(|s| {
            json_section_path(&s.heading).as_deref() == Some(&path[..k])
                && s.rows.iter().any(|row| {
                    row.names.contains(&path[k])
                        && path[k + 1..].iter().all(|p| row.mentions.contains(p))
                })
        })
    })
}

#[test]
pub(crate) fn every_json_report_field_is_documented() {
    let schema = report_schema();
    let page = read("docs/json-report.md");
    let sections = sections(&page);
    let missing: Vec<&String> = schema
        .fields
        .iter()
        .filter(|f| !json_documented(&sections, &components(f)))
        .collect();
    // Stale rows: a field section's row naming what the report does not have.
    let known: BTreeSet<Vec<String>> = schema.fields.iter().map(|f| components(f)).collect();
    let mut stale = Vec::new();
    for section in &sections {
        let Some(parent) = json_section_path(&section.heading) else {
            continue;
        };
        for row in section.rows.iter().filter(|r| r.header == "field") {
            for name in &row.names {
                let mut path = parent.clone();
                path.push(name.clone());
                if !known.contains(&path) {
                    stale.push(format!(
                        "{} (section {:?})",
                        path.join("."),
                        section.heading
                    ));
                }
            }
        }
    }
    // Tag values (a warning's `kind`): each named in its object's section.
    let mut kinds = Vec::new();
    for (tag, values) in &schema.tags {
        let path = components(tag);
        let parent = &path[..path.len() - 1];
        let text: String = sections
            .iter()
            .filter(|s| json_section_path(&s.heading).as_deref() == Some(parent))
            .map(|s| s.text.as_str())
            .collect();
        let named: BTreeSet<String> = code_spans(&text).into_iter().collect();
        kinds.extend(
            values
                .iter()
                .filter(|v| !named.contains(*v))
                .map(|v| format!("{tag} = {v:?}")),
        );
    }
    // A field whose parent is missing too is counted under the parent, not listed.
    let missing: Vec<String> = missing
        .iter()
        .filter(|f| !missing.iter().any(|p| is_below(f, p)))
        .map(
            |f| match missing.iter().filter(|d| is_below(d, f)).count() {
                0 => f.to_string(),
                n => format!("{f} (and {n} fields below it)"),
            },
        )
        .collect();
    let problems = drift_report(&[
        (
            "Fields the report emits that the page does not document",
            missing,
        ),
        ("Rows naming fields the report does not have", stale),
        (
            "Values of a tag that the tag's section does not name",
            kinds,
        ),
    ]);
    assert!(
        problems.is_empty(),
        "docs/json-report.md has drifted from the JSON report ({SCHEMA_FILE} and the types it \
         names).\n{problems}\nDocument a field in the table of the section headed with its \
         parent's path (e.g. ### `hosts[].fingerprint`), or in its parent's row for a small \
         nested object."
    );
}

/// `changes --json` (quietbench-record's `verdicts/changes_csv.rs`, read as the report's schema
/// is) against the table of docs/changes.md's "JSON" section, whose rows name a field by its
/// whole path (`series[].name`), or a parent's path and, in the row, the fields below it.
#[test]
fn every_changes_json_field_is_documented() {
    page_documents_json(
        "CsvChanges",
        "crates/quietbench-record/src/verdicts/changes_csv.rs",
        ("docs/changes.md", "JSON"),
        "`changes --json`",
    );
}

/// `capacity --json` (quietbench-controller's `commands/capacity/json.rs`) against docs/capacity.md's
/// "JSON" section, read as `changes`' is.
#[test]
fn every_capacity_json_field_is_documented() {
    page_documents_json(
        "CapacityJson",
        "crates/quietbench-controller/src/commands/capacity/json.rs",
        ("docs/capacity.md", "JSON"),
        "`capacity --json`",
    );
}

/// `compare --json` (quietbench-controller's `commands/compare.rs`) against docs/json-report.md's
/// section of that name.
#[test]
fn every_compare_json_field_is_documented() {
    page_documents_json(
        "VerdictJson",
        "crates/quietbench-controller/src/commands/compare.rs",
        ("docs/json-report.md", "`compare --json`"),
        "`compare --json`",
    );
}

/// The fields of the type `root_type` in `file` (and the types it names) against the section
/// `heading` of the page: every field documented, every row naming a field that exists.
fn page_documents_json(
    root_type: &str,
    file: &str,
    (page_path, heading): (&str, &str),
    command: &str,
) {
    let mut reader = SchemaReader {
        sources: Sources::load(),
        proto: Proto::load(),
        schema: Schema::default(),
        stack: Vec::new(),
    };
    reader.walk_type(root_type, &root().join(file), "");
    let fields = reader.schema.fields;
    assert!(
        fields.len() > 15,
        "docs_drift read only {fields:?} from {file}: has the document moved?"
    );
    let page = read(page_path);
    let sections = sections(&page);
    let section = sections
        .iter()
        .find(|s| s.heading == heading)
        .unwrap_or_else(|| panic!("{page_path} has a section headed {heading}"));
    let rows: Vec<&Row> = section
        .rows
        .iter()
        .filter(|r| r.header == "field")
        .collect();
    let documented = |path: &[String]| {
        rows.iter().any(|r| {
            r.first.iter().any(|span| {
                let named = components(span);
                named.len() <= path.len()
                    && named[..] == path[..named.len()]
                    && path[named.len()..].iter().all(|p| r.mentions.contains(p))
            })
        })
    };
    let missing: Vec<String> = fields
        .iter()
        .filter(|f| !documented(&components(f)))
        .cloned()
        .collect();
    let known: BTreeSet<Vec<String>> = fields.iter().map(|f| components(f)).collect();
    let stale: Vec<String> = rows
        .iter()
        .flat_map(|r| r.first.iter())
        .filter(|span| !known.contains(&components(span)))
        .cloned()
        .collect();
    let problems = drift_report(&[
        (
            &format!("Fields {command} emits that the page does not document"),
            missing,
        ),
        ("Rows naming fields the document does not have", stale),
    ]);
    assert!(
        problems.is_empty(),
        "{page_path}'s JSON section has drifted from {file} and the types it names.\n\
         {problems}"
    );
}

// ---------------------------------------------------------------------------------------------
// Plan keys, asked of the plan parser.
