//! A fake trial: the event sequence a real agent streams (accepted, placement, one interval per
//! `interval_ms`, then the result), carrying the figures the host's function gave. Intervals
//! come at once ([`Pace::Instant`], for tests: a 5 s trial takes milliseconds) or on a timer
//! ([`Pace::RealTime`], for benches that load a controller as a real fleet would).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::probe_event::Event;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::Status;

use crate::figures::{Figure, HIGHEST, Kind, LOWEST, SIGNIFICANT_DIGITS};
use crate::host::{HOUSEKEEPING_CPU, PROBE_CPU};

/// How a fake trial's intervals are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pace {
    /// All intervals at once, each covering its share of the asked duration in its figures
    /// (the timestamps are the real ones): for tests, which wait for nothing.
    #[default]
    Instant,
    /// One interval per interval of real time, as a real agent sends them.
    RealTime,
}

/// A validated trial.
#[derive(Debug)]
pub struct TrialPlan {
    pub trial_id: String,
    pub probe: String,
    pub params: HashMap<String, String>,
    pub duration: Duration,
    pub interval: Duration,
}

type EventResult = Result<pb::ProbeEvent, Status>;

fn unix_ns(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn new_histogram() -> Histogram<u64> {
    let mut hist = Histogram::new_with_bounds(LOWEST, HIGHEST, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid");
    hist.auto(false);
    hist
}

/// The placement a real agent reports for one pinned thread on a 2-vCPU host.
fn placement() -> pb::Placement {
    pb::Placement {
        policy: "quiet-first".into(),
        threads: vec![pb::ThreadPlacement {
            thread_index: 0,
            planned_cpu: PROBE_CPU,
            affinity_cpus: vec![PROBE_CPU],
            observed_cpu: PROBE_CPU,
        }],
        housekeeping_cpus: vec![HOUSEKEEPING_CPU],
        notes: Vec::new(),
        shares_cpus: false,
        peer_flow_cpus: Vec::new(),
    }
}

/// A quiet host's noise over `elapsed`: no steal, a few interrupts, a little run-queue wait.
fn noise(elapsed: Duration) -> pb::NoiseSample {
    let secs = elapsed.as_secs_f64();
    pb::NoiseSample {
        elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        cpus: vec![PROBE_CPU],
        steal_fraction: Some(0.0),
        interrupts: Some((secs * 5.0) as u64),
        softirqs: Some((secs * 2.0) as u64),
        foreign_cpu_fraction: Some(0.0),
        runqueue_wait_ns: Some((secs * 3_000.0) as u64),
        involuntary_switches: Some(0),
        migrations: Some(0),
        cpu_mhz: None,
        unavailable: vec!["cpu_mhz: a fake host (quietbench-testkit) has no cpufreq".into()],
        ..Default::default()
    }
}

/// The metrics of `figures` for a span: values as given, distributions from `hists`.
fn metrics(
    figures: &[Figure],
    hists: &[Option<Histogram<u64>>],
    span: (SystemTime, SystemTime),
    serializer: &mut V2DeflateSerializer,
) -> Result<Vec<pb::Metric>, String> {
    figures
        .iter()
        .zip(hists)
        .map(|(figure, hist)| {
            let (value, histogram) = match (figure.kind, hist) {
                (Kind::Value(v), _) => (Some(v), None),
                (Kind::Distribution { .. }, Some(hist)) => {
                    let mut bytes = Vec::new();
                    serializer.serialize(hist, &mut bytes).map_err(|e| {
                        format!("cannot encode histogram as HdrHistogram V2+DEFLATE: {e:?}")
                    })?;
                    let histogram = pb::Histogram {
                        hdr_v2_deflate: bytes,
                        unit: figure.unit.clone(),
                        start_unix_ns: unix_ns(span.0),
                        end_unix_ns: unix_ns(span.1),
                        clamped_count: 0,
                        dropped_count: 0,
                        total_count: hist.len(),
                    };
                    ((!hist.is_empty()).then(|| hist.mean()), Some(histogram))
                }
                (Kind::Distribution { .. }, None) => (None, None),
            };
            Ok(pb::Metric {
                name: figure.name.clone(),
                unit: figure.unit.clone(),
                value,
                histogram,
            })
        })
        .collect()
}

/// Sends one event; false when the client has gone away.
async fn send(events: &mpsc::Sender<EventResult>, event: Event) -> bool {
    events
        .send(Ok(pb::ProbeEvent { event: Some(event) }))
        .await
        .is_ok()
}

/// Runs one fake trial reporting `figures`, sending its events into `events`; stops early when
/// `cancel` is set (at the next interval boundary, as the real agent does) or the client goes
/// away. `release` frees the agent's slot; it is dropped before the final event, as the real
/// agent does, so a client that starts its next trial on reading the result finds the agent
/// idle.
pub async fn run<G: Send + 'static>(
    plan: TrialPlan,
    figures: Vec<Figure>,
    pace: Pace,
    cancel: Arc<AtomicBool>,
    release: G,
    events: mpsc::Sender<EventResult>,
) {
    let send = |e: Event| send(&events, e);
    let accepted = pb::Accepted {
        trial_id: plan.trial_id.clone(),
        resolved_params: plan.params.clone(),
        accepted_unix_ns: unix_ns(SystemTime::now()),
    };
    if !send(Event::Accepted(accepted)).await || !send(Event::Placement(placement())).await {
        return;
    }
    let mut serializer = V2DeflateSerializer::new();
    let is_histogram = |f: &Figure| matches!(f.kind, Kind::Distribution { .. });
    let mut total: Vec<Option<Histogram<u64>>> = figures
        .iter()
        .map(|f| is_histogram(f).then(new_histogram))
        .collect();
    let started = Instant::now();
    let trial_start = SystemTime::now();
    let mut interval_start = trial_start;
    let mut index: u32 = 0;
    let mut covered = Duration::ZERO;
    let mut cancelled = false;
    loop {
        let due = (plan.interval * (index + 1)).min(plan.duration);
        if pace == Pace::RealTime {
            tokio::time::sleep_until(started + due).await;
        }
        let now = SystemTime::now();
        let length = due - covered;
        let hists: Vec<Option<Histogram<u64>>> = figures
            .iter()
            .map(|f| {
                is_histogram(f).then(|| {
                    let mut hist = new_histogram();
                    f.fill(&mut hist, length.as_secs_f64());
                    hist
                })
            })
            .collect();
        for (sum, hist) in total.iter_mut().zip(&hists) {
            if let (Some(sum), Some(hist)) = (sum, hist) {
                let _ = sum.add(hist);
            }
        }
        let interval = match metrics(&figures, &hists, (interval_start, now), &mut serializer) {
            Ok(metrics) => pb::Interval {
                index,
                start_unix_ns: unix_ns(interval_start),
                end_unix_ns: unix_ns(now),
                metrics,
                noise: Some(noise(length)),
            },
            Err(message) => {
                drop(release);
                let _ = send(Event::Error(pb::ProbeError {
                    trial_id: plan.trial_id.clone(),
                    message,
                }))
                .await;
                return;
            }
        };
        if !send(Event::Interval(interval)).await {
            return; // the client went away: that cancels the trial
        }
        index += 1;
        covered = due;
        interval_start = now;
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            break;
        }
        if due >= plan.duration {
            break;
        }
    }
    let end = SystemTime::now();
    let last = match metrics(&figures, &total, (trial_start, end), &mut serializer) {
        Ok(metrics) => Event::Result(pb::ProbeResult {
            trial_id: plan.trial_id.clone(),
            start_unix_ns: unix_ns(trial_start),
            end_unix_ns: unix_ns(end),
            metrics,
            placement: Some(placement()),
            intervals: index,
            cancelled,
            noise: Some(noise(covered)),
            block_device: None,
        }),
        Err(message) => Event::Error(pb::ProbeError {
            trial_id: plan.trial_id.clone(),
            message,
        }),
    };
    drop(release);
    let _ = send(last).await;
}
