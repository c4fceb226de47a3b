//! quietbench's EC2 fleet: the resources a run launches on EC2, tagged at creation with their
//! run, owner and expiry, listed (`quietbench fleet ls`) and collected (`quietbench gc`).
//!
//! Its own crate because aws-sdk-ec2 is the heaviest dependency of the tree by far: only the
//! `quietbench` binary's `ec2` feature links it, so the agent, the controller library and their
//! tests never compile it.

pub mod cli;
pub mod client;
pub mod gc;
pub mod inventory;
pub mod tags;

pub use client::{Ec2, Ec2Options};
