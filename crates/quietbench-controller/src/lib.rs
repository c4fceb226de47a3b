//! The quietbench controller: plans measurements, runs them on agents, and reports.
//!
//! The controller talks to agents only through the wire contract in quietbench-proto, whether
//! they run on this machine or elsewhere. It never measures in its own process: `run --local`
//! starts a real agent process (this binary re-executed as `quietbench agent`, the only reason
//! the binary links quietbench-agent) so the measured process is never the one running the
//! controller's runtime, progress bars and reports.

pub mod cli;
pub mod commands;
pub mod connection;
pub mod execute;
pub mod fleet;
pub mod local_agent;
pub mod plan;
pub mod record;
pub mod report;
pub mod restore;
pub mod run;
pub mod schedule;
pub mod session;
pub mod store;
pub mod verdicts;
pub mod warnings;
