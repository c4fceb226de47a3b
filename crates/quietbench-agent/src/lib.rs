//! The quietbench agent: runs on every measured machine, tells what the machine is, and runs
//! probes on request, streaming their interval histograms over gRPC.
//!
//! The agent is built so that it disturbs what it measures as little as possible: its gRPC
//! runtime runs on its own named threads pinned to the housekeeping CPU, probes run on plain OS
//! threads pinned to the CPUs placement chose (see quietbench-probe), and the only bridge between
//! the two is a bounded channel fed by a supervisor thread that does all the encoding.

mod auth;
mod config;
mod convert;
mod limits;
mod machine;
mod peer;
mod server;
mod service;
mod trial;
mod tuning;
mod user_server;

pub use config::{AgentArgs, AgentSettings};
pub use quietbench_probe::spawn::exit_if_noop;
pub use server::serve;
