//! The `http` probe's server RPCs of an agent connection: StartServer, StopServer and
//! SampleServer, on the measured host's agent.

use std::time::Duration;

use quietbench_proto::v1 as pb;

use super::{AgentConnection, AgentError, FIRST_EVENT_TIMEOUT};

/// How long a user's server may take to stop after SIGTERM before the agent kills it (the
/// agent's grace period, plus its reading of the process tree).
const SERVER_STOP_GRACE: Duration = Duration::from_secs(5);

impl AgentConnection {
    /// Starts the user's server for one `http` trial on this (the SUT's) agent and waits until
    /// it is ready: the agent's own ready wait is bounded by the request's `ready_timeout_ms`.
    pub async fn start_server(
        &mut self,
        request: pb::StartServerRequest,
    ) -> Result<pb::StartServerResponse, AgentError> {
        let limit =
            FIRST_EVENT_TIMEOUT + Duration::from_millis(u64::from(request.ready_timeout_ms));
        let call = self.client.start_server(request);
        let outcome = tokio::time::timeout(limit, call).await;
        self.answer(outcome, limit)
    }

    /// Stops the user's server, the per-trial one (`keep_as` empty) or the one kept under that
    /// name (restart=run), and reads what it cost. The agent waits up to its grace period for
    /// the server to end before killing it, hence the longer limit.
    pub async fn stop_server(
        &mut self,
        keep_as: &str,
    ) -> Result<pb::StopServerResponse, AgentError> {
        let limit = FIRST_EVENT_TIMEOUT + SERVER_STOP_GRACE;
        let call = self.client.stop_server(pb::StopServerRequest {
            keep_as: keep_as.to_string(),
        });
        let outcome = tokio::time::timeout(limit, call).await;
        self.answer(outcome, limit)
    }

    /// What the server kept under `keep_as` has cost so far (SampleServer), and from now on
    /// `max_life_ms` as its max life. The limit is a stop's: a server found gone is reaped.
    pub async fn sample_server(
        &mut self,
        keep_as: &str,
        max_life_ms: u64,
    ) -> Result<pb::StopServerResponse, AgentError> {
        let limit = FIRST_EVENT_TIMEOUT + SERVER_STOP_GRACE;
        let call = self.client.sample_server(pb::SampleServerRequest {
            keep_as: keep_as.to_string(),
            max_life_ms,
        });
        let outcome = tokio::time::timeout(limit, call).await;
        self.answer(outcome, limit)
    }
}
