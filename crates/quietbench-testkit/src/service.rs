//! One fake agent: `quietbench.v1.AgentService` as the controller calls it. GetHost answers the
//! host's fingerprint; RunProbe accepts any probe and reports the figures the host's function
//! gives; Cancel, Prepare and Restore behave as on a host where nothing can be changed;
//! StartPeer and StopPeer answer UNIMPLEMENTED.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quietbench_proto::trial_request;
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_server::AgentService;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::figures::{Ask, FigureFn};
use crate::host::{Cpu, fingerprint};
use crate::trial::{self, Pace, TrialPlan};

/// Events buffered between a trial and a slow client (the real agent's figure).
const EVENT_BUFFER: usize = 64;

/// A fake host: its name, processor, figures and pace.
#[derive(Clone)]
pub struct FakeHost {
    pub hostname: String,
    pub cpu: Cpu,
    /// Each trial's figures.
    pub figures: Arc<FigureFn>,
    pub pace: Pace,
    /// How long GetHost takes (the real agent watches interrupts for 250 ms).
    pub get_host_delay: Duration,
}

impl FakeHost {
    /// A host that answers at once and reports what `figures` gives for each trial.
    pub fn new(
        hostname: &str,
        cpu: Cpu,
        figures: impl Fn(&Ask<'_>) -> Vec<crate::Figure> + Send + Sync + 'static,
    ) -> Self {
        Self {
            hostname: hostname.into(),
            cpu,
            figures: Arc::new(figures),
            pace: Pace::Instant,
            get_host_delay: Duration::ZERO,
        }
    }
}

/// The one trial an agent runs at a time, as the real agent admits them, and how many it has
/// accepted (numbered under the same lock, so a refused request takes no number).
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    /// The running trial's id and probe, and its cancel flag.
    running: Option<(String, String, Arc<AtomicBool>)>,
    accepted: u64,
}

/// Frees the slot when dropped.
struct SlotGuard(Arc<Slot>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.lock().running = None;
    }
}

/// A trial the slot admitted: its number on this agent (from 0) and id.
struct Claim {
    guard: SlotGuard,
    cancel: Arc<AtomicBool>,
    number: u64,
    trial_id: String,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        // A poisoned lock only means a panic elsewhere; the state inside is still coherent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits trial `requested_id` (when empty, `<hostname>-trial-<number>`).
    fn claim(
        self: &Arc<Self>,
        requested_id: &str,
        probe: &str,
        hostname: &str,
    ) -> Result<Claim, Status> {
        let mut state = self.lock();
        if let Some((current, probe, _)) = state.running.as_ref() {
            return Err(Status::resource_exhausted(format!(
                "this agent is busy with trial {current} ({probe}); it runs one probe at a \
                 time, so wait for that trial to finish or cancel it"
            )));
        }
        let number = state.accepted;
        state.accepted += 1;
        let trial_id = if requested_id.is_empty() {
            format!("{hostname}-trial-{number}")
        } else {
            requested_id.to_string()
        };
        let cancel = Arc::new(AtomicBool::new(false));
        state.running = Some((trial_id.clone(), probe.to_string(), Arc::clone(&cancel)));
        Ok(Claim {
            guard: SlotGuard(Arc::clone(self)),
            cancel,
            number,
            trial_id,
        })
    }

    fn cancel(&self, trial_id: &str) -> bool {
        match self.lock().running.as_ref() {
            Some((id, _, cancel)) if id == trial_id => {
                cancel.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    fn accepted(&self) -> u64 {
        self.lock().accepted
    }
}

/// One fake agent, host number `index` of its fleet.
pub struct FakeAgent {
    index: usize,
    host: FakeHost,
    slot: Arc<Slot>,
}

impl FakeAgent {
    pub fn new(index: usize, host: FakeHost) -> Self {
        Self {
            index,
            host,
            slot: Arc::default(),
        }
    }

    /// A handle that reads how many trials this agent has accepted while it serves.
    pub fn counter(&self) -> TrialCounter {
        TrialCounter(Arc::clone(&self.slot))
    }

    fn validate(&self, req: pb::RunProbeRequest) -> Result<TrialPlan, Status> {
        // The real agent's own checks: a test cannot pass with a request it would refuse.
        let timing = trial_request::check(
            &req.probe,
            &req.trial_id,
            req.duration_ms,
            req.interval_ms,
            trial_request::DEFAULT_MAX_DURATION_MS,
        )
        .map_err(Status::invalid_argument)?;
        Ok(TrialPlan {
            trial_id: req.trial_id,
            probe: req.probe,
            params: req.params,
            duration: timing.duration,
            interval: timing.interval,
        })
    }
}

/// Reads how many trials an agent has accepted.
#[derive(Clone)]
pub struct TrialCounter(Arc<Slot>);

impl TrialCounter {
    pub fn get(&self) -> u64 {
        self.0.accepted()
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ProbeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for FakeAgent {
    async fn get_host(
        &self,
        _request: Request<pb::GetHostRequest>,
    ) -> Result<Response<pb::GetHostResponse>, Status> {
        tokio::time::sleep(self.host.get_host_delay).await;
        Ok(Response::new(pb::GetHostResponse {
            fingerprint: Some(fingerprint(&self.host.hostname, &self.host.cpu)),
            agent_version: format!("{}-testkit", env!("CARGO_PKG_VERSION")),
        }))
    }

    type RunProbeStream = EventStream;

    async fn run_probe(
        &self,
        request: Request<pb::RunProbeRequest>,
    ) -> Result<Response<Self::RunProbeStream>, Status> {
        let mut plan = self.validate(request.into_inner())?;
        let claim = self
            .slot
            .claim(&plan.trial_id, &plan.probe, &self.host.hostname)?;
        plan.trial_id = claim.trial_id;
        let figures = (self.host.figures)(&Ask {
            host: self.index,
            trial: claim.number,
            probe: &plan.probe,
            params: &plan.params,
        });
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        tokio::spawn(trial::run(
            plan,
            figures,
            self.host.pace,
            claim.cancel,
            claim.guard,
            tx,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let cancelled = self.slot.cancel(&request.get_ref().trial_id);
        Ok(Response::new(pb::CancelResponse { cancelled }))
    }

    async fn prepare(
        &self,
        request: Request<pb::PrepareRequest>,
    ) -> Result<Response<pb::PrepareResponse>, Status> {
        let req = request.into_inner();
        let asked = [
            ("aslr", req.all || req.aslr_off),
            ("irq_affinity", req.all || req.steer_irqs),
            ("irqbalance", req.all || req.pause_irqbalance),
            ("governor", req.all || req.performance_governor),
            ("thp", req.all || !req.thp_mode.is_empty()),
            ("drop_caches", req.all || req.drop_caches),
        ];
        let controls = asked
            .iter()
            .filter(|(_, asked)| *asked)
            .map(|(control, _)| pb::ControlReport {
                control: (*control).into(),
                target: String::new(),
                outcome: pb::control_report::Outcome::Skipped as i32,
                detail: "a fake host (quietbench-testkit): nothing was changed".into(),
            })
            .collect();
        Ok(Response::new(pb::PrepareResponse {
            controls,
            journal_path: String::new(),
        }))
    }

    async fn restore(
        &self,
        _request: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        Ok(Response::new(pb::RestoreResponse {
            controls: Vec::new(),
        }))
    }

    async fn start_peer(
        &self,
        _request: Request<pb::StartPeerRequest>,
    ) -> Result<Response<pb::StartPeerResponse>, Status> {
        Err(Status::unimplemented(
            "a fake agent serves no peer: its host is not real, so network probes cannot run",
        ))
    }

    async fn stop_peer(
        &self,
        _request: Request<pb::StopPeerRequest>,
    ) -> Result<Response<pb::StopPeerResponse>, Status> {
        Err(Status::unimplemented("a fake agent serves no peer"))
    }

    async fn start_server(
        &self,
        _request: Request<pb::StartServerRequest>,
    ) -> Result<Response<pb::StartServerResponse>, Status> {
        Err(Status::unimplemented(
            "a fake agent runs no server: its host is not real, so the http probe cannot run",
        ))
    }

    async fn stop_server(
        &self,
        _request: Request<pb::StopServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        Err(Status::unimplemented("a fake agent runs no server"))
    }

    async fn sample_server(
        &self,
        _request: Request<pb::SampleServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        Err(Status::unimplemented("a fake agent runs no server"))
    }
}
