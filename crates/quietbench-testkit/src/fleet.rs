//! A fleet of fake agents for a test: one loopback port each, served by one small runtime on
//! threads of its own, so a synchronous test can start the `quietbench` binary against them.

use std::net::SocketAddr;

use quietbench_proto::v1::agent_service_server::AgentServiceServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::service::{FakeAgent, FakeHost, TrialCounter};

/// Serves `agent` on `listener` until the runtime stops; for callers with a runtime of their
/// own (the agent farm).
pub async fn serve(listener: TcpListener, agent: FakeAgent) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(AgentServiceServer::new(agent))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await
}

/// Fake agents on loopback, one per host, in the order given; stopped when dropped.
pub struct FakeFleet {
    addresses: Vec<SocketAddr>,
    counters: Vec<TrialCounter>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FakeFleet {
    /// Starts one fake agent per host; each is listening when this returns.
    pub fn start(hosts: Vec<FakeHost>) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fake-agents")
            .enable_all()
            .build()?;
        let mut addresses = Vec::with_capacity(hosts.len());
        let mut counters = Vec::with_capacity(hosts.len());
        for (index, host) in hosts.into_iter().enumerate() {
            let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
            addresses.push(listener.local_addr()?);
            let agent = FakeAgent::new(index, host);
            counters.push(agent.counter());
            runtime.spawn(async move {
                if let Err(err) = serve(listener, agent).await {
                    eprintln!("fake agent {index} stopped serving: {err}");
                }
            });
        }
        Ok(Self {
            addresses,
            counters,
            runtime: Some(runtime),
        })
    }

    /// The agents' addresses, HOST:PORT, host 0 first.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// How many trials host `index` has accepted.
    pub fn trials(&self, index: usize) -> u64 {
        self.counters[index].get()
    }
}

impl Drop for FakeFleet {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
