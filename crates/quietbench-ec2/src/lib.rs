//! quietbench's EC2 fleet: the instances a run launches on EC2 (`run --ec2`), tagged at
//! creation with their run, owner and expiry, placed, chosen by CPU model, and released; and
//! the commands on what fleets left (`quietbench fleet ls`, `quietbench gc`).
//!
//! Its own crate because aws-sdk-ec2 is the heaviest dependency of the tree by far: only the
//! `quietbench` binary's `ec2` feature links it, so the agent, the controller library and their
//! tests never compile it.

pub mod caps;
pub mod cli;
pub mod client;
pub mod fleet;
pub mod gc;
pub mod inventory;
mod launcher;
pub mod states;
pub mod tags;

pub use client::{Ec2, Ec2Options};
pub use launcher::services;
