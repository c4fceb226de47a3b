//! The one trial an agent runs at a time: admission, and the supervisor thread that runs it and
//! streams its events.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use quietbench_probe::placement::PlacementPlan;
use quietbench_probe::spec::TrialBounds;
use quietbench_probe::{ProbeSpec, TrialEvent, TrialSettings, run_trial};
use quietbench_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

use crate::convert;
use crate::limits::DEFAULT_MAX_TRIAL_SECS;
use quietbench_host::device_noise::{DeviceSnapshot, DeviceWatch, device_noise_between};
use quietbench_host::noise::{NoiseSnapshot, noise_between, take_snapshot};

/// The running trial, if any. Touched only when a trial starts, ends or is cancelled: never on
/// a measured path.
#[derive(Default)]
pub struct TrialSlot {
    running: Mutex<Option<Running>>,
    /// The longest trial this agent accepts, ms (`--max-trial-secs`): no trial's work may run
    /// past it, a command's grace included. 0 until set: [`DEFAULT_MAX_TRIAL_SECS`].
    max_trial_ms: AtomicU64,
}

struct Running {
    trial_id: String,
    probe: &'static str,
    owner: Owner,
    cancel: Arc<AtomicBool>,
}

/// Who started a trial, as the connection proves it: the controller certificate it showed
/// (mutual TLS), or nothing more than having passed the agent's check (a token, a local
/// agent's secret, plain loopback), which all its callers share. Only a trial's owner may
/// cancel it or learn its id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner(Vec<u8>);

impl Owner {
    /// The owner of a call: its client certificate, if any.
    pub fn of<T>(request: &tonic::Request<T>) -> Self {
        Self(
            request
                .peer_certs()
                .and_then(|certs| certs.first().map(|c| c.as_ref().to_vec()))
                .unwrap_or_default(),
        )
    }
}

/// Holds the slot while a trial runs; frees it when dropped (also if the supervisor panics).
pub struct SlotGuard {
    slot: Arc<TrialSlot>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        *self.slot.lock() = None;
    }
}

impl TrialSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        // A poisoned lock only means a panic elsewhere; the Option inside is still coherent.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims the slot for `owner`'s trial, or says that another holds it: which one only to
    /// its own owner (an id told to anyone else let a local user cancel the owner's trial and
    /// take the agent).
    pub fn claim(
        self: &Arc<Self>,
        trial_id: &str,
        probe: &'static str,
        owner: Owner,
    ) -> Result<(SlotGuard, Arc<AtomicBool>), Status> {
        let mut running = self.lock();
        if let Some(current) = running.as_ref() {
            return Err(Status::resource_exhausted(if current.owner == owner {
                format!(
                    "this agent is busy with your trial {} ({}); it runs one probe at a time, \
                     so wait for that trial to finish or cancel it",
                    current.trial_id, current.probe
                )
            } else {
                "this agent is busy with another controller's trial; it runs one probe at a \
                 time: wait for it to finish"
                    .to_string()
            }));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        *running = Some(Running {
            trial_id: trial_id.to_string(),
            probe,
            owner,
            cancel: Arc::clone(&cancel),
        });
        Ok((
            SlotGuard {
                slot: Arc::clone(self),
            },
            cancel,
        ))
    }

    /// Asks the running trial to stop if its id matches and `owner` started it. Returns
    /// whether it did (false alike for another's trial and none: nothing is learnt).
    pub fn cancel(&self, trial_id: &str, owner: &Owner) -> bool {
        match self.lock().as_ref() {
            Some(running) if running.trial_id == trial_id && running.owner == *owner => {
                running.cancel.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// The longest a trial may take on this agent, its last command's grace included
    /// (`--max-trial-secs`, which the service also checks every request's duration against).
    pub fn limit_trials_to(&self, max: Duration) {
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
        self.max_trial_ms.store(ms, Ordering::Relaxed);
    }

    /// The ceiling [`TrialSlot::limit_trials_to`] set, or the default one.
    fn max_trial(&self) -> Duration {
        match self.max_trial_ms.load(Ordering::Relaxed) {
            0 => Duration::from_secs(DEFAULT_MAX_TRIAL_SECS),
            ms => Duration::from_millis(ms),
        }
    }

    /// Stops whatever runs (agent shutdown).
    pub fn cancel_any(&self) {
        if let Some(running) = self.lock().as_ref() {
            running.cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// A validated trial, ready to run.
pub struct TrialJob {
    /// Set for an unpinned baseline: the CPUs threads may run on.
    pub unpinned: Option<Vec<u32>>,
    pub root: quietbench_host::HostRoot,
    pub trial_id: String,
    pub spec: ProbeSpec,
    pub plan: PlacementPlan,
    pub duration: Duration,
    pub interval: Duration,
}

fn event(e: pb::probe_event::Event) -> Result<pb::ProbeEvent, Status> {
    Ok(pb::ProbeEvent { event: Some(e) })
}

/// Runs `job` on a new supervisor thread that streams its events into `events`. The thread
/// inherits the caller's affinity: the gRPC runtime's housekeeping CPU.
pub fn spawn_supervisor(
    job: TrialJob,
    guard: SlotGuard,
    cancel: Arc<AtomicBool>,
    events: mpsc::Sender<Result<pb::ProbeEvent, Status>>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("qb-supervisor".into())
        .spawn(move || supervise(job, guard, &cancel, &events))
        .map(|_| ())
}

fn supervise(
    job: TrialJob,
    guard: SlotGuard,
    cancel: &Arc<AtomicBool>,
    events: &mpsc::Sender<Result<pb::ProbeEvent, Status>>,
) {
    let send = |e: pb::probe_event::Event| events.blocking_send(event(e)).is_ok();
    let accepted = pb::Accepted {
        trial_id: job.trial_id.clone(),
        resolved_params: job
            .spec
            .resolved_params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::HashMap<_, _>>(),
        accepted_unix_ns: convert::unix_ns(SystemTime::now()),
    };
    if !send(pb::probe_event::Event::Accepted(accepted)) {
        return;
    }
    // The workloads that wait on commands watch the trial's cancel flag (set by Cancel, by a
    // caller that hung up, by shutdown) and its deadline while they wait.
    let bounds = TrialBounds::new(Arc::clone(cancel), job.duration, guard.slot.max_trial());
    let spec = job.spec.clone().with_bounds(bounds);
    let settings = TrialSettings {
        duration: job.duration,
        interval: job.interval,
        plan: job.plan.clone(),
        unpinned: job.unpinned.clone(),
    };
    let mut encode_error: Option<String> = None;
    let mut noise = NoiseTracker::new(&job);
    let outcome = run_trial(&spec, &settings, cancel, &mut |e| match e {
        TrialEvent::Placement(threads) => {
            noise.start(threads);
            send(pb::probe_event::Event::Placement(convert::placement(
                &job.plan,
                threads,
                job.unpinned.is_some(),
            )))
        }
        TrialEvent::Interval(report) => match convert::interval(report) {
            Ok(mut interval) => {
                interval.noise = Some(noise.interval());
                send(pb::probe_event::Event::Interval(interval))
            }
            Err(err) => {
                encode_error = Some(err);
                false
            }
        },
    });
    let last = match (outcome, encode_error) {
        (_, Some(err)) => pb::probe_event::Event::Error(pb::ProbeError {
            trial_id: job.trial_id.clone(),
            message: err,
        }),
        (Err(err), None) => pb::probe_event::Event::Error(pb::ProbeError {
            trial_id: job.trial_id.clone(),
            message: err.to_string(),
        }),
        (Ok(outcome), None) => match convert::event_metrics(&outcome.total) {
            Ok(mut metrics) => pb::probe_event::Event::Result(pb::ProbeResult {
                metrics: {
                    metrics.extend(outcome.counters.iter().map(|c| pb::Metric {
                        name: c.name.into(),
                        unit: c.unit.into(),
                        value: Some(c.value),
                        histogram: None,
                    }));
                    metrics
                },
                trial_id: job.trial_id.clone(),
                start_unix_ns: convert::unix_ns(outcome.total.start),
                end_unix_ns: convert::unix_ns(outcome.total.end),
                placement: Some(convert::placement(
                    &job.plan,
                    &outcome.placements,
                    job.unpinned.is_some(),
                )),
                intervals: outcome.intervals,
                cancelled: outcome.cancelled,
                noise: noise.total(),
                block_device: noise.devices.disk_name().map(str::to_string),
            }),
            Err(err) => pb::probe_event::Event::Error(pb::ProbeError {
                trial_id: job.trial_id.clone(),
                message: err,
            }),
        },
    };
    give_back_freed_memory();
    // Free the agent before the final event: a client that starts its next trial the moment
    // it reads this result must find the agent idle.
    drop(guard);
    let _ = send(last);
}

/// Returns to the kernel what the trial's threads freed. Every buffer and histogram of a trial
/// is dropped when its threads end, but glibc keeps freed memory in its per-thread arenas for
/// reuse (mmap'd blocks above its threshold excepted): after two mem.latency trials of 8
/// threads (max_size_mib=8), an agent that started at 27 MiB stayed at 58 MiB without this and
/// at 35 MiB with it. An idle agent should weigh on the host what it did before the trial, and
/// the next trial's allocations are off the measured path anyway. Costs a walk over the
/// arenas, once per trial, after the measuring.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own arenas to the kernel;
    // it takes the arenas' locks, as malloc does, and leaves every live allocation alone.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Samples the noise monitors at the trial's start and at every interval, on the supervisor
/// thread. The probe threads are alive for every sample (they wait at the runner's exit gate).
struct NoiseTracker {
    root: quietbench_host::HostRoot,
    cpus: Vec<u32>,
    tids: Vec<u32>,
    first: Option<NoiseSnapshot>,
    last: Option<NoiseSnapshot>,
    /// EBS statistics of a disk probe's volume, ENA allowances of a network probe's NICs.
    devices: DeviceWatch,
    first_devices: Option<DeviceSnapshot>,
    last_devices: Option<DeviceSnapshot>,
}

/// What EC2's own counters are watched for a probe: the disk probe's volume, the network
/// probe's interfaces, nothing for CPU and memory probes.
fn device_watch(job: &TrialJob) -> DeviceWatch {
    let name = job.spec.name;
    if name.starts_with("disk.") {
        match job.spec.resolved_params.get("path") {
            Some(path) => DeviceWatch::disk(&job.root, std::path::Path::new(path)),
            None => DeviceWatch::none(),
        }
    } else if name.starts_with("net.") {
        let (nics, _) = quietbench_host::devices::read_nics(&job.root);
        let names: Vec<String> = nics
            .into_iter()
            .filter(|n| !n.is_virtual)
            .map(|n| n.name)
            .collect();
        DeviceWatch::network(&names)
    } else {
        DeviceWatch::none()
    }
}

impl NoiseTracker {
    fn new(job: &TrialJob) -> Self {
        let mut cpus = job.plan.thread_cpus.clone();
        cpus.sort_unstable();
        cpus.dedup();
        Self {
            root: job.root.clone(),
            cpus,
            tids: Vec::new(),
            first: None,
            last: None,
            devices: device_watch(job),
            first_devices: None,
            last_devices: None,
        }
    }

    fn snapshot(&self) -> NoiseSnapshot {
        take_snapshot(&self.root, std::process::id(), &self.tids, &self.cpus)
    }

    fn start(&mut self, threads: &[quietbench_probe::ThreadPlacement]) {
        self.tids = threads.iter().map(|t| t.tid as u32).collect();
        let first = self.snapshot();
        self.last = Some(first.clone());
        self.first = Some(first);
        let devices = self.devices.snapshot();
        self.last_devices = Some(devices.clone());
        self.first_devices = Some(devices);
    }

    fn interval(&mut self) -> pb::NoiseSample {
        let now = self.snapshot();
        let noise = match &self.last {
            Some(before) => noise_between(before, &now, &self.cpus),
            None => Default::default(),
        };
        self.last = Some(now);
        let devices_now = self.devices.snapshot();
        let devices = self
            .last_devices
            .as_ref()
            .map(|before| device_noise_between(before, &devices_now));
        self.last_devices = Some(devices_now);
        convert::noise(&noise, devices.as_ref(), &self.cpus)
    }

    fn total(&self) -> Option<pb::NoiseSample> {
        let (Some(first), Some(last)) = (&self.first, &self.last) else {
            return None;
        };
        let devices = match (&self.first_devices, &self.last_devices) {
            (Some(a), Some(b)) => Some(device_noise_between(a, b)),
            _ => None,
        };
        Some(convert::noise(
            &noise_between(first, last, &self.cpus),
            devices.as_ref(),
            &self.cpus,
        ))
    }
}

/// The text parameters of a request, in order.
pub fn params(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod owner_tests {
    use super::*;

    #[test]
    fn only_a_trials_owner_learns_its_id_and_may_cancel_it() {
        let slot = Arc::new(TrialSlot::default());
        let owner = Owner(b"controller-a".to_vec());
        let stranger = Owner(b"controller-b".to_vec());
        let (guard, cancel) = slot.claim("run-1-3", "exec", owner.clone()).unwrap();
        let busy = slot.claim("x", "exec", stranger.clone()).err().unwrap();
        assert_eq!(busy.code(), tonic::Code::ResourceExhausted);
        assert!(!busy.message().contains("run-1-3"), "{}", busy.message());
        let own = slot.claim("y", "exec", owner.clone()).err().unwrap();
        assert!(own.message().contains("run-1-3"), "{}", own.message());
        assert!(!slot.cancel("run-1-3", &stranger));
        assert!(
            !cancel.load(Ordering::Relaxed),
            "a stranger cancelled the trial"
        );
        assert!(slot.cancel("run-1-3", &owner));
        assert!(cancel.load(Ordering::Relaxed));
        drop(guard);
        assert!(slot.claim("z", "exec", stranger).is_ok());
    }
}
