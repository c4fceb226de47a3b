//! What is wrong with a plan: the error names the field and its line.

use std::fmt;
use std::path::PathBuf;

use quietbench_host::CpuListError;

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
        source: quietbench_host::input::InputError,
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
    /// trimmed so the message ends where others do); each quoted line is clipped, so a plan of
    /// one 40 KB line (a deeply nested array) does not come back whole in its error.
    #[error("{}", clip_lines(.0.to_string().trim_end(), MAX_QUOTED_CHARS))]
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
         [fleet] table with kind = \"local\", \"static\" or \"ec2\" (see docs/plans.md)"
    )]
    NoFleet,
    /// A `[fleet]` kind this build does not have.
    #[error(
        "{at}: [fleet] kind = {kind:?} is not a fleet kind: give \"local\" (agents started \
         here), \"static\" (running agents: hosts or hosts_file) or \"ec2\" (instances \
         launched for the run)"
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
    /// `figure` is not a figure exec or http trials have.
    #[error(
        "{at}: figure = {given:?}: use median, mean, cpu or instructions (exec), or p50, p99 or server-cpu (http)"
    )]
    BadFigure {
        /// What the file says.
        given: String,
        /// Where.
        at: Location,
    },
    /// `prewarm` is not auto, always or never.
    #[error("{at}: {why}")]
    BadPrewarm {
        /// What is wrong.
        why: String,
        /// Where.
        at: Location,
    },
    /// An EC2 fleet's field is missing or wrong.
    #[error("{at}: [fleet] kind = \"ec2\": {why}")]
    Ec2 {
        /// What is wrong.
        why: String,
        /// Where.
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
    /// `[tls]` is incomplete or contradicts itself.
    #[error("{at}: [tls]: {why}")]
    Tls {
        /// What is wrong.
        why: String,
        /// Where the table is.
        at: Location,
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

/// Most characters of one line of a quoted plan line in an error.
const MAX_QUOTED_CHARS: usize = 160;

/// `text` with each line cut to `max` characters and an ellipsis.
fn clip_lines(text: &str, max: usize) -> String {
    text.lines()
        .map(|line| match line.char_indices().nth(max) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
