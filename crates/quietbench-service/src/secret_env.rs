//! `env.NAME=VALUE` parameters of exec probes (and of http, whose server gets them): values a
//! command gets in its environment, often tokens. The service never stores, lists nor streams them. They are taken out of the run's
//! parameters (and its plan) before anything is written; the service keeps them in memory only
//! and gives them to the run's process in its environment, which its local agent, and so the
//! command, inherits. A process's environment is readable by its own user and root only; its
//! command line, by everyone, and its parameters go to the store.
//!
//! What that costs, and why: one value per name for the whole run (a process has one
//! environment), only on the service's own machine (an agent elsewhere has its own
//! environment: the value would have to travel as a parameter, which the run stores), and a
//! run whose values were lost when the service restarted cannot go on. Passing them as
//! parameters and redacting the store was rejected: the run's process writes the store, and
//! resuming a run reads its parameters back from it.

use std::collections::BTreeMap;
use std::fmt;

use tonic::Status;

/// What the service shows in place of a value.
pub const REDACTED: &str = "<redacted>";
/// The prefix of an exec probe's environment parameters.
pub const PREFIX: &str = "env.";

/// A run's `env.*` values, by variable name. Never printed: `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvValues(BTreeMap<String, String>);

impl fmt::Debug for EnvValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, REDACTED)))
            .finish()
    }
}

impl EnvValues {
    /// No values.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The variables and their values, for the run's process.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The names, each with [`REDACTED`]: what the service keeps and shows.
    pub fn redacted(&self) -> BTreeMap<String, String> {
        self.0
            .keys()
            .map(|k| (k.clone(), REDACTED.to_string()))
            .collect()
    }
}

/// One workload of a run that may carry `env.*` parameters: a plan's variant, the probes of
/// `run`'s options, or a control.
pub struct Workload<'a> {
    /// What a message calls it ("variant 'a'", "the control").
    pub label: String,
    /// Its probe.
    pub probe: &'a str,
    /// Its parameters.
    pub params: &'a BTreeMap<String, String>,
}

/// The `env.*` values of a run's workloads. Every exec workload must set the same ones (they
/// go to one environment), and only exec workloads may set any.
pub fn collect(workloads: &[Workload<'_>]) -> Result<EnvValues, Status> {
    let of = |w: &Workload<'_>| -> BTreeMap<String, String> {
        w.params
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(PREFIX).map(|n| (n.to_string(), v.clone())))
            .collect()
    };
    let mut first: Option<(&Workload<'_>, BTreeMap<String, String>)> = None;
    for w in workloads {
        let env = of(w);
        if !super::policy::COMMAND_PROBES.contains(&w.probe) {
            if let Some(name) = env.keys().next() {
                return Err(Status::invalid_argument(format!(
                    "{} runs {}, which has no parameter env.{name}: env.* parameters are the \
                     exec probe's (and the http and tcp probes' server's)",
                    w.label, w.probe
                )));
            }
            continue;
        }
        match &first {
            None => first = Some((w, env)),
            Some((seen, seen_env)) if *seen_env != env => {
                return Err(Status::invalid_argument(format!(
                    "{} and {} set different env.* values: the service gives them to the \
                     run's environment, one value per name for the whole run (it never stores \
                     them as parameters); set the same ones on every exec workload, or submit \
                     separate runs",
                    seen.label, w.label
                )));
            }
            Some(_) => {}
        }
    }
    let env = first.map(|(_, env)| env).unwrap_or_default();
    for (name, value) in &env {
        check_variable(name, value)?;
    }
    Ok(EnvValues(env))
}

/// A variable the service can set in a run's environment.
fn check_variable(name: &str, value: &str) -> Result<(), Status> {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Err(Status::invalid_argument(format!(
            "env.{name}: a variable name is letters, digits and '_', not starting with a digit"
        )));
    }
    // The run's own process reads these (its store, its logging): a client must not steer it.
    if name.starts_with("QUIETBENCH_") {
        return Err(Status::invalid_argument(format!(
            "env.{name}: QUIETBENCH_* variables are the service's own and cannot be set for a \
             run's command"
        )));
    }
    if value.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "env.{name} holds a NUL byte"
        )));
    }
    Ok(())
}

/// `params` without its `env.*` entries.
pub fn without_env(params: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    params
        .iter()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A plan's TOML without the `env.*` entries of its variants' `params`, or `None` when it has
/// none (the plan then goes to the run exactly as written). The plan is written again from its
/// parsed form: comments and layout go, meaning stays (the caller checks that it parses to the
/// same plan).
pub fn strip_plan(text: &str) -> Result<Option<String>, String> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut removed = false;
    if let Some(toml::Value::Array(variants)) = table.get_mut("variant") {
        for variant in variants {
            if let Some(toml::Value::Table(params)) =
                variant.as_table_mut().and_then(|v| v.get_mut("params"))
            {
                let before = params.len();
                params.retain(|k, _| !k.starts_with(PREFIX));
                removed |= params.len() != before;
            }
        }
    }
    Ok(removed.then(|| write_toml(&table)))
}

/// TOML text for `table`: its plain values, then its tables and arrays of tables as sections,
/// anything deeper inline. (The toml crate is built here without its writer.)
fn write_toml(table: &toml::Table) -> String {
    let is_section = |v: &toml::Value| matches!(v, toml::Value::Table(_));
    let is_table_array = |v: &toml::Value| match v {
        toml::Value::Array(items) => {
            !items.is_empty() && items.iter().all(|i| matches!(i, toml::Value::Table(_)))
        }
        _ => false,
    };
    let mut out = String::new();
    let lines = |out: &mut String, t: &toml::Table| {
        for (k, v) in t {
            out.push_str(&format!("{} = {}\n", key(k), inline(v)));
        }
    };
    let plain: toml::Table = table
        .iter()
        .filter(|(_, v)| !is_section(v) && !is_table_array(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    lines(&mut out, &plain);
    for (k, v) in table {
        if let toml::Value::Table(t) = v {
            out.push_str(&format!("\n[{}]\n", key(k)));
            lines(&mut out, t);
        }
    }
    for (k, v) in table {
        if is_table_array(v)
            && let toml::Value::Array(items) = v
        {
            for item in items {
                if let toml::Value::Table(t) = item {
                    out.push_str(&format!("\n[[{}]]\n", key(k)));
                    lines(&mut out, t);
                }
            }
        }
    }
    out
}

fn key(k: &str) -> String {
    quoted(k)
}

fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => quoted(s),
        toml::Value::Integer(i) => i.to_string(),
        // Debug, not Display: 2.0 stays a float ("2.0"), where Display would make it "2".
        toml::Value::Float(f) if f.is_nan() => "nan".into(),
        toml::Value::Float(f) => format!("{f:?}"),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(items) => format!(
            "[{}]",
            items.iter().map(inline).collect::<Vec<_>>().join(", ")
        ),
        toml::Value::Table(t) => format!(
            "{{ {} }}",
            t.iter()
                .map(|(k, v)| format!("{} = {}", key(k), inline(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn workload<'a>(label: &str, probe: &'a str, p: &'a BTreeMap<String, String>) -> Workload<'a> {
        Workload {
            label: label.into(),
            probe,
            params: p,
        }
    }

    #[test]
    fn values_are_collected_once_and_never_printed() {
        let a = params(&[("cmd", "true"), ("env.API_TOKEN", "s3cret")]);
        let b = params(&[("cmd", "false"), ("env.API_TOKEN", "s3cret")]);
        let primes = params(&[("max_prime", "100")]);
        let env = collect(&[
            workload("variant 'a'", "exec", &a),
            workload("variant 'p'", "cpu.primes", &primes),
            workload("variant 'b'", "exec", &b),
        ])
        .unwrap();
        assert_eq!(env.iter().collect::<Vec<_>>(), [("API_TOKEN", "s3cret")]);
        assert_eq!(
            env.redacted(),
            params(&[("API_TOKEN", REDACTED)]),
            "names only"
        );
        let shown = format!("{env:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("API_TOKEN"),
            "{shown}"
        );
        assert_eq!(without_env(&a), params(&[("cmd", "true")]));
        assert!(
            collect(&[workload("x", "exec", &params(&[]))])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn values_that_one_environment_cannot_hold_are_refused_with_the_reason() {
        let a = params(&[("env.X", "1")]);
        let b = params(&[("env.X", "2")]);
        let none = params(&[]);
        for (workloads, expected) in [
            (
                vec![
                    workload("variant 'a'", "exec", &a),
                    workload("variant 'b'", "exec", &b),
                ],
                "variant 'a' and variant 'b' set different env.* values",
            ),
            (
                vec![
                    workload("variant 'a'", "exec", &a),
                    workload("variant 'c'", "exec", &none),
                ],
                "set different env.* values",
            ),
            (
                vec![workload("the probes", "cpu.primes", &a)],
                "the probes runs cpu.primes, which has no parameter env.X",
            ),
        ] {
            let err = collect(&workloads).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().contains(expected), "{}", err.message());
        }
        for (name, expected) in [
            ("QUIETBENCH_DB", "the service's own"),
            ("1X", "letters, digits"),
            ("A-B", "letters, digits"),
        ] {
            let p = params(&[(&format!("env.{name}"), "v")]);
            let err = collect(&[workload("w", "exec", &p)]).unwrap_err();
            assert!(
                err.message().contains(expected),
                "{name}: {}",
                err.message()
            );
        }
    }

    #[test]
    fn a_plan_loses_its_env_entries_and_keeps_everything_else() {
        let plan = "# a comment\nhosts = \"local\"\nrounds = 2\nduration_s = 2.0\n\
                    [[variant]]\nname = \"a\"\nprobe = \"exec\"\n\
                    params = { cmd = \"sh -c 'echo \\\"$T\\\"'\", \"env.T\" = \"s3cret\", threads = 1 }\n\
                    [[variant]]\nname = \"b\"\nprobe = \"cpu.primes\"\n";
        let stripped = strip_plan(plan).unwrap().unwrap();
        assert!(
            !stripped.contains("s3cret") && !stripped.contains("env."),
            "{stripped}"
        );
        let before = quietbench_controller::plan::parse_plan(plan, 7).unwrap();
        let after = quietbench_controller::plan::parse_plan(&stripped, 7).unwrap();
        let mut expected = before.clone();
        for v in &mut expected.settings.variants {
            v.params = without_env(&v.params);
        }
        assert_eq!(format!("{after:?}"), format!("{expected:?}"), "{stripped}");
        assert_eq!(
            after.settings.variants[0].params["cmd"],
            "sh -c 'echo \"$T\"'"
        );
        // Nothing to take out: the plan goes as written, comments and all.
        assert_eq!(strip_plan("rounds = 1\n").unwrap(), None);
        assert!(strip_plan("rounds = ").is_err());
    }
}
