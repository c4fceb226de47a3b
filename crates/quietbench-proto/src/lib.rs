//! The wire contract shared by the quietbench agent and its controllers, and nothing else.
//!
//! The agent and the controller depend on each other only through this crate, so either can be
//! replaced by other tooling that speaks `quietbench.v1`. The code is generated at build time from
//! `proto/quietbench/v1` (see build.rs); this file only exposes it. Beside it, what both ends'
//! servers share: the connection gate ([`gate`]) that keeps strangers from locking out the
//! callers a server is for, and the checks every agent (the test kit's fake too) makes of a
//! trial request ([`trial_request`]).
//!
//! The metric names and the histogram codec are the vocabulary of the wire too, but the probes
//! need them without gRPC, so they live in quietbench-vocab; they are re-exported here, and the
//! agent and the controller read them through this crate.

pub mod gate;
pub mod roles;
pub mod trial_request;

pub use quietbench_vocab::{histogram, metrics};

/// Version 1 of the quietbench protocol (`package quietbench.v1`).
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("quietbench.v1");

    /// The encoded `FileDescriptorSet` of agent.proto, for the agent's gRPC reflection.
    pub const AGENT_FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/quietbench_v1_agent_descriptor.bin"
    ));

    /// The encoded `FileDescriptorSet` of controller.proto, for `quietbench serve`'s reflection.
    pub const CONTROLLER_FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/quietbench_v1_controller_descriptor.bin"
    ));

    /// The fully qualified gRPC service name of the agent.
    pub const AGENT_SERVICE_NAME: &str = "quietbench.v1.AgentService";

    /// The fully qualified gRPC service name of the controller service (`quietbench serve`).
    pub const CONTROLLER_SERVICE_NAME: &str = "quietbench.v1.Controller";
}
