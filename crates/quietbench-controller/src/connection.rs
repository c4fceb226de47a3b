//! A connection to one agent, over the wire contract only. Every failure names the agent and
//! says what to do; nothing waits forever, and nothing an agent sends is taken unchecked
//! ([`intake`]).
//!
//! Text in errors that came from the agent (its messages, the transport's words about it) is
//! escaped when the error is displayed ([`escape_remote`]): errors end up on the terminal.

pub mod intake;
mod servers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::report::remote_text::escape_remote;
use crate::tls::{ClientTls, TokenHeader};
use intake::{Retained, RunBudget, TrialIntake, TrialLimits};
use tonic::{Code, Status};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Silence tolerated before a trial's first event (it must answer within this).
const FIRST_EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long Prepare and Restore may take (dropping the page cache syncs every disk).
const TUNING_TIMEOUT: Duration = Duration::from_secs(60);
/// Silence tolerated between events, on top of the interval.
const EVENT_SLACK: Duration = Duration::from_secs(3);
/// How long a trial start waits out an agent busy with another trial. An agent cancels a trial
/// whose controller hung up, but needs a moment to wind it down: a `resume` right after the
/// kill, or a reconnect, would otherwise find the agent busy with its own run's orphan. A
/// trial of another controller still holds it after this, and that refusal is reported.
const BUSY_GRACE: Duration = Duration::from_secs(5);
const BUSY_RETRY: Duration = Duration::from_millis(100);

/// Talking to an agent failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The address is not usable.
    #[error("'{agent}' is not an agent address: {why} (give HOST:PORT, e.g. 10.0.0.5:7700)")]
    BadAddress {
        /// What was given.
        agent: String,
        /// Why it failed.
        why: String,
    },
    /// No connection could be made.
    #[error(
        "cannot reach agent {agent}: {}; is quietbench-agent running there, and is the port right?",
        escape_remote(.detail)
    )]
    Unreachable {
        /// The agent.
        agent: String,
        /// The transport's words.
        detail: String,
    },
    /// The agent said no.
    #[error("agent {agent} refused the request: {}", escape_remote(.message))]
    Refused {
        /// The agent.
        agent: String,
        /// The agent's reason.
        message: String,
    },
    /// The TLS handshake failed: whose side refused and why.
    #[error("agent {agent}: {}", escape_remote(.why))]
    Tls {
        /// The agent.
        agent: String,
        /// What failed, in words.
        why: String,
    },
    /// The agent does not allow what was asked (e.g. `exec` without `--allow-exec`).
    #[error("agent {agent} does not allow this: {}", escape_remote(.message))]
    PermissionDenied {
        /// The agent.
        agent: String,
        /// The agent's reason.
        message: String,
    },
    /// The connection broke.
    #[error(
        "lost agent {agent} mid-trial ({}); it may have crashed or been killed",
        escape_remote(.detail)
    )]
    Lost {
        /// The agent.
        agent: String,
        /// What the transport said.
        detail: String,
    },
    /// The agent went quiet.
    #[error(
        "agent {agent} sent nothing for {seconds} s; it may be stalled, or its host unreachable"
    )]
    Stalled {
        /// The agent.
        agent: String,
        /// How long it was quiet.
        seconds: u64,
    },
    /// The probe failed on the agent.
    #[error("trial failed on agent {agent}: {}", escape_remote(.message))]
    TrialFailed {
        /// The agent.
        agent: String,
        /// The agent's message.
        message: String,
    },
    /// The agent sent something the protocol does not allow.
    #[error("agent {agent} broke the protocol: {}", escape_remote(.what))]
    Protocol {
        /// The agent.
        agent: String,
        /// What was wrong.
        what: String,
    },
    /// The trial ran past its deadline ([`TrialLimits::deadline`]); it was cancelled.
    #[error(
        "agent {agent} did not finish trial '{trial}' by its deadline, {}; the controller \
         cancelled it (the agent may be broken, or its host overloaded)",
        escape_remote(.limit)
    )]
    Overran {
        /// The agent.
        agent: String,
        /// The trial id.
        trial: String,
        /// The deadline, in words.
        limit: String,
    },
    /// The agent sent more than a trial may hold ([`intake`]); the trial was refused so the
    /// controller's memory stays bounded.
    #[error(
        "agent {agent} sent more than a trial may hold: {}; the trial was refused",
        escape_remote(.what)
    )]
    TooMuch {
        /// The agent.
        agent: String,
        /// Which bound, and where.
        what: String,
    },
}

/// A trial's whole event stream, once it ended with a result, every event checked.
#[derive(Debug)]
pub struct CompletedTrial {
    /// The acceptance.
    pub accepted: pb::Accepted,
    /// The placement event.
    pub placement: Option<pb::Placement>,
    /// Every interval, in order.
    pub intervals: Vec<pb::Interval>,
    /// The final result.
    pub result: pb::ProbeResult,
    /// What the trial's record holds of its run's budget: [`Retained::keep`] it when the record
    /// is kept, or drop it to give the bytes back.
    pub retained: Retained,
}

/// How an agent is reached.
#[derive(Clone)]
pub enum AgentAccess {
    /// An agent of a fleet: with the command's TLS identity when it has one, plain otherwise.
    Fleet(Option<Arc<ClientTls>>),
    /// An agent this controller started on this machine: plain loopback, every call carrying
    /// the secret the agent was handed on its standard input. Never the fleet identity: a
    /// local agent has no certificate (a `serve` with one could not run local plans).
    Local {
        /// The secret.
        secret: String,
    },
}

impl std::fmt::Debug for AgentAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fleet(None) => f.write_str("Fleet(plain)"),
            Self::Fleet(Some(tls)) => write!(f, "Fleet(TLS, CA {})", tls.ca.display()),
            Self::Local { .. } => f.write_str("Local { secret: <hidden> }"),
        }
    }
}

/// A connected agent.
#[derive(Debug, Clone)]
pub struct AgentConnection {
    label: String,
    client: AgentServiceClient<InterceptedService<Channel, TokenHeader>>,
    /// The agent has answered a call on this connection. Over TLS 1.3 a server that refuses
    /// the client's certificate does so after the client's side of the handshake is done, so
    /// the refusal shows as the first call's connection dropping.
    answered: bool,
    /// Plain gRPC to a fleet's agent: an agent that drops the first call may be serving TLS.
    plain_fleet: bool,
    /// The TLS identity the connection was made with, for what a refusal means.
    tls: Option<Arc<ClientTls>>,
}

impl AgentConnection {
    /// Connects to `address` (HOST:PORT) as `access` says. `label` names the agent in every
    /// message.
    pub async fn connect_with(
        address: &str,
        label: String,
        access: &AgentAccess,
    ) -> Result<Self, AgentError> {
        if !address.contains(':') {
            return Err(AgentError::BadAddress {
                agent: address.to_string(),
                why: "no port".into(),
            });
        }
        let tls = match access {
            AgentAccess::Fleet(tls) => tls.clone(),
            AgentAccess::Local { .. } => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| AgentError::BadAddress {
                agent: address.to_string(),
                why: e.to_string(),
            })?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            // Keep-alive pings find a host that vanished without closing the connection.
            .http2_keep_alive_interval(Duration::from_secs(2))
            .keep_alive_timeout(Duration::from_secs(3))
            .keep_alive_while_idle(true);
        if let Some(tls) = &tls {
            endpoint = endpoint
                .tls_config(tls.config())
                .map_err(|e| AgentError::BadAddress {
                    agent: address.to_string(),
                    why: format!("TLS: {}", error_chain(&e)),
                })?;
        }
        let channel = endpoint.connect().await.map_err(|e| {
            match crate::tls::explain(&e, tls.as_deref()) {
                Some(why) => AgentError::Tls {
                    agent: label.clone(),
                    why,
                },
                None => AgentError::Unreachable {
                    agent: label.clone(),
                    detail: error_chain(&e),
                },
            }
        })?;
        Ok(Self {
            label,
            client: AgentServiceClient::with_interceptor(
                channel,
                match access {
                    AgentAccess::Fleet(tls) => TokenHeader::of(tls.as_deref()),
                    AgentAccess::Local { secret } => TokenHeader::with(secret),
                },
            ),
            answered: false,
            plain_fleet: matches!(access, AgentAccess::Fleet(None)),
            tls,
        })
    }

    /// How this agent is named in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The agent's host fingerprint.
    pub async fn get_host(&mut self) -> Result<pb::GetHostResponse, AgentError> {
        let call = self.client.get_host(pb::GetHostRequest {});
        let outcome = tokio::time::timeout(FIRST_EVENT_TIMEOUT, call).await;
        self.answer(outcome, FIRST_EVENT_TIMEOUT)
    }

    /// Applies tuning steps on the agent's machine.
    pub async fn prepare(
        &mut self,
        request: pb::PrepareRequest,
    ) -> Result<pb::PrepareResponse, AgentError> {
        let call = self.client.prepare(request);
        let outcome = tokio::time::timeout(TUNING_TIMEOUT, call).await;
        self.answer(outcome, TUNING_TIMEOUT)
    }

    /// Undoes every host change the agent journaled.
    pub async fn restore(&mut self) -> Result<pb::RestoreResponse, AgentError> {
        let call = self.client.restore(pb::RestoreRequest {});
        let outcome = tokio::time::timeout(TUNING_TIMEOUT, call).await;
        self.answer(outcome, TUNING_TIMEOUT)
    }

    /// Starts the agent's peer server for a network probe, listening on `bind_address`.
    pub async fn start_peer(
        &mut self,
        bind_address: &str,
        same_machine: bool,
        secret: &str,
    ) -> Result<pb::StartPeerResponse, AgentError> {
        let call = self.client.start_peer(pb::StartPeerRequest {
            bind_address: bind_address.to_string(),
            same_machine,
            secret: secret.to_string(),
        });
        let outcome = tokio::time::timeout(FIRST_EVENT_TIMEOUT, call).await;
        self.answer(outcome, FIRST_EVENT_TIMEOUT)
    }

    /// Stops the agent's peer server (best effort: a trial's outcome does not depend on it).
    /// Returns where its throughput connections moved; empty when it could not say.
    pub async fn stop_peer(&mut self) -> Vec<pb::PeerFlowCpu> {
        let call = self.client.stop_peer(pb::StopPeerRequest {});
        match tokio::time::timeout(FIRST_EVENT_TIMEOUT, call).await {
            Ok(Ok(response)) => response.into_inner().flows_followed,
            _ => Vec::new(),
        }
    }

    /// Asks the agent to stop a trial (best effort: used when the user interrupts).
    pub async fn cancel(&mut self, trial_id: &str) {
        let call = self.client.cancel(pb::CancelRequest {
            trial_id: trial_id.to_string(),
        });
        let _ = tokio::time::timeout(Duration::from_secs(1), call).await;
    }

    /// Has the agent check a trial's request (`check_only`) without running it: its refusal,
    /// if any, is the error the trial itself would meet.
    pub async fn check_probe(
        &mut self,
        mut request: pb::RunProbeRequest,
    ) -> Result<(), AgentError> {
        request.check_only = true;
        match tokio::time::timeout(FIRST_EVENT_TIMEOUT, self.client.run_probe(request)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(self.status_error(status)),
            Err(_) => Err(self.stalled(FIRST_EVENT_TIMEOUT)),
        }
    }

    /// Runs one trial to its end, calling `on_event` with each event as it arrives (once
    /// checked), within a budget of its own ([`RunBudget::default`]).
    pub async fn run_probe(
        &mut self,
        request: pb::RunProbeRequest,
        on_event: impl FnMut(&pb::probe_event::Event),
    ) -> Result<CompletedTrial, AgentError> {
        self.run_probe_within(request, &RunBudget::default(), on_event)
            .await
    }

    /// Runs one trial to its end, calling `on_event` with each event as it arrives (once
    /// checked), its record taking its bytes from `budget` (the run's). The trial fails, and
    /// its stream is cancelled, when the agent misses the deadline or breaks a bound
    /// ([`intake`]).
    pub async fn run_probe_within(
        &mut self,
        request: pb::RunProbeRequest,
        budget: &RunBudget,
        mut on_event: impl FnMut(&pb::probe_event::Event),
    ) -> Result<CompletedTrial, AgentError> {
        let interval = Duration::from_millis(if request.interval_ms == 0 {
            1000
        } else {
            request.interval_ms
        });
        let quiet_limit = interval + EVENT_SLACK;
        let limits = TrialLimits::new(
            Duration::from_millis(request.duration_ms),
            interval,
            quiet_limit,
        );
        let asked = Instant::now();
        let mut stream = loop {
            let call = self.client.run_probe(request.clone());
            match tokio::time::timeout(FIRST_EVENT_TIMEOUT, call).await {
                Ok(Ok(response)) => break response.into_inner(),
                Ok(Err(status)) if is_busy(&status) && asked.elapsed() < BUSY_GRACE => {
                    tokio::time::sleep(BUSY_RETRY).await;
                }
                Ok(Err(status)) => return Err(self.status_error(status)),
                Err(_) => return Err(self.stalled(FIRST_EVENT_TIMEOUT)),
            }
        };
        // From the moment the agent took the request: the set-up it may take is in the limits.
        let deadline = tokio::time::Instant::now() + limits.deadline();
        let mut intake = TrialIntake::new(&self.label, &request.trial_id, limits, budget.clone());
        loop {
            let limit = if intake.accepted() {
                quiet_limit
            } else {
                FIRST_EVENT_TIMEOUT
            };
            let silence_ends = tokio::time::Instant::now() + limit;
            let next =
                match tokio::time::timeout_at(silence_ends.min(deadline), stream.next()).await {
                    Err(_) if deadline <= silence_ends => {
                        // Dropping the stream cancels the trial on the agent (the contract says
                        // so); the Cancel call is for an agent that keeps going regardless.
                        drop(stream);
                        drop(intake);
                        self.cancel(&request.trial_id).await;
                        return Err(AgentError::Overran {
                            agent: self.label.clone(),
                            trial: request.trial_id.clone(),
                            limit: limits.describe(),
                        });
                    }
                    Err(_) => return Err(self.stalled(limit)),
                    Ok(None) => {
                        return Err(AgentError::Lost {
                            agent: self.label.clone(),
                            detail: "the stream ended before the trial's result".into(),
                        });
                    }
                    Ok(Some(Err(status))) => return Err(self.status_error(status)),
                    Ok(Some(Ok(event))) => event,
                };
            let Some(event) = next.event else {
                return Err(self.protocol("an empty event"));
            };
            intake.check(&event)?;
            on_event(&event);
            if let Some(completed) = intake.keep(event)? {
                return Ok(completed);
            }
        }
    }

    /// What a unary call that had `limit` to answer came to: its response (the agent has now
    /// answered on this connection), what its status means, or a stall. The one reading of a
    /// unary outcome, so GetHost, Prepare, Restore and StartPeer fail alike.
    fn answer<T>(
        &mut self,
        outcome: Result<Result<tonic::Response<T>, Status>, tokio::time::error::Elapsed>,
        limit: Duration,
    ) -> Result<T, AgentError> {
        match outcome {
            Ok(Ok(response)) => {
                self.answered = true;
                Ok(response.into_inner())
            }
            Ok(Err(status)) => Err(self.status_error(status)),
            Err(_) => Err(self.stalled(limit)),
        }
    }

    fn stalled(&self, quiet: Duration) -> AgentError {
        AgentError::Stalled {
            agent: self.label.clone(),
            seconds: quiet.as_secs().max(1),
        }
    }

    fn protocol(&self, what: &str) -> AgentError {
        AgentError::Protocol {
            agent: self.label.clone(),
            what: what.to_string(),
        }
    }

    fn status_error(&self, status: Status) -> AgentError {
        let agent = self.label.clone();
        if let Some(why) = crate::tls::explain(&status, self.tls.as_deref()) {
            return AgentError::Tls { agent, why };
        }
        if status.code() == Code::Unauthenticated {
            return AgentError::Tls {
                agent,
                why: format!("the agent refused our token: {}", status.message()),
            };
        }
        if let Some(tls) = &self.tls
            && tls.cert.is_some()
            && !self.answered
            && matches!(
                status.code(),
                Code::Unknown | Code::Unavailable | Code::Cancelled
            )
        {
            return AgentError::Tls {
                agent,
                why: format!(
                    "the agent refused our certificate ({}): it closed the connection before \
                     answering; it must be a controller certificate from the agent's CA, still \
                     valid ({})",
                    tls.cert
                        .as_ref()
                        .map_or_else(String::new, |c| c.display().to_string()),
                    status_detail(&status)
                ),
            };
        }
        if self.plain_fleet
            && !self.answered
            && matches!(
                status.code(),
                Code::Unknown | Code::Unavailable | Code::Cancelled | Code::Internal
            )
        {
            return AgentError::Tls {
                agent,
                why: format!(
                    "the agent dropped our first call, made in plain gRPC: it probably serves \
                     TLS; give --ca with --cert and --key (mutual TLS) or with --token-file \
                     ({})",
                    status_detail(&status)
                ),
            };
        }
        match status.code() {
            Code::PermissionDenied => AgentError::PermissionDenied {
                agent,
                message: status.message().to_string(),
            },
            Code::InvalidArgument
            | Code::ResourceExhausted
            | Code::FailedPrecondition
            | Code::Unimplemented => AgentError::Refused {
                agent,
                message: status.message().to_string(),
            },
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal => {
                AgentError::Lost {
                    agent,
                    detail: status_detail(&status),
                }
            }
            _ => AgentError::Protocol {
                agent,
                what: status_detail(&status),
            },
        }
    }
}

fn status_detail(status: &Status) -> String {
    let mut detail = format!("{:?}: {}", status.code(), status.message());
    if let Some(source) = std::error::Error::source(status) {
        detail.push_str(": ");
        detail.push_str(&error_chain(source));
    }
    detail
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let piece = inner.to_string();
        if !text.contains(&piece) {
            text.push_str(": ");
            text.push_str(&piece);
        }
        source = inner.source();
    }
    text
}

/// The agent refused a trial because another holds it (its one-trial-at-a-time slot).
fn is_busy(status: &Status) -> bool {
    status.code() == Code::ResourceExhausted
        && status.message().starts_with("this agent is busy with")
}
