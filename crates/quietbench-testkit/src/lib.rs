//! quietbench-testkit: a deterministic fake agent for tests.
//!
//! Tests of the controller's statistics (the CPU lottery's split, verdicts, change points) need
//! hosts whose figures are known: real agents timing real sleeps on a 2-CPU CI machine measure
//! the machine too, and their margins had to be widened after CI failed. A [`FakeFleet`] serves
//! `quietbench.v1.AgentService` on loopback ports, one per [`FakeHost`]; each host answers
//! GetHost with the processor it is given (typed in, or parsed from a captured /proc/cpuinfo)
//! and each trial with the figures its function returns for that trial ([`Ask`] → [`Figure`]s),
//! streamed as a real agent streams them: intervals with real HdrHistogram V2+DEFLATE bytes,
//! then the result. The controller under test does everything else itself, so a test asserts
//! against the numbers it put in.
//!
//! It speaks the wire contract only (quietbench-proto): no agent, probe or controller code.
//! The agent farm (benches/src/bin/agent_farm) serves the same agents, paced in real time, to
//! load a controller with hundreds of hosts.

mod figures;
mod fleet;
mod host;
mod service;
mod trial;

pub use figures::{
    Ask, Figure, FigureFn, Invocation, Kind, events, exec, exec_pairs, normal, splitmix64,
    unit_interval,
};
pub use fleet::{FakeFleet, serve};
pub use host::{Cpu, HOUSEKEEPING_CPU, PROBE_CPU, fingerprint};
pub use service::{FakeAgent, FakeHost, TrialCounter};
pub use trial::Pace;
