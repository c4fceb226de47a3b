//! agent-farm: N `quietbench.v1.AgentService` instances in one process, one per loopback port,
//! each a synthetic host whose probe measures nothing. It exists to load the controller with
//! hundreds of agents on one small machine (benches/fleet/controller_scale.sh): hundreds of
//! real agents would each run a real probe thread and fight the controller for the CPUs.
//!
//! Every agent answers what `quietbench run --agent HOST:PORT` calls: GetHost (a plausible
//! fingerprint, hostname farm-NNN), RunProbe for any probe name (accepted, placement, one
//! interval per interval_ms with real HdrHistogram V2+DEFLATE bytes, then the result), Cancel,
//! and Prepare/Restore (nothing changed). StartPeer/StopPeer answer UNIMPLEMENTED. Trials are
//! timer-driven tasks on one small runtime: an idle agent costs nothing, a running one a few
//! microseconds per interval.
//!
//! It speaks the wire contract only (quietbench-proto): no agent, probe or controller code.

mod host;
mod trial;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

use crate::host::SyntheticHost;
use crate::trial::TrialPlan;

/// The real agent's limits (quietbench-agent's service.rs), so a request the farm takes is one
/// a real agent would take too.
const MAX_DURATION_MS: u64 = 3_600_000;
const MIN_INTERVAL_MS: u64 = 10;
/// Events buffered between a trial and a slow client (the real agent's figure).
const EVENT_BUFFER: usize = 64;

#[derive(Debug, Parser)]
#[command(
    name = "agent-farm",
    about = "Serves N synthetic quietbench agents in one process, one per loopback port, for \
             controller-scale benchmarks (their probes measure nothing)"
)]
struct Args {
    /// How many agents to serve
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=5000))]
    agents: u32,
    /// Also write the agents' addresses (HOST:PORT, one a line) to FILE, atomically, once all
    /// are listening (they are always printed on standard output)
    #[arg(long, value_name = "FILE")]
    addresses_file: Option<PathBuf>,
    /// Mean events per second of the synthetic probe, before each host's scatter
    #[arg(long, default_value_t = 1379.0)]
    events_per_sec: f64,
    /// Each host's fixed deviation from the mean figure: up to ±PCT percent
    #[arg(long, value_name = "PCT", default_value_t = 3.0)]
    scatter_pct: f64,
    /// How long GetHost takes, as the real agent's 250 ms interrupt observation window does
    #[arg(long, value_name = "MS", default_value_t = 250)]
    get_host_ms: u64,
    /// Runtime worker threads serving all the agents
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
}

/// The one trial an agent runs at a time, as the real agent admits them.
#[derive(Default)]
struct Slot {
    /// The running trial's id and probe, and its cancel flag.
    running: Mutex<Option<Running>>,
}

type Running = (String, String, Arc<AtomicBool>);

/// Frees the slot when dropped.
struct SlotGuard(Arc<Slot>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        // A poisoned lock only means a panic elsewhere; the Option inside is still coherent.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn claim(
        self: &Arc<Self>,
        trial_id: &str,
        probe: &str,
    ) -> Result<(SlotGuard, Arc<AtomicBool>), Status> {
        let mut running = self.lock();
        if let Some((current, probe, _)) = running.as_ref() {
            return Err(Status::resource_exhausted(format!(
                "this agent is busy with trial {current} ({probe}); it runs one probe at a \
                 time, so wait for that trial to finish or cancel it"
            )));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        *running = Some((trial_id.to_string(), probe.to_string(), Arc::clone(&cancel)));
        Ok((SlotGuard(Arc::clone(self)), cancel))
    }

    fn cancel(&self, trial_id: &str) -> bool {
        match self.lock().as_ref() {
            Some((id, _, cancel)) if id == trial_id => {
                cancel.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }
}

/// One synthetic agent.
struct FarmAgent {
    host: SyntheticHost,
    get_host_delay: Duration,
    slot: Arc<Slot>,
    trials: AtomicU64,
}

impl FarmAgent {
    fn validate(&self, req: pb::RunProbeRequest) -> Result<TrialPlan, Status> {
        if req.probe.is_empty() {
            return Err(Status::invalid_argument(
                "no probe named: give one, e.g. cpu.primes",
            ));
        }
        if req.duration_ms == 0 || req.duration_ms > MAX_DURATION_MS {
            return Err(Status::invalid_argument(format!(
                "duration_ms {} is out of range: give 1 to {MAX_DURATION_MS} (one hour)",
                req.duration_ms
            )));
        }
        let interval_ms = if req.interval_ms == 0 {
            1000
        } else {
            req.interval_ms
        };
        if interval_ms < MIN_INTERVAL_MS {
            return Err(Status::invalid_argument(format!(
                "interval_ms {interval_ms} is too short: give at least {MIN_INTERVAL_MS}"
            )));
        }
        let trial_id = if req.trial_id.is_empty() {
            let n = self.trials.fetch_add(1, Ordering::Relaxed);
            format!("{}-trial-{n}", self.host.hostname)
        } else if req.trial_id.len() > 128 {
            return Err(Status::invalid_argument(
                "trial_id is longer than 128 bytes",
            ));
        } else {
            req.trial_id
        };
        Ok(TrialPlan {
            trial_id,
            probe: req.probe,
            params: req.params,
            duration: Duration::from_millis(req.duration_ms),
            interval: Duration::from_millis(interval_ms.min(req.duration_ms)),
        })
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ProbeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for FarmAgent {
    async fn get_host(
        &self,
        _request: Request<pb::GetHostRequest>,
    ) -> Result<Response<pb::GetHostResponse>, Status> {
        tokio::time::sleep(self.get_host_delay).await;
        Ok(Response::new(pb::GetHostResponse {
            fingerprint: Some(self.host.fingerprint()),
            agent_version: format!("{}-agent-farm", env!("CARGO_PKG_VERSION")),
        }))
    }

    type RunProbeStream = EventStream;

    async fn run_probe(
        &self,
        request: Request<pb::RunProbeRequest>,
    ) -> Result<Response<Self::RunProbeStream>, Status> {
        let plan = self.validate(request.into_inner())?;
        let (guard, cancel) = self.slot.claim(&plan.trial_id, &plan.probe)?;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        tokio::spawn(trial::run(self.host.clone(), plan, cancel, guard, tx));
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
                detail: "agent-farm: a synthetic host; nothing was changed".into(),
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
            "agent-farm serves no peer: its hosts are synthetic, so network probes cannot run",
        ))
    }

    async fn stop_peer(
        &self,
        _request: Request<pb::StopPeerRequest>,
    ) -> Result<Response<pb::StopPeerResponse>, Status> {
        Err(Status::unimplemented("agent-farm serves no peer"))
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads as usize)
        .thread_name("farm")
        .enable_all()
        .build()
        .context("starting the farm's runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let mut addresses: Vec<SocketAddr> = Vec::with_capacity(args.agents as usize);
    for index in 0..args.agents as usize {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .with_context(|| format!("agent {index}: cannot listen on a loopback port"))?;
        addresses.push(listener.local_addr()?);
        let agent = FarmAgent {
            host: SyntheticHost::new(index, args.events_per_sec, args.scatter_pct),
            get_host_delay: Duration::from_millis(args.get_host_ms),
            slot: Arc::default(),
            trials: AtomicU64::new(0),
        };
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(AgentServiceServer::new(agent))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
            if let Err(err) = served {
                eprintln!("agent-farm: agent {index} stopped serving: {err}");
            }
        });
    }
    let text: String = addresses.iter().map(|a| format!("{a}\n")).collect();
    let mut stdout = std::io::stdout();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    if let Some(path) = &args.addresses_file {
        // Written whole, then renamed: a script waiting for the file never reads half a list.
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
    }
    eprintln!(
        "agent-farm: {} agents listening on 127.0.0.1; SIGTERM or Ctrl-C stops them",
        addresses.len()
    );
    wait_for_signal().await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the farm still serves; a signal then stops it the default way.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
