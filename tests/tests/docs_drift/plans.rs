//! Every key a plan file takes is in docs/plans.md.

use super::*;

pub(crate) const PROBE_KEY: &str = "docs_drift_no_such_key";

/// The fields serde lists when `text` gives the table a key it does not have, or `None` when
/// the value at that point is not a table with fixed fields.
pub(crate) fn plan_fields(text: &str) -> Option<Vec<String>> {
    use quietbench_controller::plan::{PlanError, parse_plan};
    // The error's own text: PlanError's Display clips long lines (the [fleet] list is one).
    let message = match parse_plan(text, 0) {
        Err(PlanError::Toml(error)) => error.to_string(),
        Err(other) => other.to_string(),
        Ok(_) => return None,
    };
    let rest = message
        .split(&format!("unknown field `{PROBE_KEY}`, "))
        .nth(1)?;
    let list = rest.lines().next().unwrap();
    if list.starts_with("there are no fields") {
        return Some(Vec::new());
    }
    Some(code_spans(list))
}

/// Every table of a plan file and its keys: "" is the top level, "fleet" is `[fleet]`,
/// "variant" is `[[variant]]`.
pub(crate) fn plan_tables() -> BTreeMap<String, Vec<String>> {
    let top = plan_fields(&format!("{PROBE_KEY} = 1\n"))
        .expect("the plan parser names its fields for an unknown key");
    let mut tables = BTreeMap::new();
    for key in &top {
        for form in [
            format!("{key} = {{ {PROBE_KEY} = 1 }}\n"),
            format!("{key} = [{{ {PROBE_KEY} = 1 }}]\n"),
        ] {
            if let Some(fields) = plan_fields(&form) {
                tables.insert(key.clone(), fields);
                break;
            }
        }
    }
    tables.insert(String::new(), top);
    tables
}

/// The table a docs/plans.md section documents: "Top-level fields", or a heading naming
/// `[fleet]` or `[[variant]]`.
pub(crate) fn plan_section_table(heading: &str) -> Option<String> {
    if heading.to_ascii_lowercase().starts_with("top-level fields") {
        return Some(String::new());
    }
    code_spans(heading).into_iter().find_map(|span| {
        let name = span.trim_matches(['[', ']']);
        (span.starts_with('[') && words(name).next() == Some(name)).then(|| name.to_string())
    })
}

#[test]
pub(crate) fn every_plan_key_is_documented() {
    let tables = plan_tables();
    assert!(
        tables.len() >= 3 && tables[""].len() > 10,
        "the plan parser's tables look wrong: {tables:?}"
    );
    let page = read("docs/plans.md");
    let sections = sections(&page);
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for section in &sections {
        if let Some(table) = plan_section_table(&section.heading) {
            let names = documented.entry(table).or_default();
            names.extend(section.rows.iter().flat_map(|r| r.names.iter().cloned()));
        }
    }
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for (table, keys) in &tables {
        let shown = if table.is_empty() {
            "top level".to_string()
        } else {
            format!("[{table}]")
        };
        let names = documented.get(table).cloned().unwrap_or_default();
        for key in keys {
            // A key that is itself a table is documented by its own section.
            if table.is_empty() && tables.contains_key(key) {
                if !documented.contains_key(key) {
                    missing.push(format!("[{key}] (a section headed with `[{key}]`)"));
                }
                continue;
            }
            if !names.contains(key) {
                missing.push(format!("{shown}: {key}"));
            }
        }
        for name in names.iter().filter(|n| !keys.contains(n)) {
            stale.push(format!("{shown}: {name}"));
        }
    }
    let problems = drift_report(&[
        ("Keys a plan takes that the page does not document", missing),
        ("Rows naming keys the parser refuses", stale),
    ]);
    assert!(
        problems.is_empty(),
        "docs/plans.md has drifted from the plan parser (crates/quietbench-controller/src/plan/, \
         asked through parse_plan).\n{problems}\nDocument a key as a row of the table in its \
         section (\"Top-level fields\", \"The `[fleet]` table\", ...)."
    );
}

// ---------------------------------------------------------------------------------------------
// Crates, from the root Cargo.toml.
