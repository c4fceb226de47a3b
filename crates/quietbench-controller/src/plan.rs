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

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quietbench_host::CpuListError;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Unexpected, Visitor};
use toml::Spanned;

use crate::record::RunSettings;
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
}

/// A position in the plan file, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// A plan that cannot be read or is not a valid plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The plan file could not be read.
    #[error("cannot read plan file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The plan file was read but is not a valid plan.
    // The inner message is part of this one, and deliberately not a `source`: reports print
    // the chain, and the detail would appear twice.
    #[error("plan file {}: {error}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        error: Box<PlanError>,
    },
    /// Not TOML, a field plans do not have, a missing field, or a value of the wrong type.
    /// toml's message gives the line and column and quotes the line (its trailing newline is
    /// trimmed so the message ends where others do).
    #[error("{}", .0.to_string().trim_end())]
    Toml(#[from] toml::de::Error),
    /// No `[[variant]]` table.
    #[error(
        "the plan has no [[variant]]: add at least one, with a name and a probe \
         (see docs/plans.md)"
    )]
    NoVariants,
    /// A value given twice where each must be distinct (variant names, hosts).
    #[error("{at}: {field} {value:?} is given twice (first at {first}): {hint}")]
    Duplicate {
        /// The field.
        field: &'static str,
        /// The repeated value.
        value: String,
        /// The second occurrence.
        at: Location,
        /// The first occurrence.
        first: Location,
        /// What to do.
        hint: &'static str,
    },
    /// A text field that must not be empty is.
    #[error("{at}: {field} is empty: {hint}")]
    Empty {
        /// The field.
        field: &'static str,
        /// Where.
        at: Location,
        /// What to give.
        hint: &'static str,
    },
    /// A number outside its range.
    #[error("{at}: {field} = {value} is out of range: give {range}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value, as given.
        value: String,
        /// The allowed range, in words.
        range: &'static str,
        /// Where.
        at: Location,
    },
    /// An explicit reporting interval longer than the trial.
    #[error(
        "{at}: interval_s = {interval} is longer than duration_s = {duration}: give an \
         interval up to the trial's duration, or leave interval_s out"
    )]
    IntervalOverDuration {
        /// interval_s.
        interval: f64,
        /// duration_s.
        duration: f64,
        /// Where interval_s is.
        at: Location,
    },
    /// A host or peer that is not HOST:PORT.
    #[error("{at}: {field} entry {address:?} is not HOST:PORT ({why}), e.g. \"10.0.0.5:7700\"")]
    BadAddress {
        /// `hosts` or `peers`.
        field: &'static str,
        /// The entry.
        address: String,
        /// What is wrong with it.
        why: &'static str,
        /// Where.
        at: Location,
    },
    /// `hosts = []`.
    #[error("{at}: hosts is an empty list: give \"local\" or at least one \"HOST:PORT\"")]
    NoHosts {
        /// Where.
        at: Location,
    },
    /// Neither one peer for all hosts nor one per host.
    #[error(
        "{at}: {peers} peers for {hosts} hosts: give no peer, one for all hosts, or one per \
         host in the hosts' order"
    )]
    PeerCount {
        /// Peers given.
        peers: usize,
        /// Hosts given.
        hosts: usize,
        /// Where peers is.
        at: Location,
    },
    /// Peers named for a local run, which starts its own.
    #[error(
        "{at}: peers are for remote hosts; with hosts = \"local\" quietbench starts its own \
         peer agent: remove peers"
    )]
    PeersWithLocal {
        /// Where peers is.
        at: Location,
    },
    /// Hosts given both at the top level and in `[fleet]`.
    #[error("{at}: {field} is given both at the top level and in [fleet]: keep one")]
    GivenTwice {
        /// The field.
        field: &'static str,
        /// Where the second one is.
        at: Location,
    },
    /// No hosts at all.
    #[error(
        "the plan names no hosts: give hosts = \"local\" or hosts = [\"HOST:PORT\", ...], or a \
         [fleet] table with kind = \"local\" or \"static\" (see docs/plans.md)"
    )]
    NoFleet,
    /// A `[fleet]` kind this build does not have.
    #[error(
        "{at}: [fleet] kind = {kind:?} is not a fleet kind: give \"local\" (agents started \
         here) or \"static\" (running agents: hosts or hosts_file)"
    )]
    FleetKind {
        /// The kind given.
        kind: String,
        /// Where.
        at: Location,
    },
    /// A `[fleet]` table whose fields do not fit its kind.
    #[error("{at}: [fleet] kind = {kind:?}: {why}")]
    FleetFields {
        /// The kind.
        kind: &'static str,
        /// What is wrong.
        why: &'static str,
        /// Where the table is.
        at: Location,
    },
    /// `cpus` is not in the kernel's list format.
    #[error("{at}: cpus: {source}")]
    BadCpus {
        /// Where.
        at: Location,
        /// What is wrong with the list.
        source: CpuListError,
    },
    /// `cpus` and `unpinned = true` together.
    #[error(
        "{at}: cpus pins probe threads and unpinned = true lets the scheduler place them: \
         give one or the other"
    )]
    CpusWithUnpinned {
        /// Where cpus is.
        at: Location,
    },
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
    #[serde(default)]
    variant: Vec<VariantFile>,
}

/// `[fleet]`: where the hosts come from, and how the run treats them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    kind: Spanned<String>,
    hosts: Option<Spanned<Vec<Spanned<String>>>>,
    hosts_file: Option<Spanned<String>>,
    peers: Option<Spanned<Vec<Spanned<String>>>>,
    round_sync: Option<bool>,
    #[serde(default)]
    fail_fast: bool,
}

/// The hosts a plan names, from `hosts` or `[fleet]`, before the address checks.
struct FleetChoice<'a> {
    hosts: Option<(Hosts, Range<usize>)>,
    hosts_file: Option<String>,
    peers: Option<&'a Spanned<Vec<Spanned<String>>>>,
    round_sync: bool,
    fail_fast: bool,
}

/// Reads `hosts`/`peers` and `[fleet]` into one choice, refusing a plan that names hosts twice
/// or gives a fleet fields its kind does not have.
fn fleet_choice<'a>(file: &'a PlanFile, text: &str) -> Result<FleetChoice<'a>, PlanError> {
    let at = |span: Range<usize>| locate(text, span.start);
    let Some(fleet) = &file.fleet else {
        let Some(hosts) = &file.hosts else {
            return Err(PlanError::NoFleet);
        };
        let list = match hosts.get_ref() {
            Hosts::Local => Hosts::Local,
            Hosts::Agents(list) => Hosts::Agents(list.clone()),
        };
        return Ok(FleetChoice {
            hosts: Some((list, hosts.span())),
            hosts_file: None,
            peers: file.peers.as_ref(),
            round_sync: true,
            fail_fast: false,
        });
    };
    let table = fleet.get_ref();
    for (given, field) in [
        (file.hosts.as_ref().map(Spanned::span), "hosts"),
        (file.peers.as_ref().map(Spanned::span), "peers"),
    ] {
        if let Some(span) = given {
            return Err(PlanError::GivenTwice {
                field,
                at: at(span),
            });
        }
    }
    let fields = |kind: &'static str, why: &'static str| PlanError::FleetFields {
        kind,
        why,
        at: at(fleet.span()),
    };
    let hosts = match table.kind.get_ref().as_str() {
        "local" => {
            if table.hosts.is_some() || table.hosts_file.is_some() || table.peers.is_some() {
                return Err(fields(
                    "local",
                    "a local fleet starts its own agent (and peer): remove hosts, hosts_file \
                     and peers",
                ));
            }
            Some((Hosts::Local, table.kind.span()))
        }
        "static" => match (&table.hosts, &table.hosts_file) {
            (Some(_), Some(_)) => {
                return Err(fields("static", "give hosts or hosts_file, not both"));
            }
            (None, None) => {
                return Err(fields(
                    "static",
                    "name the running agents: hosts = [\"HOST:PORT\", ...] or \
                     hosts_file = \"FILE\"",
                ));
            }
            (Some(list), None) => Some((Hosts::Agents(list.get_ref().clone()), list.span())),
            (None, Some(_)) => None,
        },
        other => {
            return Err(PlanError::FleetKind {
                kind: other.to_string(),
                at: at(table.kind.span()),
            });
        }
    };
    Ok(FleetChoice {
        hosts,
        hosts_file: table.hosts_file.as_ref().map(|f| f.get_ref().clone()),
        peers: table.peers.as_ref(),
        round_sync: table.round_sync.unwrap_or(true),
        fail_fast: table.fail_fast,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: Spanned<String>,
    probe: Spanned<String>,
    #[serde(default)]
    params: BTreeMap<String, ParamValue>,
}

/// `hosts`: the word "local" or a list of addresses.
#[derive(Debug)]
enum Hosts {
    Local,
    Agents(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for Hosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HostsVisitor;
        impl<'de> Visitor<'de> for HostsVisitor {
            type Value = Hosts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#""local" or a list of "HOST:PORT" strings, e.g. ["10.0.0.5:7700"]"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Hosts, E> {
                if v == "local" {
                    Ok(Hosts::Local)
                } else {
                    Err(E::invalid_value(Unexpected::Str(v), &self))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Hosts, A::Error> {
                let mut agents = Vec::new();
                while let Some(agent) = seq.next_element()? {
                    agents.push(agent);
                }
                Ok(Hosts::Agents(agents))
            }
        }
        d.deserialize_any(HostsVisitor)
    }
}

/// A number of seconds or a percentage: TOML has integers and floats, and `budget_s = 600`
/// should not be a type error for want of `600.0`.
#[derive(Debug, Clone, Copy)]
struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl Visitor<'_> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
        }
        d.deserialize_any(NumberVisitor)
    }
}

/// `seed`: an integer, or a string of digits for seeds above 2^63 - 1, which TOML integers
/// cannot hold but random seeds (and so the seeds reports record) often are.
#[derive(Debug, Clone, Copy)]
struct Seed(u64);

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SeedVisitor;
        impl Visitor<'_> for SeedVisitor {
            type Value = Seed;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an integer from 0 to 18446744073709551615 (write seeds above \
                     9223372036854775807 as a string, e.g. \"18000000000000000000\")",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seed, E> {
                u64::try_from(v)
                    .map(Seed)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seed, E> {
                Ok(Seed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seed, E> {
                v.parse()
                    .map(Seed)
                    .map_err(|_| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(SeedVisitor)
    }
}

/// A probe parameter: agents take parameters as text, so TOML's scalars are written out as
/// text (`threads = 2` is "2", `shell = true` is "true"); the agent checks them against the
/// probe. Arrays, tables and dates are refused here, where the error can name the line.
#[derive(Debug, Clone)]
struct ParamValue(String);

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ParamVisitor;
        impl Visitor<'_> for ParamVisitor {
            type Value = ParamValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a probe parameter: a string, integer, float or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            // Display, not Debug: 2.5 is "2.5" and 2.0 is "2", never "2.0" or "2.5e0".
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
        }
        d.deserialize_any(ParamVisitor)
    }
}

/// Reads and checks the plan file at `path`; errors name the file. `default_seed` is the seed
/// when the plan gives none.
pub fn read_plan(path: &Path, default_seed: u64) -> Result<Plan, PlanError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut plan = parse_plan(&text, default_seed).map_err(|error| PlanError::InFile {
        path: path.to_path_buf(),
        error: Box::new(error),
    })?;
    // A hosts file is found beside the plan, wherever the command runs.
    if let Some(file) = plan.hosts_file.take() {
        let folder = path.parent().unwrap_or(Path::new("."));
        plan.hosts_file = Some(folder.join(file));
    }
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
            interval_ms: interval.as_millis() as u64,
            cpus,
            tune: file.tune,
            unpinned: file.unpinned,
            variants,
            warmup,
            seed: file.seed.map_or(default_seed, |s| s.0),
            round_sync: choice.round_sync,
            compare_figure: None,
        },
        local,
        agents,
        peers,
        hosts_file: choice.hosts_file.map(PathBuf::from),
        fail_fast: choice.fail_fast,
        precision,
        budget,
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
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../docs/plan-example.toml");

    /// A valid plan with `extra` top-level lines inserted after `hosts` (so line numbers in the
    /// tests below are known: `extra`'s first line is line 2).
    fn plan_with(extra: &str) -> String {
        format!("hosts = \"local\"\n{extra}\n[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n")
    }

    fn error(text: &str) -> PlanError {
        parse_plan(text, 7).expect_err("the plan should be refused")
    }

    fn message(text: &str) -> String {
        error(text).to_string()
    }

    fn at(line: usize, column: usize) -> Location {
        Location { line, column }
    }

    #[test]
    fn the_example_plan_parses_to_its_settings() {
        let plan = parse_plan(EXAMPLE, 7).unwrap();
        assert!(plan.local);
        assert!(plan.agents.is_empty());
        assert!(plan.peers.is_empty());
        assert_eq!(plan.precision, Some(0.005));
        assert_eq!(plan.budget, Some(Duration::from_secs(600)));
        let s = &plan.settings;
        assert_eq!(s.probes, ["exec"]);
        assert!(s.params.is_empty());
        assert_eq!(s.rounds, 20);
        assert_eq!(s.warmup, 2);
        assert_eq!(s.duration_ms, 3000);
        assert_eq!(s.interval_ms, 1000);
        assert_eq!(s.seed, 42);
        assert_eq!(s.cpus, [1, 2, 3]);
        assert!(!s.tune);
        assert!(!s.unpinned);
        let cmd = |c: &str| BTreeMap::from([("cmd".to_string(), c.to_string())]);
        assert_eq!(
            s.variants,
            [
                VariantSpec {
                    name: "baseline".into(),
                    probe: "exec".into(),
                    params: cmd("gzip -k -f big.txt"),
                },
                VariantSpec {
                    name: "candidate".into(),
                    probe: "exec".into(),
                    params: cmd("pigz -k -f big.txt"),
                },
            ]
        );
    }

    #[test]
    fn leaves_out_take_the_command_lines_defaults_and_the_callers_seed() {
        let plan = parse_plan(&plan_with(""), 99).unwrap();
        let s = &plan.settings;
        assert_eq!(s.seed, 99);
        assert_eq!((s.rounds, s.warmup), (3, 0));
        assert_eq!((s.duration_ms, s.interval_ms), (3000, 1000));
        assert!(s.cpus.is_empty() && !s.tune && !s.unpinned);
        assert_eq!(s.probes, ["cpu.primes"]);
        assert!(s.variants[0].params.is_empty());
        assert_eq!((plan.precision, plan.budget), (None, None));
    }

    #[test]
    fn the_default_interval_shortens_to_a_short_trial() {
        let s = parse_plan(&plan_with("duration_s = 0.25"), 0)
            .unwrap()
            .settings;
        assert_eq!((s.duration_ms, s.interval_ms), (250, 250));
    }

    #[test]
    fn integer_seconds_and_string_seeds_are_accepted() {
        let plan = parse_plan(
            &plan_with("duration_s = 2\ninterval_s = 2\nseed = \"18446744073709551615\""),
            0,
        )
        .unwrap();
        assert_eq!(plan.settings.duration_ms, 2000);
        assert_eq!(plan.settings.interval_ms, 2000);
        assert_eq!(plan.settings.seed, u64::MAX);
    }

    #[test]
    fn probes_are_distinct_in_order_and_params_become_text() {
        let text = r#"
hosts = ["10.0.0.5:7700", "[fe80::1]:7700", "db-1.internal:7700"]
peers = ["10.0.0.9:7700"]
[[variant]]
name = "small"
probe = "cpu.primes"
params = { max_prime = 20000, threads = 2, ratio = 2.5, whole = 2.0, shell = true, mode = "x" }
[[variant]]
name = "read"
probe = "disk.read"
[[variant]]
name = "big"
probe = "cpu.primes"
"#;
        let plan = parse_plan(text, 0).unwrap();
        assert!(!plan.local);
        assert_eq!(
            plan.agents,
            ["10.0.0.5:7700", "[fe80::1]:7700", "db-1.internal:7700"]
        );
        assert_eq!(plan.peers, ["10.0.0.9:7700"]);
        assert_eq!(plan.settings.probes, ["cpu.primes", "disk.read"]);
        let params: Vec<(&str, &str)> = plan.settings.variants[0]
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            params,
            [
                ("max_prime", "20000"),
                ("mode", "x"),
                ("ratio", "2.5"),
                ("shell", "true"),
                ("threads", "2"),
                ("whole", "2"),
            ]
        );
    }

    #[test]
    fn params_can_be_a_sub_table() {
        // The form docs/plans.md shows.
        let text = "hosts = \"local\"\n[[variant]]\nname = \"4 threads\"\n\
                    probe = \"cpu.primes\"\n[variant.params]\nthreads = 4\nmax_prime = 20000\n";
        let params = &parse_plan(text, 0).unwrap().settings.variants[0].params;
        assert_eq!(params["threads"], "4");
        assert_eq!(params["max_prime"], "20000");
    }

    #[test]
    fn one_peer_per_host_is_accepted() {
        let text = "hosts = [\"a:1\", \"b:1\"]\npeers = [\"c:1\", \"d:1\"]\n\
                    [[variant]]\nname = \"n\"\nprobe = \"net.tcp_rr\"\n";
        assert_eq!(parse_plan(text, 0).unwrap().peers, ["c:1", "d:1"]);
    }

    #[test]
    fn unknown_fields_are_errors_that_name_the_field_and_line() {
        let msg = message(&plan_with("rounds = 5\nwarmpu = 2"));
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("unknown field `warmpu`"), "{msg}");
        assert!(
            msg.contains("`warmup`"),
            "lists the fields it expected: {msg}"
        );

        let msg = message(&format!("{}paramz = {{ cmd = \"true\" }}\n", plan_with("")));
        assert!(msg.contains("line 6"), "{msg}");
        assert!(msg.contains("unknown field `paramz`"), "{msg}");
    }

    #[test]
    fn wrong_types_and_missing_fields_name_the_line() {
        let msg = message(&plan_with("rounds = \"five\""));
        assert!(
            msg.contains("line 2") && msg.contains("invalid type"),
            "{msg}"
        );

        let msg = message("[[variant]]\nname = \"a\"\nprobe = \"exec\"\n");
        // hosts may come from [fleet] instead, so its absence is one sentence naming both.
        assert!(
            msg.contains("names no hosts") && msg.contains("[fleet]"),
            "{msg}"
        );

        let msg = message(&format!(
            "{}params = {{ cmd = [\"a\", \"b\"] }}\n",
            plan_with("")
        ));
        assert!(msg.contains("line 6"), "{msg}");
        assert!(msg.contains("string, integer, float or boolean"), "{msg}");

        let msg = message(&plan_with("seed = -1"));
        assert!(msg.contains("line 2") && msg.contains("-1"), "{msg}");

        let msg = message("hosts = \"remote\"\n");
        assert!(
            msg.contains("line 1") && msg.contains("\"local\" or a list"),
            "{msg}"
        );

        let msg = message("this is not toml");
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn a_plan_needs_a_variant() {
        assert!(matches!(
            error("hosts = \"local\"\n"),
            PlanError::NoVariants
        ));
        assert!(message("hosts = \"local\"\n").contains("[[variant]]"));
    }

    #[test]
    fn variant_names_are_unique_and_fields_not_empty() {
        let twice = format!(
            "{}[[variant]]\nname = \"a\"\nprobe = \"exec\"\n",
            plan_with("")
        );
        match error(&twice) {
            PlanError::Duplicate {
                field,
                value,
                at: second,
                first,
                ..
            } => {
                assert_eq!((field, value.as_str()), ("variant name", "a"));
                assert_eq!((first, second), (at(4, 8), at(7, 8)));
            }
            other => panic!("{other}"),
        }
        assert!(message(&twice).contains("line 7, column 8"));

        let no_name = "hosts = \"local\"\n[[variant]]\nname = \" \"\nprobe = \"exec\"\n";
        assert!(matches!(
            error(no_name),
            PlanError::Empty { field: "name", at: l, .. } if l == at(3, 8)
        ));
        let no_probe = "hosts = \"local\"\n[[variant]]\nname = \"a\"\nprobe = \"\"\n";
        assert!(matches!(
            error(no_probe),
            PlanError::Empty { field: "probe", at: l, .. } if l == at(4, 9)
        ));
    }

    #[test]
    fn numbers_out_of_range_say_the_range_and_line() {
        for (line, field, range) in [
            ("rounds = 0", "rounds", "1 to 100000"),
            ("rounds = 100001", "rounds", "1 to 100000"),
            ("rounds = -3", "rounds", "1 to 100000"),
            ("warmup = 1001", "warmup", "0 to 1000"),
            ("duration_s = 0.001", "duration_s", "0.01 to 3600 seconds"),
            ("duration_s = 3601", "duration_s", "0.01 to 3600 seconds"),
            ("duration_s = nan", "duration_s", "0.01 to 3600 seconds"),
            ("interval_s = 0", "interval_s", "0.01 to 3600 seconds"),
            (
                "precision_pct = 0",
                "precision_pct",
                "above 0 and below 100",
            ),
            (
                "precision_pct = 100",
                "precision_pct",
                "above 0 and below 100",
            ),
            ("budget_s = 0.5", "budget_s", "1 to 604800 seconds"),
        ] {
            let err = error(&plan_with(line));
            assert!(
                matches!(&err, PlanError::OutOfRange { field: f, at: l, .. }
                    if *f == field && *l == at(2, field.len() + 4)),
                "{line}: {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.starts_with("line 2, column"), "{msg}");
            assert!(msg.contains(range), "{line}: {msg}");
        }
    }

    #[test]
    fn a_stated_interval_must_fit_in_the_trial() {
        let err = error(&plan_with("duration_s = 1.0\ninterval_s = 2.0"));
        assert!(
            matches!(err, PlanError::IntervalOverDuration { at: l, .. } if l == at(3, 14)),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("interval_s = 2 is longer than duration_s = 1")
        );
    }

    #[test]
    fn hosts_and_peers_are_host_port() {
        assert!(matches!(
            error(&plan_with("").replace("\"local\"", "[]")),
            PlanError::NoHosts { at: l } if l == at(1, 9)
        ));
        for (address, why) in [
            ("10.0.0.5", "no :PORT"),
            (":7700", "no host"),
            ("h:0", "1 to 65535"),
            ("h:70000", "1 to 65535"),
            ("h:x", "1 to 65535"),
            ("::1:7700", "brackets"),
            ("h :1", "space"),
        ] {
            let text = plan_with("").replace("\"local\"", &format!("[\"a:1\", \"{address}\"]"));
            let err = error(&text);
            assert!(
                matches!(&err, PlanError::BadAddress { field: "hosts", at: l, .. }
                    if *l == at(1, 17)),
                "{address}: {err:?}"
            );
            assert!(err.to_string().contains(why), "{address}: {err}");
        }
        let text = plan_with("peers = [\"p\"]").replace("\"local\"", "[\"a:1\"]");
        assert!(matches!(
            error(&text),
            PlanError::BadAddress { field: "peers", at: l, .. } if l == at(2, 10)
        ));
        let text = plan_with("").replace("\"local\"", "[\"a:1\", \"b:2\", \"a:1\"]");
        assert!(matches!(
            error(&text),
            PlanError::Duplicate { field: "host", first, at: l, .. }
                if first == at(1, 10) && l == at(1, 24)
        ));
    }

    #[test]
    fn peers_are_one_or_one_per_host_and_not_for_local_runs() {
        let text = plan_with("peers = [\"p:1\", \"q:1\"]")
            .replace("\"local\"", "[\"a:1\", \"b:1\", \"c:1\"]");
        let err = error(&text);
        assert!(
            matches!(err, PlanError::PeerCount { peers: 2, hosts: 3, at: l } if l == at(2, 9)),
            "{err:?}"
        );
        assert!(matches!(
            error(&plan_with("peers = [\"p:1\"]")),
            PlanError::PeersWithLocal { at: l } if l == at(2, 9)
        ));
        // An empty list is no peers, also for a local run.
        assert!(parse_plan(&plan_with("peers = []"), 0).is_ok());
    }

    #[test]
    fn cpus_are_a_kernel_list_and_exclude_unpinned() {
        assert_eq!(
            parse_plan(&plan_with("cpus = \"0,2-3\""), 0)
                .unwrap()
                .settings
                .cpus,
            [0, 2, 3]
        );
        let err = error(&plan_with("cpus = \"2-x\""));
        assert!(
            matches!(&err, PlanError::BadCpus { at: l, .. } if *l == at(2, 8)),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("'x'") || err.to_string().contains("2-x"),
            "{err}"
        );
        assert!(matches!(
            error(&plan_with("cpus = \" \"")),
            PlanError::Empty { field: "cpus", .. }
        ));
        assert!(matches!(
            error(&plan_with("cpus = \"1\"\nunpinned = true")),
            PlanError::CpusWithUnpinned { at: l } if l == at(2, 8)
        ));
        assert!(
            parse_plan(&plan_with("unpinned = true"), 0)
                .unwrap()
                .settings
                .unpinned
        );
    }

    #[test]
    fn read_plan_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let err = read_plan(&missing, 0).unwrap_err();
        assert!(matches!(err, PlanError::Read { .. }));
        assert!(err.to_string().contains("missing.toml"), "{err}");

        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, plan_with("rounds = 0")).unwrap();
        let msg = read_plan(&bad, 0).unwrap_err().to_string();
        assert!(msg.contains("bad.toml") && msg.contains("line 2"), "{msg}");

        let good = dir.path().join("good.toml");
        std::fs::write(&good, EXAMPLE).unwrap();
        assert_eq!(read_plan(&good, 0).unwrap().settings.seed, 42);
    }

    #[test]
    fn locates_lines_and_character_columns() {
        assert_eq!(locate("", 0), at(1, 1));
        assert_eq!(locate("ab\ncd", 4), at(2, 2));
        assert_eq!(locate("é = 1\nx", 4), at(1, 4));
        assert_eq!(locate("ab", 99), at(1, 3));
    }

    #[test]
    fn a_fleet_table_names_the_hosts_and_the_run_policy() {
        let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
        let plan = parse_plan(
            &format!(
                "[fleet]\nkind = \"static\"\nhosts = [\"a:1\", \"b:1\"]\npeers = [\"c:1\"]\n\
                 round_sync = false\nfail_fast = true\n{variant}"
            ),
            0,
        )
        .unwrap();
        assert!(!plan.local);
        assert_eq!(plan.agents, ["a:1", "b:1"]);
        assert_eq!(plan.peers, ["c:1"]);
        assert!(!plan.settings.round_sync);
        assert!(plan.fail_fast);
        let plan = parse_plan(
            &format!("[fleet]\nkind = \"static\"\nhosts_file = \"hosts.txt\"\n{variant}"),
            0,
        )
        .unwrap();
        assert_eq!(plan.hosts_file, Some(PathBuf::from("hosts.txt")));
        assert!(plan.agents.is_empty());
        assert!(plan.settings.round_sync, "round sync is the default");
        let plan = parse_plan(&format!("[fleet]\nkind = \"local\"\n{variant}"), 0).unwrap();
        assert!(plan.local);
    }

    #[test]
    fn fleet_tables_that_do_not_fit_their_kind_are_refused_with_the_line() {
        let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
        for (head, words) in [
            (
                "[fleet]\nkind = \"ec2\"\n",
                "line 2, column 8: [fleet] kind = \"ec2\" is not a fleet kind",
            ),
            (
                "[fleet]\nkind = \"local\"\nhosts = [\"a:1\"]\n",
                "remove hosts",
            ),
            ("[fleet]\nkind = \"static\"\n", "name the running agents"),
            (
                "[fleet]\nkind = \"static\"\nhosts = [\"a:1\"]\nhosts_file = \"f\"\n",
                "not both",
            ),
            (
                "hosts = \"local\"\n[fleet]\nkind = \"local\"\n",
                "line 1, column 9: hosts is given both",
            ),
            ("[fleet]\nkind = \"static\"\nhosts = [\"a\"]\n", "line 3"),
            ("[fleet]\nkind = \"local\"\nzones = 2\n", "zones"),
            ("rounds = 2\n", "names no hosts"),
        ] {
            let err = parse_plan(&format!("{head}{variant}"), 0).unwrap_err();
            assert!(err.to_string().contains(words), "{head:?}: {err}");
        }
    }
}
