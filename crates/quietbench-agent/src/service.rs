//! The gRPC service: validates requests and translates; the work happens in trial.rs and in the
//! probe crate.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quietbench_host::HostRoot;
use quietbench_probe::placement::{
    MachineLayout, PlacementPlan, PlacementRequest, network_kind, plan,
};
use quietbench_probe::{ProbeContext, ProbeSpec, resolve_probe_in};
use quietbench_proto::trial_request;
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_server::AgentService;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::limits::{DEFAULT_MAX_TRIAL_SECS, check_cpus, check_params};
use crate::machine::{OBSERVATION_WINDOW, describe};
use crate::peer::PeerSlot;
use crate::trial::{Owner, TrialJob, TrialSlot, params, spawn_supervisor};
use crate::tuning::Tuner;
use crate::user_server::ServerSlot;

/// Events buffered between the supervisor and a slow client.
const EVENT_BUFFER: usize = 64;

/// The agent's state shared by all RPCs.
pub struct Agent {
    root: HostRoot,
    allowed_cpus: Vec<u32>,
    /// What the placement planner knows of the machine: read at start-up, refreshed by GetHost.
    layout: Mutex<Arc<MachineLayout>>,
    slot: Arc<TrialSlot>,
    tuner: Arc<Tuner>,
    peer: Arc<PeerSlot>,
    /// The user's server of the `http` probe (StartServer), journaled in the state directory.
    server: Arc<ServerSlot>,
    /// `exec` (a user's command) may run: `--allow-exec`.
    allow_exec: bool,
    /// Longest trial accepted, ms (`--max-trial-secs`).
    max_duration_ms: u64,
    /// What the probes are told of this agent (its state directory).
    probe_context: ProbeContext,
}

impl Agent {
    pub fn new(
        root: HostRoot,
        allowed_cpus: Vec<u32>,
        layout: MachineLayout,
        tuner: Arc<Tuner>,
    ) -> Self {
        Self {
            root,
            allowed_cpus,
            layout: Mutex::new(Arc::new(layout)),
            slot: Arc::default(),
            tuner,
            peer: Arc::default(),
            server: Arc::new(ServerSlot::new(&crate::tuning::default_state_dir())),
            allow_exec: false,
            max_duration_ms: DEFAULT_MAX_TRIAL_SECS * 1000,
            probe_context: ProbeContext::default(),
        }
    }

    /// The agent's state directory, where disk.scan keeps pre-warm progress and StartServer
    /// journals the user's server (`--state-dir`).
    pub fn with_state_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.server = Arc::new(ServerSlot::new(&dir));
        self.probe_context.state_dir = Some(dir);
        self
    }

    /// The user's server slot, so start-up can stop a crashed agent's servers and a graceful
    /// stop can stop this one's.
    pub fn server_slot(&self) -> Arc<ServerSlot> {
        Arc::clone(&self.server)
    }

    /// The trial slot, so shutdown can cancel whatever runs.
    pub fn slot(&self) -> Arc<TrialSlot> {
        Arc::clone(&self.slot)
    }

    /// Lets `exec` probes run a user's command (`--allow-exec`); off by default, since whoever
    /// reaches the agent would run commands as the agent's user.
    pub fn allowing_exec(mut self, allow: bool) -> Self {
        self.allow_exec = allow;
        self
    }

    /// The longest trial this agent accepts (`--max-trial-secs`).
    pub fn with_max_trial(mut self, secs: u64) -> Self {
        self.max_duration_ms = secs.saturating_mul(1000);
        self.slot
            .limit_trials_to(Duration::from_millis(self.max_duration_ms));
        self
    }

    fn validate(&self, req: &pb::RunProbeRequest) -> Result<TrialJob, Status> {
        let timing = trial_request::check(
            &req.probe,
            &req.trial_id,
            req.duration_ms,
            req.interval_ms,
            self.max_duration_ms,
        )
        .map_err(Status::invalid_argument)?;
        check_params(&req.params)?;
        check_cpus("cpus", &req.cpus)?;
        if req.probe == "exec" && !self.allow_exec {
            return Err(exec_refused("exec"));
        }
        let spec = resolve_probe_in(&req.probe, &params(&req.params), &self.probe_context)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let layout = Arc::clone(&self.layout.lock().unwrap_or_else(|e| e.into_inner()));
        // A peer on this machine changes where network threads belong (placement's
        // network_kind): its readers share our CPUs, and no NIC carries the flows.
        // (`http`'s and `tcp`'s other end is the user's server, at `target`.)
        let peer = req
            .params
            .get("peer")
            .or_else(|| req.params.get("target"))
            .and_then(|p| p.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.ip());
        let request = PlacementRequest {
            threads: spec.threads,
            kind: network_kind(spec.work, peer, is_own_address),
            explicit_cpus: req.cpus.clone(),
        };
        if req.unpinned && !req.cpus.is_empty() {
            return Err(Status::invalid_argument(
                "unpinned and cpus contradict each other: give one or the other",
            ));
        }
        let mut plan =
            plan(&layout, &request).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if req.unpinned {
            plan.notes = vec![
                "unpinned on request: the scheduler places the threads on any allowed CPU".into(),
            ];
        }
        check_duet(&spec, &plan, req.unpinned)?;
        let trial_id = if req.trial_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            req.trial_id.clone()
        };
        Ok(TrialJob {
            unpinned: req.unpinned.then(|| self.allowed_cpus.clone()),
            root: self.root.clone(),
            trial_id,
            spec,
            plan,
            duration: timing.duration,
            interval: timing.interval,
        })
    }
}

/// The refusal of a user's command on an agent without `--allow-exec`; `what` runs it.
fn exec_refused(what: &str) -> Status {
    Status::permission_denied(format!(
        "{what} runs a user's command and is off on this agent: start it with --allow-exec to \
         allow it (quietbench run --local starts its agent so)"
    ))
}

/// Refuses a duet that cannot be one. Its two sides must run at the same moment, each on a CPU
/// of its own: on one CPU they would take turns on it, each side's time would hold the other's,
/// and the interval printed from such pairs would compare nothing (issue 28: refuse rather than
/// print a false interval). Unpinned, the scheduler may do the same at any moment.
fn check_duet(spec: &ProbeSpec, plan: &PlacementPlan, unpinned: bool) -> Result<(), Status> {
    if spec.resolved_params.get("duet").map(String::as_str) != Some("true") {
        return Ok(());
    }
    if unpinned {
        return Err(Status::invalid_argument(
            "a duet pins A and B to two CPUs of their own: it cannot run unpinned",
        ));
    }
    if plan.shares_cpus {
        let cpus: std::collections::BTreeSet<u32> = plan.thread_cpus.iter().copied().collect();
        let cpus: Vec<u32> = cpus.into_iter().collect();
        return Err(Status::failed_precondition(format!(
            "a duet runs A and B at the same moment on two CPUs, and this one would put both on \
             CPU {}: give the agent two CPUs (its affinity, or --cpus with two), or use \
             --interleave invocations, which takes turns on one CPU",
            quietbench_host::format_cpu_list(&cpus)
        )));
    }
    Ok(())
}

/// Refuses CPUs this agent may not use (not online, or outside its affinity), naming them: a
/// host change aimed at CPU 99999 is a mistake to report, not a no-op to journal.
fn check_known_cpus(field: &str, cpus: &[u32], allowed: &[u32]) -> Result<(), Status> {
    let unknown: Vec<String> = cpus
        .iter()
        .filter(|c| !allowed.contains(c))
        .map(u32::to_string)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(Status::invalid_argument(format!(
        "{field}: CPU {} is not one this agent may use (it may use {})",
        unknown.join(", "),
        quietbench_host::format_cpu_list(allowed)
    )))
}

/// Whether `ip` is one of this host's addresses (in this network namespace): binding a UDP
/// socket to it succeeds. Nothing is sent; the socket closes at once. Two agents in two
/// namespaces of one machine are not found this way (each sees only its own addresses).
fn is_own_address(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok()
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ProbeEvent, Status>> + Send>>;

/// A trial's event stream that cancels the trial when gRPC drops it: the controller hung up
/// (it was killed, or its connection broke), so nobody will read the result. Without this the
/// trial would run to its end and hold the agent, and a `resume` arriving at once would find
/// the agent busy with its own run's orphan. After the last event the trial is over and the
/// flag no longer matters.
struct CancelOnDrop {
    events: ReceiverStream<Result<pb::ProbeEvent, Status>>,
    cancel: Arc<std::sync::atomic::AtomicBool>,
}

impl Stream for CancelOnDrop {
    type Item = Result<pb::ProbeEvent, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        Pin::new(&mut self.events).poll_next(cx)
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[tonic::async_trait]
impl AgentService for Agent {
    async fn get_host(
        &self,
        _request: Request<pb::GetHostRequest>,
    ) -> Result<Response<pb::GetHostResponse>, Status> {
        let root = self.root.clone();
        let allowed = self.allowed_cpus.clone();
        let view =
            tokio::task::spawn_blocking(move || describe(&root, &allowed, OBSERVATION_WINDOW))
                .await
                .map_err(|e| Status::internal(format!("reading the host failed: {e}")))?;
        *self.layout.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(view.layout);
        Ok(Response::new(pb::GetHostResponse {
            fingerprint: Some(view.fingerprint),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
        }))
    }

    type RunProbeStream = EventStream;

    async fn run_probe(
        &self,
        request: Request<pb::RunProbeRequest>,
    ) -> Result<Response<Self::RunProbeStream>, Status> {
        let job = self.validate(request.get_ref())?;
        if request.get_ref().check_only {
            return Ok(Response::new(Box::pin(tokio_stream::empty())));
        }
        let owner = Owner::of(&request);
        let (guard, cancel) = self.slot.claim(&job.trial_id, job.spec.name, owner)?;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        tracing::info!(trial = %job.trial_id, probe = job.spec.name, "trial accepted");
        spawn_supervisor(job, guard, Arc::clone(&cancel), tx)
            .map_err(|e| Status::internal(format!("cannot start the probe supervisor: {e}")))?;
        Ok(Response::new(Box::pin(CancelOnDrop {
            events: ReceiverStream::new(rx),
            cancel,
        })))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        let cancelled = self
            .slot
            .cancel(&request.get_ref().trial_id, &Owner::of(&request));
        Ok(Response::new(pb::CancelResponse { cancelled }))
    }

    async fn prepare(
        &self,
        request: Request<pb::PrepareRequest>,
    ) -> Result<Response<pb::PrepareResponse>, Status> {
        check_cpus("probe_cpus", &request.get_ref().probe_cpus)?;
        check_known_cpus(
            "probe_cpus",
            &request.get_ref().probe_cpus,
            &self.allowed_cpus,
        )?;
        let req = convert::tune_request(request.into_inner());
        let tuner = Arc::clone(&self.tuner);
        let reports = tokio::task::spawn_blocking(move || tuner.prepare(req))
            .await
            .map_err(|e| Status::internal(format!("tuning failed: {e}")))??;
        Ok(Response::new(pb::PrepareResponse {
            controls: reports.into_iter().map(convert::control_report).collect(),
            journal_path: self.tuner.journal_path().display().to_string(),
        }))
    }

    async fn restore(
        &self,
        _request: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        let tuner = Arc::clone(&self.tuner);
        let reports = tokio::task::spawn_blocking(move || tuner.restore())
            .await
            .map_err(|e| Status::internal(format!("restore failed: {e}")))??;
        Ok(Response::new(pb::RestoreResponse {
            controls: reports.into_iter().map(convert::control_report).collect(),
        }))
    }

    async fn start_peer(
        &self,
        request: Request<pb::StartPeerRequest>,
    ) -> Result<Response<pb::StartPeerResponse>, Status> {
        let bind: std::net::IpAddr = request.get_ref().bind_address.parse().map_err(|_| {
            Status::invalid_argument(format!(
                "bind_address '{}' is not an IP address",
                request.get_ref().bind_address
            ))
        })?;
        let same_machine = request.get_ref().same_machine;
        let secret = quietbench_probe::net::Secret::from_hex(&request.get_ref().secret)
            .map_err(|why| Status::invalid_argument(format!("secret: {why}")))?;
        let layout = Arc::clone(&self.layout.lock().unwrap_or_else(|e| e.into_inner()));
        let peer = Arc::clone(&self.peer);
        let started =
            tokio::task::spawn_blocking(move || peer.start(bind, same_machine, &layout, secret))
                .await
                .map_err(|e| Status::internal(format!("starting the peer server failed: {e}")))??;
        Ok(Response::new(started))
    }

    async fn stop_peer(
        &self,
        _request: Request<pb::StopPeerRequest>,
    ) -> Result<Response<pb::StopPeerResponse>, Status> {
        let peer = Arc::clone(&self.peer);
        let response = tokio::task::spawn_blocking(move || peer.stop())
            .await
            .map_err(|e| Status::internal(format!("stopping the peer server failed: {e}")))?;
        Ok(Response::new(response))
    }

    async fn start_server(
        &self,
        request: Request<pb::StartServerRequest>,
    ) -> Result<Response<pb::StartServerResponse>, Status> {
        if !self.allow_exec {
            return Err(exec_refused("StartServer (the http or tcp probe's server)"));
        }
        let req = request.into_inner();
        check_cpus("cpus", &req.cpus)?;
        check_known_cpus("cpus", &req.cpus, &self.allowed_cpus)?;
        let checked = crate::user_server::check_request(&req)?;
        let cpus = {
            let layout = self.layout.lock().unwrap_or_else(|e| e.into_inner());
            crate::user_server::server_cpus(&layout, &req.cpus, checked.threads)
        };
        let slot = Arc::clone(&self.server);
        let allowed = self.allowed_cpus.clone();
        let started = tokio::task::spawn_blocking(move || slot.start(&checked, cpus, &allowed))
            .await
            .map_err(|e| Status::internal(format!("starting the server failed: {e}")))??;
        Ok(Response::new(started))
    }

    async fn stop_server(
        &self,
        request: Request<pb::StopServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        let keep_as = request.into_inner().keep_as;
        if !keep_as.is_empty() {
            crate::user_server::check_keep_as(&keep_as)?;
        }
        let slot = Arc::clone(&self.server);
        let response = tokio::task::spawn_blocking(move || slot.stop(&keep_as))
            .await
            .map_err(|e| Status::internal(format!("stopping the server failed: {e}")))?;
        Ok(Response::new(response))
    }

    async fn sample_server(
        &self,
        request: Request<pb::SampleServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        let req = request.into_inner();
        crate::user_server::check_keep_as(&req.keep_as)?;
        let renew = match req.max_life_ms {
            0 => None,
            ms => Some(crate::user_server::check_max_life_ms(ms)?),
        };
        let slot = Arc::clone(&self.server);
        let response = tokio::task::spawn_blocking(move || slot.sample(&req.keep_as, renew))
            .await
            .map_err(|e| Status::internal(format!("sampling the server failed: {e}")))?;
        Ok(Response::new(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_the_agent_may_not_use_are_refused_by_number() {
        assert!(check_known_cpus("probe_cpus", &[1, 2], &[0, 1, 2, 3]).is_ok());
        let err = check_known_cpus("probe_cpus", &[1, 99999], &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.message().contains("CPU 99999") && err.message().contains("0-3"),
            "{}",
            err.message()
        );
    }

    /// An agent that may run commands on `cpus`, with no host behind it (validation only).
    fn agent_on(cpus: &[u32]) -> (Agent, tempfile::TempDir) {
        let state = tempfile::tempdir().unwrap();
        let root = HostRoot::at(state.path());
        let tuner = Arc::new(crate::tuning::Tuner::start(
            root.clone(),
            state.path(),
            cpus.to_vec(),
        ));
        let agent = Agent::new(
            root,
            cpus.to_vec(),
            MachineLayout::allowed_only(cpus),
            tuner,
        )
        .allowing_exec(true);
        (agent, state)
    }

    fn duet_request(cpus: &[u32], unpinned: bool) -> pb::RunProbeRequest {
        pb::RunProbeRequest {
            probe: "exec".into(),
            duration_ms: 1000,
            params: [("cmd", "true"), ("cmd_b", "true"), ("duet", "true")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cpus: cpus.to_vec(),
            unpinned,
            ..Default::default()
        }
    }

    #[test]
    fn a_duet_on_one_cpu_or_unpinned_is_refused_with_the_reason() {
        let (one, _state) = agent_on(&[3]);
        let err = one.validate(&duet_request(&[], false)).err().unwrap();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(
            err.message().contains("both on CPU 3") && err.message().contains("invocations"),
            "{}",
            err.message()
        );

        let (two, _state) = agent_on(&[0, 1]);
        let job = two.validate(&duet_request(&[], false)).unwrap();
        assert_eq!(job.plan.thread_cpus, vec![1, 0], "a side on each CPU");
        let err = two.validate(&duet_request(&[1, 1], false)).err().unwrap();
        assert!(err.message().contains("both on CPU 1"), "{}", err.message());
        let err = two.validate(&duet_request(&[], true)).err().unwrap();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("unpinned"), "{}", err.message());

        // Not a duet: one CPU is enough for A and B taking turns.
        let mut turns = duet_request(&[], false);
        turns.params.remove("duet");
        assert!(one.validate(&turns).is_ok());
    }
}
