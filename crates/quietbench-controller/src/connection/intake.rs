//! What the controller takes from an agent during one trial, and the bounds it holds it to.
//!
//! An agent is another machine, and whatever it sends arrives here: a broken or hostile one
//! must not be able to crash or hang the controller, nor slip nonsense into a report. So every
//! event is checked before anything else sees it (the progress line included), and a trial
//! that breaks a bound fails at once with an error naming the agent:
//!
//! - Time: a trial ends by its deadline, [`TrialLimits::deadline`]: its duration, one silence
//!   for the agent's set-up (the stall rule already allows that much before the first interval)
//!   and a grace of max(10 s, 25% of the duration). The grace covers what a healthy agent adds
//!   on a loaded host: the last interval's noise reading and encoding, an exec invocation that
//!   started just before the end, a VM's steal. 10 s is the floor because those costs do not
//!   shrink with a short trial; 25% because on a long one the host's slowness grows with it.
//!   An agent that streams well-formed intervals forever is stopped there.
//! - Memory: at most [`TrialLimits::max_intervals`] intervals (as many as fit before the
//!   deadline, plus two), each histogram within the decoder's caps
//!   ([`quietbench_proto::histogram`]: 1 MiB on the wire, 2 MiB decoded, checked on the header
//!   before anything is allocated), and what a trial's record keeps within
//!   [`MAX_TRIAL_BYTES`] and its run's [`RunBudget`].
//! - Sense: the trial id is the one asked for; intervals end after they start, inside the
//!   trial's time; values are finite; histogram counts do not overflow and agree with the
//!   sample count the agent states.
//!
//! Interval histograms are decoded one at a time to be checked and then dropped: the record
//! keeps their encoded bytes (the HDR interval logs pass them through), and the trial's own
//! distribution is the one the agent sends in its result. Nothing decoded piles up per
//! interval.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prost::Message;
use quietbench_proto::histogram::{HistogramDecodeError, decode_bounded};
use quietbench_proto::v1 as pb;

use super::{AgentError, CompletedTrial};

/// The least grace past a trial's duration (see the module's documentation).
pub const MIN_GRACE: Duration = Duration::from_secs(10);
/// The most one trial's record may hold: its intervals as encoded, its result, and the result's
/// decoded histograms. A 1 s interval of quietbench's own probes takes 1 to 10 KB, so an hour's
/// trial at 1 s holds a few tens of MB; at 10 ms intervals it would pass this, and the error says
/// to report less often.
pub const MAX_TRIAL_BYTES: u64 = 256 << 20;
/// The most all the trial records of one run may hold together, in flight or finished. A
/// decoded trial histogram takes 270 KB; a thousand trials of three such metrics are under a
/// gigabyte, so this leaves four times that, and still bounds a run whatever its agents send.
pub const MAX_RUN_BYTES: u64 = 4 << 30;
/// The shortest interval an agent may report (the agent refuses shorter ones).
const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Intervals beyond those that fit before the deadline: the partial ones at either end.
const EXTRA_INTERVALS: u64 = 2;
/// How far an agent's clock may step back between its acceptance and its intervals (NTP).
const CLOCK_STEP_NS: u64 = 1_000_000_000;

/// The grace past a trial's duration: max(10 s, 25% of the duration).
pub fn grace(duration: Duration) -> Duration {
    (duration / 4).max(MIN_GRACE)
}

/// The time and interval bounds of one trial, from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialLimits {
    /// The trial's measuring time.
    pub duration: Duration,
    /// Allowed before measuring starts: one silence of the stall rule.
    pub setup: Duration,
    /// Allowed past the end: [`grace`].
    pub grace: Duration,
    /// The most intervals the agent may send.
    pub max_intervals: u64,
    /// The most bytes the trial's record may hold: [`MAX_TRIAL_BYTES`].
    pub max_bytes: u64,
}

impl TrialLimits {
    /// For a trial of `duration` reporting every `interval`, whose agent may be silent for
    /// `quiet` between events.
    pub fn new(duration: Duration, interval: Duration, quiet: Duration) -> Self {
        let grace = grace(duration);
        let deadline = duration + quiet + grace;
        // The agent reports every min(interval, duration), never more often than every 10 ms.
        let every = interval.min(duration).max(MIN_INTERVAL);
        let fit = deadline.as_nanos().div_ceil(every.as_nanos());
        Self {
            duration,
            setup: quiet,
            grace,
            max_intervals: u64::try_from(fit)
                .unwrap_or(u64::MAX)
                .saturating_add(EXTRA_INTERVALS),
            max_bytes: MAX_TRIAL_BYTES,
        }
    }

    /// How long after the agent took the request the trial must have ended.
    pub fn deadline(&self) -> Duration {
        self.duration + self.setup + self.grace
    }

    /// "54 s (the 40 s trial, 4 s for its set-up, 10 s of grace)".
    pub fn describe(&self) -> String {
        format!(
            "{} s (the {} s trial, {} s for its set-up, {} s of grace)",
            self.deadline().as_secs_f64(),
            self.duration.as_secs_f64(),
            self.setup.as_secs_f64(),
            self.grace.as_secs_f64()
        )
    }
}

/// The bytes one run's trial records may hold, shared by its hosts: each trial takes its share
/// as its events arrive and gives it back if it fails.
#[derive(Debug, Clone)]
pub struct RunBudget {
    held: Arc<AtomicU64>,
    cap: u64,
}

impl RunBudget {
    /// A budget of `cap` bytes.
    pub fn new(cap: u64) -> Self {
        Self {
            held: Arc::new(AtomicU64::new(0)),
            cap,
        }
    }

    /// Bytes taken now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Takes `bytes`, or says how much is held when they do not fit.
    fn take(&self, bytes: u64) -> Result<(), u64> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.cap)
            })
            .map(|_| ())
    }

    fn give_back(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

impl Default for RunBudget {
    /// [`MAX_RUN_BYTES`], for a run of its own.
    fn default() -> Self {
        Self::new(MAX_RUN_BYTES)
    }
}

/// What a trial's record holds of its run's budget: given back when dropped, unless kept.
#[derive(Debug)]
pub struct Retained {
    budget: RunBudget,
    bytes: u64,
}

impl Retained {
    fn new(budget: RunBudget) -> Self {
        Self { budget, bytes: 0 }
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The trial's record stays in the run: its bytes stay taken for the budget's life.
    pub fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

/// Why an event was refused, before the agent's name is put to it.
enum Refusal {
    /// Not what the protocol allows.
    Protocol(String),
    /// Past a bound on time or memory.
    TooMuch(String),
}

/// One trial's events as they arrive, checked.
pub(super) struct TrialIntake<'a> {
    agent: &'a str,
    requested_id: &'a str,
    limits: TrialLimits,
    retained: Retained,
    accepted: Option<pb::Accepted>,
    placement: Option<pb::Placement>,
    intervals: Vec<pb::Interval>,
}

impl<'a> TrialIntake<'a> {
    /// The intake of trial `requested_id` (empty: the agent chooses) on `agent`.
    pub fn new(
        agent: &'a str,
        requested_id: &'a str,
        limits: TrialLimits,
        budget: RunBudget,
    ) -> Self {
        Self {
            agent,
            requested_id,
            limits,
            retained: Retained::new(budget),
            accepted: None,
            placement: None,
            intervals: Vec::new(),
        }
    }

    /// True once the agent accepted the trial.
    pub fn accepted(&self) -> bool {
        self.accepted.is_some()
    }

    /// Checks `event` before anything sees it; an error fails the trial.
    pub fn check(&mut self, event: &pb::probe_event::Event) -> Result<(), AgentError> {
        self.refuse_unless(event).map_err(|refusal| {
            let agent = self.agent.to_string();
            match refusal {
                Refusal::Protocol(what) => AgentError::Protocol { agent, what },
                Refusal::TooMuch(what) => AgentError::TooMuch { agent, what },
            }
        })
    }

    /// Keeps a checked event; returns the trial once its result arrived.
    pub fn keep(
        &mut self,
        event: pb::probe_event::Event,
    ) -> Result<Option<CompletedTrial>, AgentError> {
        use pb::probe_event::Event;
        match event {
            Event::Accepted(a) => self.accepted = Some(a),
            Event::Placement(p) => self.placement = Some(p),
            Event::Interval(i) => self.intervals.push(i),
            Event::Error(e) => {
                return Err(AgentError::TrialFailed {
                    agent: self.agent.to_string(),
                    message: e.message,
                });
            }
            Event::Result(result) => {
                let accepted = self.accepted.take().ok_or_else(|| AgentError::Protocol {
                    agent: self.agent.to_string(),
                    what: "a result before acceptance".into(),
                })?;
                let budget = self.retained.budget.clone();
                let retained = std::mem::replace(&mut self.retained, Retained::new(budget));
                return Ok(Some(CompletedTrial {
                    accepted,
                    placement: self.placement.take(),
                    intervals: std::mem::take(&mut self.intervals),
                    result,
                    retained,
                }));
            }
        }
        Ok(None)
    }

    fn refuse_unless(&mut self, event: &pb::probe_event::Event) -> Result<(), Refusal> {
        use pb::probe_event::Event;
        let protocol = |what: String| Err(Refusal::Protocol(what));
        let accepted = match (event, &self.accepted) {
            (Event::Accepted(a), None) => return self.check_accepted(a),
            (Event::Accepted(_), Some(_)) => return protocol("a second acceptance".into()),
            // A failure may come at any time; its message is shown (escaped) as it is.
            (Event::Error(_), _) => return Ok(()),
            (_, None) => return protocol(format!("{} before the acceptance", kind(event))),
            (_, Some(a)) => a,
        };
        let window = self.window(accepted);
        match event {
            Event::Placement(_) if self.placement.is_some() => {
                protocol("a second placement".into())
            }
            Event::Placement(_) => Ok(()),
            Event::Interval(i) => {
                let count = self.intervals.len() as u64 + 1;
                if count > self.limits.max_intervals {
                    return Err(Refusal::TooMuch(format!(
                        "more than {} intervals, all that fit in the trial's deadline of {}",
                        self.limits.max_intervals,
                        self.limits.describe()
                    )));
                }
                if u64::from(i.index) >= self.limits.max_intervals {
                    return protocol(format!(
                        "interval index {} in a trial of at most {} intervals (indices count \
                         from 0)",
                        i.index, self.limits.max_intervals
                    ));
                }
                let at = format!("interval {}", i.index);
                check_span(&at, i.start_unix_ns, i.end_unix_ns, window)?;
                check_noise(&at, i.noise.as_ref())?;
                for m in &i.metrics {
                    // Decoded to be checked, then dropped: the record keeps the bytes.
                    check_metric(&at, m)?;
                }
                self.take(&at, i.encoded_len() as u64)
            }
            Event::Result(r) => {
                if r.trial_id != accepted.trial_id {
                    return protocol(format!(
                        "a result for trial '{}' in trial '{}'",
                        r.trial_id, accepted.trial_id
                    ));
                }
                let at = "the result".to_string();
                check_span(&at, r.start_unix_ns, r.end_unix_ns, window)?;
                check_noise(&at, r.noise.as_ref())?;
                self.take(&at, r.encoded_len() as u64)?;
                for m in &r.metrics {
                    // The record keeps these decoded (record::trial_metrics decodes them again,
                    // one trial at a time): their size counts against the bounds.
                    let decoded = check_metric(&at, m)?;
                    self.take(&at, decoded)?;
                }
                Ok(())
            }
            Event::Accepted(_) | Event::Error(_) => Ok(()),
        }
    }

    fn check_accepted(&self, a: &pb::Accepted) -> Result<(), Refusal> {
        if a.trial_id.is_empty() {
            return Err(Refusal::Protocol("an acceptance without a trial id".into()));
        }
        if !self.requested_id.is_empty() && a.trial_id != self.requested_id {
            return Err(Refusal::Protocol(format!(
                "it accepted trial '{}' when trial '{}' was asked for",
                a.trial_id, self.requested_id
            )));
        }
        if a.accepted_unix_ns == 0 {
            return Err(Refusal::Protocol(
                "an acceptance without its time (accepted_unix_ns)".into(),
            ));
        }
        Ok(())
    }

    /// The agent's times a trial's events may carry: from its acceptance (less a clock step)
    /// to the deadline (plus one).
    fn window(&self, accepted: &pb::Accepted) -> (u64, u64) {
        let deadline_ns = u64::try_from(self.limits.deadline().as_nanos()).unwrap_or(u64::MAX);
        (
            accepted.accepted_unix_ns.saturating_sub(CLOCK_STEP_NS),
            accepted
                .accepted_unix_ns
                .saturating_add(deadline_ns)
                .saturating_add(CLOCK_STEP_NS),
        )
    }

    /// Takes `bytes` more for the record, within the trial's and the run's bounds.
    fn take(&mut self, at: &str, bytes: u64) -> Result<(), Refusal> {
        let total = self.retained.bytes.saturating_add(bytes);
        if total > self.limits.max_bytes {
            return Err(Refusal::TooMuch(format!(
                "at {at}, the trial's record would hold {total} bytes, more than the {} a \
                 trial may (after {} intervals); a longer --interval sends less",
                self.limits.max_bytes,
                self.intervals.len()
            )));
        }
        let budget = &self.retained.budget;
        budget.take(bytes).map_err(|held| {
            Refusal::TooMuch(format!(
                "at {at}, the run's records would hold more than the {} bytes a run may \
                 ({held} held); split the run",
                budget.cap
            ))
        })?;
        self.retained.bytes = total;
        Ok(())
    }
}

/// An event's name in messages.
fn kind(event: &pb::probe_event::Event) -> &'static str {
    use pb::probe_event::Event;
    match event {
        Event::Accepted(_) => "an acceptance",
        Event::Placement(_) => "a placement",
        Event::Interval(_) => "an interval",
        Event::Result(_) => "a result",
        Event::Error(_) => "an error",
    }
}

/// A span of the agent's time: it ends after it starts, within the trial's `window`.
fn check_span(at: &str, start_ns: u64, end_ns: u64, window: (u64, u64)) -> Result<(), Refusal> {
    if end_ns < start_ns {
        return Err(Refusal::Protocol(format!(
            "{at} ends ({end_ns} ns) before it starts ({start_ns} ns)"
        )));
    }
    if start_ns < window.0 || end_ns > window.1 {
        return Err(Refusal::Protocol(format!(
            "{at} runs from {start_ns} to {end_ns} ns since the epoch, outside the trial \
             ({} to {} ns on the agent's clock: from its acceptance to the deadline)",
            window.0, window.1
        )));
    }
    Ok(())
}

/// A finite value, or a refusal naming it: NaN or infinity would vanish from (or poison) every
/// mean, median and chart downstream.
fn check_finite(at: &str, what: &str, value: Option<f64>) -> Result<(), Refusal> {
    match value {
        Some(v) if !v.is_finite() => Err(Refusal::Protocol(format!(
            "{at}: {what} is {v} (values must be finite numbers)"
        ))),
        _ => Ok(()),
    }
}

fn check_noise(at: &str, noise: Option<&pb::NoiseSample>) -> Result<(), Refusal> {
    let Some(n) = noise else { return Ok(()) };
    check_finite(at, "the noise's steal_fraction", n.steal_fraction)?;
    check_finite(
        at,
        "the noise's foreign_cpu_fraction",
        n.foreign_cpu_fraction,
    )?;
    check_finite(at, "the noise's cpu_mhz", n.cpu_mhz)
}

/// Checks one metric; returns the bytes its histogram takes decoded (0 without one).
fn check_metric(at: &str, m: &pb::Metric) -> Result<u64, Refusal> {
    check_finite(at, &format!("metric {}'s value", m.name), m.value)?;
    let Some(h) = &m.histogram else { return Ok(0) };
    let at = format!("{at}, metric {}", m.name);
    if h.end_unix_ns < h.start_unix_ns {
        return Err(Refusal::Protocol(format!(
            "{at}: the histogram ends before it starts"
        )));
    }
    let hist = decode_bounded(&h.hdr_v2_deflate).map_err(|e| {
        let what = format!("{at}: the histogram is refused: {e}");
        match e {
            HistogramDecodeError::TooLarge(_)
            | HistogramDecodeError::InflatesTooFar
            | HistogramDecodeError::Digits(_)
            | HistogramDecodeError::DecodesTooLarge { .. } => Refusal::TooMuch(what),
            _ => Refusal::Protocol(what),
        }
    })?;
    if hist.len() != h.total_count {
        return Err(Refusal::Protocol(format!(
            "{at}: the histogram counts {} samples but states total_count {}",
            hist.len(),
            h.total_count
        )));
    }
    Ok(hist.distinct_values() as u64 * 8)
}

#[cfg(test)]
mod tests;
