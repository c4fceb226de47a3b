//! The synthetic probe: the event sequence a real agent streams (accepted, placement, one
//! interval per `interval_ms`, then the result), driven by a timer. Nothing is measured; each
//! interval's histogram is filled with a few dozen `record_n` calls, so one interval of one
//! agent costs microseconds and 200 agents cost the farm little.

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

use crate::host::{HOUSEKEEPING_CPU, PROBE_CPU, SyntheticHost, splitmix64, unit_interval};

/// The real agent's histogram bounds (quietbench-probe's histogram.rs: 1 ns to one hour,
/// 3 significant digits), so the bytes decode and merge exactly as a real agent's do.
const LOWEST_NS: u64 = 1;
const HIGHEST_NS: u64 = 3_600_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Distinct latency values recorded per interval: the body of the distribution, then its tail.
const BODY_VALUES: usize = 32;
/// Tail values as multiples of the mean, with their share of the interval's events.
const TAIL: [(f64, f64); 4] = [(1.2, 0.003), (1.8, 0.0012), (4.0, 0.0006), (25.0, 0.0002)];

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
    let mut hist = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid");
    hist.auto(false);
    hist
}

/// The placement a real agent reports for one pinned cpu.primes thread on a 2-vCPU host.
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

/// Quiet noise over `elapsed`: no steal, a few interrupts, a little run-queue wait.
fn noise(elapsed: Duration, bits: u64) -> pb::NoiseSample {
    let secs = elapsed.as_secs_f64();
    pb::NoiseSample {
        elapsed_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        cpus: vec![PROBE_CPU],
        steal_fraction: Some(0.0),
        interrupts: Some((secs * (4.0 + (bits % 5) as f64)) as u64),
        softirqs: Some((secs * 2.0) as u64),
        foreign_cpu_fraction: Some(0.0),
        runqueue_wait_ns: Some((secs * (2_000.0 + (bits % 3_000) as f64)) as u64),
        involuntary_switches: Some((secs * ((bits >> 8) % 3) as f64) as u64),
        migrations: Some(0),
        cpu_mhz: None,
        unavailable: vec!["cpu_mhz: no cpufreq on this host (synthetic agent-farm host)".into()],
        ..Default::default()
    }
}

/// The events of one interval (or of the whole trial): rate and latency distribution.
fn metrics(
    hist: &Histogram<u64>,
    elapsed: Duration,
    start: SystemTime,
    end: SystemTime,
    serializer: &mut V2DeflateSerializer,
) -> Result<Vec<pb::Metric>, String> {
    let mut bytes = Vec::new();
    serializer
        .serialize(hist, &mut bytes)
        .map_err(|e| format!("cannot encode histogram as HdrHistogram V2+DEFLATE: {e:?}"))?;
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(vec![
        pb::Metric {
            name: "events_per_sec".into(),
            unit: "events/s".into(),
            value: Some(hist.len() as f64 / secs),
            histogram: None,
        },
        pb::Metric {
            name: "event_latency".into(),
            unit: "ns".into(),
            value: (!hist.is_empty()).then(|| hist.mean()),
            histogram: Some(pb::Histogram {
                hdr_v2_deflate: bytes,
                unit: "ns".into(),
                start_unix_ns: unix_ns(start),
                end_unix_ns: unix_ns(end),
                clamped_count: 0,
                dropped_count: 0,
                total_count: hist.len(),
            }),
        },
    ])
}

/// Records `elapsed` worth of synthetic events at about `rate` per second: a narrow body around
/// the mean latency and a thin tail, as cpu.primes shows on a quiet CPU.
fn fill(hist: &mut Histogram<u64>, rate: f64, elapsed: Duration, seed: u64) {
    let events = (rate * elapsed.as_secs_f64()).round() as u64;
    if events == 0 {
        return;
    }
    let mean_ns = 1e9 / rate;
    let tail_share: f64 = TAIL.iter().map(|(_, share)| share).sum();
    let body = ((events as f64) * (1.0 - tail_share)) as u64;
    let mut recorded = 0;
    let mut bits = seed;
    for j in 0..BODY_VALUES {
        bits = splitmix64(bits);
        let value = mean_ns * (0.985 + 0.03 * unit_interval(bits));
        let count = body / BODY_VALUES as u64 + u64::from((j as u64) < body % BODY_VALUES as u64);
        record(hist, value, count);
        recorded += count;
    }
    for (k, (factor, share)) in TAIL.iter().enumerate() {
        let count = if k + 1 == TAIL.len() {
            events.saturating_sub(recorded)
        } else {
            ((events as f64) * share).round() as u64
        };
        record(hist, mean_ns * factor, count);
        recorded += count;
    }
}

fn record(hist: &mut Histogram<u64>, value_ns: f64, count: u64) {
    if count > 0 {
        // Cannot fail: the value is clamped into the bounds the histogram was made with.
        let _ = hist.record_n((value_ns as u64).clamp(LOWEST_NS, HIGHEST_NS), count);
    }
}

/// Sends one event; false when the client has gone away.
async fn send(events: &mpsc::Sender<EventResult>, event: Event) -> bool {
    events
        .send(Ok(pb::ProbeEvent { event: Some(event) }))
        .await
        .is_ok()
}

/// Runs one synthetic trial, sending its events into `events`; stops early when `cancel` is
/// set (at the next interval boundary, as the real agent does) or the client goes away.
/// `release` frees the agent's slot; it is dropped before the final event, as the real agent
/// does, so a client that starts its next trial on reading the result finds the agent idle.
pub async fn run<G: Send + 'static>(
    host: SyntheticHost,
    plan: TrialPlan,
    cancel: Arc<AtomicBool>,
    release: G,
    events: mpsc::Sender<EventResult>,
) {
    let send = |e: Event| send(&events, e);
    let mut resolved = plan.params.clone();
    resolved.insert("farm".into(), "synthetic".into());
    let accepted = pb::Accepted {
        trial_id: plan.trial_id.clone(),
        resolved_params: resolved,
        accepted_unix_ns: unix_ns(SystemTime::now()),
    };
    if !send(Event::Accepted(accepted)).await || !send(Event::Placement(placement())).await {
        return;
    }
    let seed = splitmix64(host.index as u64 ^ unix_ns(SystemTime::now()));
    let mut serializer = V2DeflateSerializer::new();
    let mut total = new_histogram();
    let started = Instant::now();
    let trial_start = SystemTime::now();
    let mut interval_start = (started, trial_start);
    let mut index: u32 = 0;
    let mut cancelled = false;
    loop {
        let due = (plan.interval * (index + 1)).min(plan.duration);
        tokio::time::sleep_until(started + due).await;
        let (now, now_wall) = (Instant::now(), SystemTime::now());
        let elapsed = now - interval_start.0;
        let bits = splitmix64(seed ^ u64::from(index));
        // ±0.3% from one interval to the next, around the host's figure.
        let rate = host.events_per_sec * (1.0 + 0.006 * (unit_interval(bits) - 0.5));
        // A fresh histogram per interval: the allocation is zeroed lazily by the kernel, where
        // reset() would write all 270 KB of counts every second.
        let mut hist = new_histogram();
        fill(&mut hist, rate, elapsed, bits);
        let _ = total.add(&hist);
        let interval = match metrics(&hist, elapsed, interval_start.1, now_wall, &mut serializer) {
            Ok(metrics) => pb::Interval {
                index,
                start_unix_ns: unix_ns(interval_start.1),
                end_unix_ns: unix_ns(now_wall),
                metrics,
                noise: Some(noise(elapsed, bits)),
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
        interval_start = (now, now_wall);
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            break;
        }
        if due >= plan.duration {
            break;
        }
    }
    let end_wall = SystemTime::now();
    let last = match metrics(
        &total,
        started.elapsed(),
        trial_start,
        end_wall,
        &mut serializer,
    ) {
        Ok(metrics) => Event::Result(pb::ProbeResult {
            trial_id: plan.trial_id.clone(),
            start_unix_ns: unix_ns(trial_start),
            end_unix_ns: unix_ns(end_wall),
            metrics,
            placement: Some(placement()),
            intervals: index,
            cancelled,
            noise: Some(noise(started.elapsed(), seed)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn an_interval_holds_its_rate_and_decodes() {
        let mut hist = new_histogram();
        fill(&mut hist, 1379.0, Duration::from_secs(1), 7);
        assert_eq!(hist.len(), 1379);
        let mean = 1e9 / 1379.0;
        assert!((hist.value_at_quantile(0.5) as f64 - mean).abs() < mean * 0.02);
        let now = SystemTime::now();
        let m = metrics(
            &hist,
            Duration::from_secs(1),
            now,
            now,
            &mut V2DeflateSerializer::new(),
        )
        .unwrap();
        assert_eq!(m[0].value, Some(1379.0));
        let bytes = &m[1].histogram.as_ref().unwrap().hdr_v2_deflate;
        assert_eq!(&bytes[..4], &[0x1c, 0x84, 0x93, 0x14]);
        let back: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
        assert_eq!(back, hist);
    }
}
