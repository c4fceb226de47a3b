//! A run's request: everything `quietbench run` is asked, as one typed value, and its
//! conversions side by side. The command line becomes one (`impl From<RunArgs>`, beside the clap
//! arguments in the CLI, which owns them), and so do a service's structured options
//! (`TryFrom<&pb::RunOptions>`, here) and a request file (`RunRequest::read`, here); a request
//! becomes the options `run --controller` submits (`From<&RunRequest> for pb::RunOptions`,
//! here) and the file the service hands each run's process (`quietbench run-request FILE`, hidden)
//! instead of flags rendered back to text for clap to parse again.
//!
//! A request from the command line was checked by clap; one from the wire or a file is checked
//! by [`RunRequest::check`], which holds the same bounds and exclusions, so no way in accepts
//! what another refuses (a test holds them equal on the same inputs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quietbench_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::context::CommandContext;
use crate::fleet::ec2::Ec2Spec;
use crate::limits::lookup::AwsTarget;
use crate::prewarm::PrewarmPolicy;
use crate::record::figures::TrialFigure;

/// Measured rounds when none are asked for.
pub const DEFAULT_ROUNDS: u32 = 3;
/// The most measured rounds.
pub const MAX_ROUNDS: u32 = 100_000;
/// The most warm-up rounds.
pub const MAX_WARMUP: u32 = 1000;
/// Each trial's measuring time when none is asked for, milliseconds.
pub const DEFAULT_DURATION_MS: u64 = 3000;
/// The reporting interval when none is asked for, milliseconds.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;
/// The shortest trial or interval, milliseconds (10 ms).
pub const MIN_DURATION_MS: u64 = 10;
/// The longest trial or interval, milliseconds (an hour).
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// How long a lost agent is waited for when not asked, seconds.
pub const DEFAULT_RECONNECT_S: u64 = 10;
/// The longest a lost agent may be waited for, seconds.
pub const MAX_RECONNECT_S: u64 = 3600;
/// The longest request file read, bytes.
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;

/// `--control`: a reference workload's probe and its parameters.
pub type Control = (String, BTreeMap<String, String>);

/// Everything a run is asked (see the module's documentation). Its defaults are `run`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunRequest {
    /// A plan file: hosts, variants, rounds and timing come from it.
    pub plan: Option<PathBuf>,
    /// Measure on this machine.
    pub local: bool,
    /// Or on these running agents.
    pub agents: Vec<String>,
    /// Or on the agents a hosts file lists.
    pub hosts_file: Option<PathBuf>,
    /// Or on EC2 instances launched for the run.
    pub ec2: Option<Ec2Spec>,
    /// Peer agents of network probes: one for all hosts, or one per host.
    pub peers: Vec<String>,
    /// Hosts do not wait for each other at round boundaries.
    pub no_round_sync: bool,
    /// Stop the whole run when one host fails.
    pub fail_fast: bool,
    /// How long a lost agent is waited for, seconds (0: not at all).
    pub reconnect_within_s: u64,
    /// Probes, in the order given (empty: the default probe).
    pub probes: Vec<String>,
    /// Probe parameters, KEY and VALUE, in the order given.
    pub params: Vec<(String, String)>,
    /// `--control`: a reference workload measured beside the probes on every host.
    pub control: Option<Control>,
    /// `--figure`: the figure exec trials are judged and spread on.
    #[serde(with = "figure_word")]
    pub figure: Option<TrialFigure>,
    /// Measured rounds.
    pub rounds: u32,
    /// Warm-up rounds.
    pub warmup: u32,
    /// Seed of the trial order (random when `None`).
    pub seed: Option<u64>,
    /// Measuring time of each trial, milliseconds.
    pub duration_ms: u64,
    /// Reporting interval, milliseconds.
    pub interval_ms: u64,
    /// CPUs to pin probe threads to (empty: the agent places them).
    pub cpus: Vec<u32>,
    /// Do not pin probe threads.
    pub unpinned: bool,
    /// Tune each host before the run and restore it after.
    pub tune: bool,
    /// The JSON report's file.
    pub json: Option<PathBuf>,
    /// The HTML report's file.
    pub html: Option<PathBuf>,
    /// The folder of HdrHistogram interval logs.
    pub hdr_log: Option<PathBuf>,
    /// The result store.
    pub db: Option<PathBuf>,
    /// Keep no record in the result store.
    pub no_store: bool,
    /// The run's id, when the caller chose it (`quietbench serve`); a new one otherwise.
    pub run_id: Option<String>,
    /// `--prewarm`: which volumes are read whole before disk probes (it wins over a plan's).
    #[serde(with = "prewarm_word")]
    pub prewarm: Option<PrewarmPolicy>,
    /// `--no-aws`: never look caps up in the EC2 API.
    pub no_aws: bool,
    /// Where and as whom caps are looked up (`--region`, `--profile`, `--endpoint-url`).
    pub aws: Aws,
}

/// `--region`, `--profile` and `--endpoint-url`, as a request keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Aws {
    /// Region.
    pub region: Option<String>,
    /// Profile of ~/.aws/config.
    pub profile: Option<String>,
    /// Another EC2 endpoint.
    pub endpoint_url: Option<String>,
}

impl Aws {
    /// The same, as the caps lookup takes it.
    pub fn target(&self) -> AwsTarget {
        AwsTarget {
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}

impl Default for RunRequest {
    /// What `quietbench run` does with no option but a target.
    fn default() -> Self {
        Self {
            plan: None,
            local: false,
            agents: Vec::new(),
            hosts_file: None,
            ec2: None,
            peers: Vec::new(),
            no_round_sync: false,
            fail_fast: false,
            reconnect_within_s: DEFAULT_RECONNECT_S,
            probes: Vec::new(),
            params: Vec::new(),
            control: None,
            figure: None,
            rounds: DEFAULT_ROUNDS,
            warmup: 0,
            seed: None,
            duration_ms: DEFAULT_DURATION_MS,
            interval_ms: DEFAULT_INTERVAL_MS,
            cpus: Vec::new(),
            unpinned: false,
            tune: false,
            json: None,
            html: None,
            hdr_log: None,
            db: None,
            no_store: false,
            run_id: None,
            prewarm: None,
            no_aws: false,
            aws: Aws::default(),
        }
    }
}

impl RunRequest {
    /// Each trial's measuring time.
    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.duration_ms)
    }

    /// The reporting interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// How long a lost agent is waited for; `None`: not at all.
    pub fn reconnect_within(&self) -> Option<Duration> {
        (self.reconnect_within_s > 0).then(|| Duration::from_secs(self.reconnect_within_s))
    }

    /// Hands the request's caps lookup (`--no-aws`, the AWS target) and `--prewarm` to the
    /// command's context.
    pub fn apply_to(&self, context: &mut CommandContext) {
        context.aws = (!self.no_aws).then(|| self.aws.target());
        if let Some(policy) = self.prewarm {
            context.prewarm = policy;
        }
    }

    /// The bounds and exclusions the command line's parser holds, for requests that did not
    /// come through it; the reason of the first broken one, in the flags' words.
    pub fn check(&self) -> Result<(), String> {
        let targets = [
            (self.plan.is_some(), "--plan"),
            (self.local, "--local"),
            (!self.agents.is_empty(), "--agent"),
            (self.hosts_file.is_some(), "--hosts"),
            (self.ec2.is_some(), "--ec2"),
        ];
        match targets.iter().filter(|(given, _)| *given).count() {
            0 => {
                return Err(
                    "no hosts: give one of --local, --agent, --hosts, --plan or --ec2".into(),
                );
            }
            1 => {}
            _ => {
                let given: Vec<&str> = targets.iter().filter(|t| t.0).map(|t| t.1).collect();
                return Err(format!("give one of {}, not several", given.join(", ")));
            }
        }
        if self.plan.is_some() {
            let with_plan = [
                (!self.probes.is_empty(), "--probe"),
                (!self.params.is_empty(), "--param"),
                (!self.peers.is_empty(), "--peer"),
                (!self.cpus.is_empty(), "--cpus"),
                (self.unpinned, "--unpinned"),
                (self.tune, "--tune"),
                (self.control.is_some(), "--control"),
            ];
            if let Some((_, flag)) = with_plan.iter().find(|(given, _)| *given) {
                return Err(format!("--plan cannot take {flag}: set it in the plan"));
            }
        }
        if self.local && !self.peers.is_empty() {
            return Err("--local starts its own peer: --peer cannot be given with it".into());
        }
        if self.unpinned && !self.cpus.is_empty() {
            return Err("--unpinned cannot be given with --cpus".into());
        }
        if self.no_store && self.db.is_some() {
            return Err("--no-store cannot be given with --db".into());
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return Err(format!(
                "--rounds {} is out of range: give 1 to {MAX_ROUNDS}",
                self.rounds
            ));
        }
        if self.warmup > MAX_WARMUP {
            return Err(format!(
                "--warmup {} is out of range: give 0 to {MAX_WARMUP}",
                self.warmup
            ));
        }
        for (flag, ms) in [
            ("--duration", self.duration_ms),
            ("--interval", self.interval_ms),
        ] {
            if !(MIN_DURATION_MS..=MAX_DURATION_MS).contains(&ms) {
                return Err(format!(
                    "{flag} {} s is out of range: give {} to {} seconds",
                    ms as f64 / 1000.0,
                    MIN_DURATION_MS as f64 / 1000.0,
                    MAX_DURATION_MS / 1000
                ));
            }
        }
        if self.reconnect_within_s > MAX_RECONNECT_S {
            return Err(format!(
                "--reconnect-within {} is out of range: give 0 to {MAX_RECONNECT_S} seconds",
                self.reconnect_within_s
            ));
        }
        if let Some((key, _)) = self.params.iter().find(|(k, _)| k.trim().is_empty()) {
            return Err(format!("--param {key:?} has no key before '='"));
        }
        if let Some(id) = &self.run_id {
            uuid::Uuid::parse_str(id)
                .map_err(|e| format!("'{id}' is not a run id (a UUID): {e}"))?;
        }
        if let Some(spec) = &self.ec2
            && (spec.instance_type.is_empty() || spec.ami.is_empty())
        {
            return Err("--ec2 needs --instance-type and --ami".into());
        }
        Ok(())
    }

    /// A request file (as [`RunRequest::to_json`] writes it), checked.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = quietbench_host::input::read_text(path, MAX_REQUEST_BYTES)
            .map_err(|e| anyhow::anyhow!("cannot read the run request {}: {e}", path.display()))?;
        let request: Self = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("the run request {} is not one: {e}", path.display()))?;
        request
            .check()
            .map_err(|e| anyhow::anyhow!("the run request {}: {e}", path.display()))?;
        Ok(request)
    }

    /// The request as a file holds it (JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a run request always serializes")
    }
}

/// A service's structured options, with `run`'s defaults for what they leave unset, checked.
/// Parameter names and values are taken as given (the service takes `env.*` values out first).
impl TryFrom<&pb::RunOptions> for RunRequest {
    type Error = String;

    fn try_from(o: &pb::RunOptions) -> Result<Self, String> {
        let defaults = Self::default();
        let control = if o.control.is_empty() {
            None
        } else {
            Some(parse_control(&o.control).map_err(|e| format!("control: {e}"))?)
        };
        let figure = if o.figure.is_empty() {
            None
        } else {
            Some(TrialFigure::parse(&o.figure).ok_or_else(|| {
                format!(
                    "figure {:?}: give median, mean, cpu or instructions",
                    o.figure
                )
            })?)
        };
        let params: BTreeMap<&String, &String> = o.params.iter().collect();
        let request = Self {
            local: o.local,
            agents: o.agents.clone(),
            peers: o.peers.clone(),
            probes: o.probes.clone(),
            // Trimmed as `--param` trims them.
            params: params
                .into_iter()
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect(),
            control,
            figure,
            rounds: if o.rounds == 0 {
                defaults.rounds
            } else {
                o.rounds
            },
            warmup: o.warmup.unwrap_or(defaults.warmup),
            seed: o.seed,
            duration_ms: if o.duration_ms == 0 {
                defaults.duration_ms
            } else {
                o.duration_ms
            },
            interval_ms: if o.interval_ms == 0 {
                defaults.interval_ms
            } else {
                o.interval_ms
            },
            cpus: o.cpus.clone(),
            unpinned: o.unpinned,
            tune: o.tune,
            fail_fast: o.fail_fast,
            no_round_sync: o.no_round_sync,
            reconnect_within_s: o
                .reconnect_within_s
                .map_or(defaults.reconnect_within_s, u64::from),
            ..defaults
        };
        request.check()?;
        Ok(request)
    }
}

/// The options `run --controller` submits: what a service's run can take (no files of this
/// machine, no EC2 flags: those the caller refuses first).
impl From<&RunRequest> for pb::RunOptions {
    fn from(r: &RunRequest) -> Self {
        pb::RunOptions {
            local: r.local,
            agents: r.agents.clone(),
            peers: r.peers.clone(),
            probes: r.probes.clone(),
            params: r.params.iter().cloned().collect(),
            control: r.control.clone().map(control_text).unwrap_or_default(),
            figure: r.figure.map(|f| f.as_str().to_string()).unwrap_or_default(),
            rounds: r.rounds,
            warmup: Some(r.warmup),
            seed: r.seed,
            duration_ms: r.duration_ms,
            interval_ms: r.interval_ms,
            cpus: r.cpus.clone(),
            unpinned: r.unpinned,
            tune: r.tune,
            fail_fast: r.fail_fast,
            no_round_sync: r.no_round_sync,
            reconnect_within_s: u32::try_from(r.reconnect_within_s).ok(),
        }
    }
}

/// Parses `--control "PROBE KEY=VALUE ..."`. Values with spaces are quoted as in a shell:
/// `--control "exec cmd='./baseline --fast'"`.
pub fn parse_control(text: &str) -> Result<Control, String> {
    let words = quoted_words(text)?;
    let Some((probe, rest)) = words.split_first() else {
        return Err("give the control's probe, e.g. --control cpu.primes or \
                    --control 'cpu.primes max_prime=20000'"
            .into());
    };
    let mut params = BTreeMap::new();
    for word in rest {
        let (key, value) = word
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("'{word}' in --control is not KEY=VALUE"))?;
        params.insert(key.to_string(), value.to_string());
    }
    Ok((probe.clone(), params))
}

/// `--control`'s text back from its parsed form (values with blanks quoted).
pub fn control_text((probe, params): Control) -> String {
    let mut text = probe;
    for (key, value) in params {
        if value.contains(char::is_whitespace) {
            text.push_str(&format!(" {key}=\"{value}\""));
        } else {
            text.push_str(&format!(" {key}={value}"));
        }
    }
    text
}

/// Words split at unquoted white space; single and double quotes group (and are removed).
fn quoted_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("--control has an unterminated {q} quote"));
    }
    words.extend(word);
    Ok(words)
}

/// `figure` in a request file: the word `--figure` takes.
mod figure_word {
    use super::TrialFigure;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(f: &Option<TrialFigure>, s: S) -> Result<S::Ok, S::Error> {
        match f {
            Some(f) => s.serialize_some(f.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TrialFigure>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|word| {
                TrialFigure::parse(&word).ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "figure {word:?}: give median, mean, cpu or instructions"
                    ))
                })
            })
            .transpose()
    }
}

/// `prewarm` in a request file: the word `--prewarm` takes.
mod prewarm_word {
    use super::PrewarmPolicy;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Option<PrewarmPolicy>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(p.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PrewarmPolicy>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|word| PrewarmPolicy::parse(&word).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests;
