//! Fleets: where a run's hosts come from and where they go back to. A fleet turns a plan's
//! hosts into reachable agents (`acquire`) and gives them back at the end (`release`), on every
//! exit path: a normal end, an error, Ctrl-C (acquire is a future the session drops). Three
//! kinds exist: `local` (agents this process starts), `static` (agents already running, named
//! on the command line, in a plan or in a hosts file) and `ec2` (instances launched for the
//! run: [`ec2`] holds what the user asks for; the quietbench-ec2 crate, linked by the binary's
//! `ec2` feature, is the fleet).

pub mod ec2;
mod hosts_file;
pub mod ledger;
mod local;
pub mod release;
mod static_hosts;

use std::future::Future;
use std::pin::Pin;

pub use hosts_file::{HostEntry, HostsFileError, parse_hosts_file, read_hosts_file};
pub use ledger::{Ledger, LedgerEntry};
pub use local::{LocalFleet, local_target};
pub use static_hosts::StaticFleet;

use crate::progress::Progress;
use crate::record::HostKind;

/// An agent to measure on, as a fleet obtained it.
#[derive(Debug, Clone)]
pub struct Target {
    /// HOST:PORT.
    pub address: String,
    /// Local or remote.
    pub kind: HostKind,
    /// How messages name it, e.g. "127.0.0.1:41234 (local agent, pid 812)" or a hosts file's
    /// label.
    pub label: String,
    /// How the fleet obtained it, e.g. "started here (pid 812)", "--agent", "hosts.txt line 3".
    pub obtained: String,
    /// The cloud instance it runs on, where the fleet knows it.
    pub instance_id: Option<String>,
    /// How to reach it: the fleet's identity, or a local agent's own secret.
    pub access: crate::connection::AgentAccess,
    /// The agent that serves the other end of network probes for this one.
    pub peer: Option<Box<Target>>,
    /// The IP the other hosts of the fleet reach it at (where its peer's or its own server
    /// listens), when that is not `address`'s: an EC2 instance's private IP, since its public
    /// one belongs to the internet gateway and nothing on the instance can listen there.
    /// `None`: `address`'s host.
    pub inner_ip: Option<std::net::IpAddr>,
}

/// A future a fleet returns; boxed so fleets can be chosen at run time (`dyn Fleet`).
pub type FleetFuture<'a, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + 'a>>;

/// Where a run's hosts come from.
pub trait Fleet {
    /// The fleet's kind, as plans and reports name it: "local", "static", "ec2".
    fn kind(&self) -> &'static str;

    /// Told the run's id before `acquire`: a fleet that creates cloud resources tags them
    /// with it, so they can be found and deleted by run.
    fn bind_run(&mut self, _run_id: &str) {}

    /// Obtains the hosts, reporting progress. Dropping the future cancels it; `release` then
    /// gives back whatever was obtained so far.
    fn acquire<'a>(&'a mut self, progress: &'a Progress) -> FleetFuture<'a, Vec<Target>>;

    /// Gives every obtained host back. Called once, on every exit path; safe to call when
    /// nothing was obtained.
    fn release<'a>(&'a mut self, progress: &'a Progress) -> FleetFuture<'a, ()>;

    /// The fleet's lines in the report: what it is and how its hosts were obtained.
    fn report_lines(&self) -> Vec<String>;

    /// After a failure: a cause the fleet can see that the broken connection hides (a local
    /// agent that died, and how).
    fn explain_failure(&mut self) -> Option<String> {
        None
    }
}
