//! A plan's `[fleet] kind = "ec2"`: the same fleet as `run --ec2` and its flags, with the
//! flags' names in underscores.
//!
//! ```toml
//! [fleet]
//! kind = "ec2"
//! instance_type = "c5.large"
//! count = 20
//! ami = "ami-0123456789abcdef0"
//! subnets = ["subnet-aaa", "subnet-bbb"]   # tried in order when one has no capacity
//! allow_from = ["203.0.113.7/32"]
//! cpu_model = "8275CL"
//! cpu_policy = "select"
//! ttl = "2h"
//! ```

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::error::{Location, PlanError};
use crate::fleet::ec2::{CpuPolicy, Ec2Spec, PlacementStrategy, Tenancy};

/// The EC2 fields of `[fleet]`, as written (all optional here: which are required depends on
/// the kind, checked in [`spec`]).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Ec2Fields {
    pub instance_type: Option<Spanned<String>>,
    pub count: Option<Spanned<i64>>,
    pub ami: Option<Spanned<String>>,
    pub subnets: Option<Spanned<Vec<String>>>,
    pub security_groups: Option<Spanned<Vec<String>>>,
    pub allow_from: Option<Spanned<Vec<String>>>,
    pub key_name: Option<Spanned<String>>,
    pub region: Option<Spanned<String>>,
    pub profile: Option<Spanned<String>>,
    pub endpoint_url: Option<Spanned<String>>,
    pub placement: Option<Spanned<String>>,
    pub tenancy: Option<Spanned<String>>,
    pub threads_per_core: Option<Spanned<i64>>,
    pub cpu_model: Option<Spanned<String>>,
    pub cpu_policy: Option<Spanned<String>>,
    pub max_rerolls: Option<Spanned<i64>>,
    pub stratify: Option<Spanned<bool>>,
    pub ttl: Option<Spanned<String>>,
    pub boot_timeout: Option<Spanned<String>>,
    pub keep: Option<Spanned<bool>>,
    pub ca_dir: Option<Spanned<String>>,
}

impl Ec2Fields {
    /// The span of the first EC2 field given, for "not a field of this kind".
    pub fn first_given(&self) -> Option<(&'static str, Range<usize>)> {
        macro_rules! first {
            ($($f:ident),*) => {
                $(if let Some(v) = &self.$f { return Some((stringify!($f), v.span())); })*
            };
        }
        first!(
            instance_type,
            count,
            ami,
            subnets,
            security_groups,
            allow_from,
            key_name,
            region,
            profile,
            endpoint_url,
            placement,
            tenancy,
            threads_per_core,
            cpu_model,
            cpu_policy,
            max_rerolls,
            stratify,
            ttl,
            boot_timeout,
            keep,
            ca_dir
        );
        None
    }
}

/// Checks the EC2 fields into a spec; `table` is where `[fleet]` is, `at` turns a span into a
/// line and column.
pub(super) fn spec(
    f: &Ec2Fields,
    table: Location,
    at: &dyn Fn(Range<usize>) -> Location,
) -> Result<Ec2Spec, PlanError> {
    let bad = |why: String, span: Range<usize>| PlanError::Ec2 { why, at: at(span) };
    let required = |field: &'static str, v: &Option<Spanned<String>>| match v {
        Some(v) => Ok(v.get_ref().clone()),
        None => Err(PlanError::Ec2 {
            why: format!("{field} is required (see docs/ec2.md)"),
            at: table,
        }),
    };
    let instance_type = required("instance_type", &f.instance_type)?;
    let ami = required("ami", &f.ami)?;
    let count = match &f.count {
        None => 1,
        Some(c) => u32::try_from(*c.get_ref())
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| bad("count: give 1 to 1000 instances".into(), c.span()))?,
    };
    let mut spec = Ec2Spec::new(&instance_type, count, &ami);
    let list = |v: &Option<Spanned<Vec<String>>>| v.as_ref().map(|l| l.get_ref().clone());
    let text = |v: &Option<Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
    spec.subnets = list(&f.subnets).unwrap_or_default();
    spec.security_groups = list(&f.security_groups).unwrap_or_default();
    spec.allow_from = list(&f.allow_from).unwrap_or_default();
    spec.key_name = text(&f.key_name);
    spec.region = text(&f.region);
    spec.profile = text(&f.profile);
    spec.endpoint_url = text(&f.endpoint_url);
    spec.cpu_model = text(&f.cpu_model);
    spec.ca_dir = text(&f.ca_dir).map(Into::into);
    spec.stratify = f.stratify.as_ref().is_some_and(|b| *b.get_ref());
    spec.keep = f.keep.as_ref().is_some_and(|b| *b.get_ref());
    if let Some(p) = &f.placement {
        spec.placement = Some(PlacementStrategy::parse(p.get_ref()).map_err(|e| bad(e, p.span()))?);
    }
    if let Some(t) = &f.tenancy {
        spec.tenancy = Tenancy::parse(t.get_ref()).map_err(|e| bad(e, t.span()))?;
    }
    if let Some(p) = &f.cpu_policy {
        spec.cpu_policy = CpuPolicy::parse(p.get_ref()).map_err(|e| bad(e, p.span()))?;
    }
    if let Some(n) = &f.threads_per_core {
        spec.threads_per_core = Some(
            u32::try_from(*n.get_ref())
                .map_err(|_| bad("threads_per_core: give 1 or 2".into(), n.span()))?,
        );
    }
    if let Some(n) = &f.max_rerolls {
        spec.max_rerolls = u32::try_from(*n.get_ref())
            .map_err(|_| bad("max_rerolls: give 1 to 50".into(), n.span()))?;
    }
    let duration = |v: &Spanned<String>, field: &str| -> Result<Duration, PlanError> {
        humantime::parse_duration(v.get_ref()).map_err(|e| {
            bad(
                format!("{field} = {:?}: {e} (e.g. \"2h\", \"90m\")", v.get_ref()),
                v.span(),
            )
        })
    };
    if let Some(t) = &f.ttl {
        spec.ttl = duration(t, "ttl")?;
    }
    if let Some(t) = &f.boot_timeout {
        spec.boot_timeout = duration(t, "boot_timeout")?;
    }
    // What the flags' checks say, at the table's line (the fields' own checks came first).
    spec.check().map_err(|why| PlanError::Ec2 {
        why: plan_words(&why),
        at: table,
    })?;
    Ok(spec)
}

/// A flag check's message in a plan's words: `--max-rerolls` is `max_rerolls` here.
fn plan_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let flag = &rest[i + 2..];
        let end = flag
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(flag.len());
        out.push_str(&flag[..end].replace('-', "_"));
        rest = &flag[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn flag_names_become_field_names() {
        assert_eq!(
            super::plan_words("--max-rerolls 0: give 1 to 50 (ami-1 stays)"),
            "max_rerolls 0: give 1 to 50 (ami-1 stays)"
        );
    }
}
