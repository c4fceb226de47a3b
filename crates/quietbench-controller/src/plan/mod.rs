//! Plan files: a measurement plan in TOML (hosts, rounds, variants and their parameters) read
//! into the same [`RunSettings`] the command-line flags build, so a plan can be kept next to the
//! code it measures, reviewed, and re-run exactly (its seed included). The format is documented
//! in docs/plans.md; docs/plan-example.toml is a complete plan and is parsed by the tests below.
//!
//! Every table denies unknown fields: a misspelt `warmpu = 5` silently falling back to the
//! default would measure something other than what the plan says, which is worse than an
//! error. Errors name the field and the line: syntax and type errors come from toml (which
//! shows the line), and the checks made here after decoding carry the value's position, taken
//! from [`toml::Spanned`].

mod ec2;
mod error;
mod fleet;
mod tls;
mod values;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

pub use error::{Location, PlanError};
use fleet::{FleetFile, fleet_choice};
pub use tls::{PlanTls, TokenSource};
use values::{Hosts, Number, ParamValue, Seed};

use crate::record::RunSettings;
use crate::record::figures::TrialFigure;
use crate::schedule::VariantSpec;

/// A plan, decoded and checked: what to measure, where, and when to stop.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What the run measures, fully filled (variants, seed, warm-up, timing, placement).
    pub settings: RunSettings,
    /// `hosts = "local"`: start an agent on this machine for the run.
    pub local: bool,
    /// Remote agents (HOST:PORT), in the plan's order; empty when `local`.
    pub agents: Vec<String>,
    /// Peer agents for network probes: none, one for all hosts, or one per host.
    pub peers: Vec<String>,
    /// `[fleet] hosts_file`: running agents listed in a hosts file, as the plan wrote its path
    /// (relative paths are relative to the plan's folder once [`read_plan`] resolved them).
    pub hosts_file: Option<PathBuf>,
    /// `[fleet] fail_fast = true`: stop the whole run when one host fails.
    pub fail_fast: bool,
    /// Adaptive stop: the target half-width of the 95% interval as a fraction (the file gives
    /// percent: `precision_pct = 0.5` is 0.005).
    pub precision: Option<f64>,
    /// Stop after this long whatever the interval.
    pub budget: Option<Duration>,
    /// `[tls]`: how to reach the agents over TLS (the flags win over it).
    pub tls: Option<PlanTls>,
    /// `[fleet] kind = "ec2"`: instances launched for the run.
    pub ec2: Option<crate::fleet::ec2::Ec2Spec>,
    /// `prewarm = "auto" | "always" | "never"`: which restored volumes are read whole before
    /// disk probes (`None`: the default, auto, or `--prewarm`).
    pub prewarm: Option<crate::limits::prewarm::PrewarmPolicy>,
}

/// An inclusive range, with the words an error gives for it.
struct Bounds<T> {
    min: T,
    max: T,
    words: &'static str,
}

// The same ranges as the command line's (src/cli.rs), so a plan and its flags agree.
const ROUNDS: Bounds<i64> = Bounds {
    min: 1,
    max: 100_000,
    words: "1 to 100000",
};
const WARMUP: Bounds<i64> = Bounds {
    min: 0,
    max: 1000,
    words: "0 to 1000",
};
const TRIAL_SECS: Bounds<f64> = Bounds {
    min: 0.01,
    max: 3600.0,
    words: "0.01 to 3600 seconds",
};
const BUDGET_SECS: Bounds<f64> = Bounds {
    min: 1.0,
    max: 7.0 * 86400.0,
    words: "1 to 604800 seconds (7 days)",
};
const DEFAULT_ROUNDS: u32 = 3;
const DEFAULT_DURATION_S: f64 = 3.0;
const DEFAULT_INTERVAL_S: f64 = 1.0;

/// The file as written, before the checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    /// The short form of `[fleet]`: "local" or a list of running agents.
    hosts: Option<Spanned<Hosts>>,
    peers: Option<Spanned<Vec<Spanned<String>>>>,
    fleet: Option<Spanned<FleetFile>>,
    tls: Option<Spanned<tls::TlsFile>>,
    // Integers are read wide and range-checked here, so `rounds = 0` and `rounds = -1` get the
    // same "give 1 to 100000" rather than a type error for the second.
    rounds: Option<Spanned<i64>>,
    warmup: Option<Spanned<i64>>,
    duration_s: Option<Spanned<Number>>,
    interval_s: Option<Spanned<Number>>,
    seed: Option<Seed>,
    precision_pct: Option<Spanned<Number>>,
    budget_s: Option<Spanned<Number>>,
    #[serde(default)]
    tune: bool,
    cpus: Option<Spanned<String>>,
    #[serde(default)]
    unpinned: bool,
    prewarm: Option<Spanned<String>>,
    figure: Option<Spanned<String>>,
    #[serde(default)]
    variant: Vec<VariantFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: Spanned<String>,
    probe: Spanned<String>,
    #[serde(default)]
    params: BTreeMap<String, ParamValue>,
}

/// Reads and checks the plan file at `path`; errors name the file. `default_seed` is the seed
/// when the plan gives none.
pub fn read_plan(path: &Path, default_seed: u64) -> Result<Plan, PlanError> {
    let text = quietbench_host::input::read_text(path, quietbench_host::input::MAX_INPUT_BYTES)
        .map_err(|source| PlanError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let mut plan = parse_plan(&text, default_seed).map_err(|error| PlanError::InFile {
        path: path.to_path_buf(),
        error: Box::new(error),
    })?;
    // A hosts file is found beside the plan, wherever the command runs.
    let folder = path.parent().unwrap_or(Path::new("."));
    if let Some(file) = plan.hosts_file.take() {
        plan.hosts_file = Some(folder.join(file));
    }
    plan.tls = plan.tls.take().map(|t| t.relative_to(folder));
    Ok(plan)
}

/// Decodes and checks a plan. `default_seed` is the seed when the plan gives none (the caller
/// draws a fresh one, so this stays pure).
pub fn parse_plan(text: &str, default_seed: u64) -> Result<Plan, PlanError> {
    let file: PlanFile = toml::from_str(text)?;
    let at = |span: Range<usize>| locate(text, span.start);

    let choice = fleet_choice(&file, text)?;
    let (local, agents) = match &choice.hosts {
        None => (false, Vec::new()),
        Some((Hosts::Local, _)) => (true, Vec::new()),
        Some((Hosts::Agents(list), span)) => {
            if list.is_empty() {
                return Err(PlanError::NoHosts {
                    at: at(span.clone()),
                });
            }
            (false, addresses("hosts", list, text)?)
        }
    };

    let peers = match choice.peers {
        None => Vec::new(),
        Some(list) if list.get_ref().is_empty() => Vec::new(),
        // Session::start would ignore them; saying so beats a silently different run.
        Some(list) if local => {
            return Err(PlanError::PeersWithLocal {
                at: at(list.span()),
            });
        }
        Some(list) => {
            let n = list.get_ref().len();
            // With a hosts file the count is checked once the file is read.
            if n != 1 && n != agents.len() && choice.hosts_file.is_none() {
                return Err(PlanError::PeerCount {
                    peers: n,
                    hosts: agents.len(),
                    at: at(list.span()),
                });
            }
            addresses("peers", list.get_ref(), text)?
        }
    };

    let rounds = int_in(
        "rounds",
        file.rounds.as_ref(),
        DEFAULT_ROUNDS,
        &ROUNDS,
        text,
    )?;
    let warmup = int_in("warmup", file.warmup.as_ref(), 0, &WARMUP, text)?;
    let duration_s = secs_in("duration_s", file.duration_s.as_ref(), &TRIAL_SECS, text)?
        .unwrap_or(DEFAULT_DURATION_S);
    // An interval the plan states must fit in the trial; the default one (1 s) is shortened to
    // a shorter trial, as the command line does, so `duration_s = 0.5` alone is valid.
    let interval_s = match secs_in("interval_s", file.interval_s.as_ref(), &TRIAL_SECS, text)? {
        Some(interval) if interval > duration_s => {
            return Err(PlanError::IntervalOverDuration {
                interval,
                duration: duration_s,
                at: at(file.interval_s.as_ref().map_or(0..0, Spanned::span)),
            });
        }
        Some(interval) => interval,
        None => DEFAULT_INTERVAL_S.min(duration_s),
    };
    let duration = Duration::from_secs_f64(duration_s);
    let interval = Duration::from_secs_f64(interval_s).min(duration);

    let precision = match &file.precision_pct {
        None => None,
        Some(p) => {
            let pct = p.get_ref().0;
            if !(pct > 0.0 && pct < 100.0) {
                return Err(PlanError::OutOfRange {
                    field: "precision_pct",
                    value: pct.to_string(),
                    range: "a percentage above 0 and below 100, e.g. 0.5",
                    at: at(p.span()),
                });
            }
            Some(pct / 100.0)
        }
    };
    let budget = secs_in("budget_s", file.budget_s.as_ref(), &BUDGET_SECS, text)?
        .map(Duration::from_secs_f64);

    let cpus = match &file.cpus {
        None => Vec::new(),
        Some(list) => {
            let where_ = at(list.span());
            if file.unpinned {
                return Err(PlanError::CpusWithUnpinned { at: where_ });
            }
            let cpus = quietbench_host::parse_cpu_list(list.get_ref())
                .map_err(|source| PlanError::BadCpus { at: where_, source })?;
            if cpus.is_empty() {
                return Err(PlanError::Empty {
                    field: "cpus",
                    at: where_,
                    hint: "give CPUs in the kernel's list format, e.g. \"1-3\", or leave cpus out",
                });
            }
            cpus
        }
    };

    let variants = variants(&file.variant, text)?;
    let exec_figure = match &file.figure {
        Some(f) => Some(
            TrialFigure::parse(f.get_ref()).ok_or_else(|| PlanError::BadFigure {
                given: f.get_ref().clone(),
                at: at(f.span()),
            })?,
        ),
        None => None,
    };
    let mut probes: Vec<String> = Vec::new();
    for v in &variants {
        if !probes.contains(&v.probe) {
            probes.push(v.probe.clone());
        }
    }

    Ok(Plan {
        settings: RunSettings {
            probes,
            // Parameters belong to variants in a plan; the run-wide --param map stays empty.
            params: BTreeMap::new(),
            rounds,
            duration_ms: duration.as_millis() as u64,
            // As `run` does: an interval longer than the trial is the trial (agents refuse more).
            interval_ms: interval.min(duration).as_millis() as u64,
            cpus,
            tune: file.tune,
            unpinned: file.unpinned,
            variants,
            warmup,
            seed: file.seed.map_or(default_seed, |s| s.0),
            round_sync: choice.round_sync,
            compare_figure: None,
            exec_figure,
            capacity_slo: None,
        },
        local,
        agents,
        peers,
        hosts_file: choice.hosts_file.map(PathBuf::from),
        fail_fast: choice.fail_fast,
        precision,
        budget,
        tls: match &file.tls {
            Some(table) => Some(tls::check(table, at(table.span()))?),
            None => None,
        },
        ec2: choice.ec2,
        prewarm: match &file.prewarm {
            Some(p) => Some(
                crate::limits::prewarm::PrewarmPolicy::parse(p.get_ref()).map_err(|why| {
                    PlanError::BadPrewarm {
                        why,
                        at: at(p.span()),
                    }
                })?,
            ),
            None => None,
        },
    })
}

fn variants(list: &[VariantFile], text: &str) -> Result<Vec<VariantSpec>, PlanError> {
    if list.is_empty() {
        return Err(PlanError::NoVariants);
    }
    let mut seen: Vec<(&str, Location)> = Vec::new();
    let mut out = Vec::with_capacity(list.len());
    for v in list {
        let name_at = locate(text, v.name.span().start);
        let name = v.name.get_ref();
        if name.trim().is_empty() {
            return Err(PlanError::Empty {
                field: "name",
                at: name_at,
                hint: "give the variant the name reports will show, e.g. \"baseline\"",
            });
        }
        if v.probe.get_ref().trim().is_empty() {
            return Err(PlanError::Empty {
                field: "probe",
                at: locate(text, v.probe.span().start),
                hint: "give the probe to run, e.g. \"exec\" or \"cpu.primes\"",
            });
        }
        if let Some((_, first)) = seen.iter().find(|(seen, _)| seen == name) {
            return Err(PlanError::Duplicate {
                field: "variant name",
                value: name.clone(),
                at: name_at,
                first: *first,
                hint: "reports tell variants apart by name: give each its own",
            });
        }
        seen.push((name, name_at));
        out.push(VariantSpec {
            name: name.clone(),
            probe: v.probe.get_ref().clone(),
            params: v
                .params
                .iter()
                .map(|(k, p)| (k.clone(), p.0.clone()))
                .collect(),
        });
    }
    Ok(out)
}

/// Checks a list of HOST:PORT entries, each distinct.
fn addresses(
    field: &'static str,
    list: &[Spanned<String>],
    text: &str,
) -> Result<Vec<String>, PlanError> {
    let mut seen: Vec<(&str, Location)> = Vec::new();
    for entry in list {
        let address = entry.get_ref();
        let here = locate(text, entry.span().start);
        if let Err(why) = check_address(address) {
            return Err(PlanError::BadAddress {
                field,
                address: address.clone(),
                why,
                at: here,
            });
        }
        // Only hosts must be distinct: one peer may serve several hosts.
        if field == "hosts" {
            if let Some((_, first)) = seen.iter().find(|(a, _)| a == address) {
                return Err(PlanError::Duplicate {
                    field: "host",
                    value: address.clone(),
                    at: here,
                    first: *first,
                    hint: "a host listed twice would run two trials at once on one machine: \
                           list each host once",
                });
            }
            seen.push((address, here));
        }
    }
    Ok(list.iter().map(|e| e.get_ref().clone()).collect())
}

/// HOST:PORT as the agent connection accepts it (it prefixes `http://`): a host name or IPv4
/// address, or an IPv6 address in brackets, then a port from 1 to 65535.
fn check_address(address: &str) -> Result<(), &'static str> {
    if address.chars().any(char::is_whitespace) {
        return Err("it contains a space");
    }
    let (host, port) = address.rsplit_once(':').ok_or("no :PORT")?;
    if host.is_empty() {
        return Err("no host before the ':'");
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err("an IPv6 address needs brackets, as in [::1]:7700");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err("the port must be a number from 1 to 65535"),
    }
}

fn int_in(
    field: &'static str,
    value: Option<&Spanned<i64>>,
    default: u32,
    bounds: &Bounds<i64>,
    text: &str,
) -> Result<u32, PlanError> {
    let Some(value) = value else {
        return Ok(default);
    };
    let v = *value.get_ref();
    match u32::try_from(v) {
        Ok(n) if (bounds.min..=bounds.max).contains(&v) => Ok(n),
        _ => Err(PlanError::OutOfRange {
            field,
            value: v.to_string(),
            range: bounds.words,
            at: locate(text, value.span().start),
        }),
    }
}

fn secs_in(
    field: &'static str,
    value: Option<&Spanned<Number>>,
    bounds: &Bounds<f64>,
    text: &str,
) -> Result<Option<f64>, PlanError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let secs = value.get_ref().0;
    // `contains` is false for NaN, which TOML can spell (`nan`).
    if !(bounds.min..=bounds.max).contains(&secs) {
        return Err(PlanError::OutOfRange {
            field,
            value: secs.to_string(),
            range: bounds.words,
            at: locate(text, value.span().start),
        });
    }
    Ok(Some(secs))
}

/// The line and column (1-based, columns in characters) of a byte offset.
fn locate(text: &str, offset: usize) -> Location {
    // toml's spans fall on character boundaries; `get` keeps a wrong one from panicking.
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Location {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

#[cfg(test)]
mod tests;
