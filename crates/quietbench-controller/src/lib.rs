//! The quietbench controller: plans measurements, runs them on agents, and reports.
//!
//! The controller talks to agents only through the wire contract in quietbench-proto, whether
//! they run on this machine or elsewhere. It never measures in its own process: `run --local`
//! starts a real agent process (this binary re-executed as `quietbench agent`, the only reason
//! the binary links quietbench-agent) so the measured process is never the one running the
//! controller's runtime, progress bars and reports.
//!
//! # Layout
//!
//! Modules are grouped by role. A group imports only from itself and the groups before it,
//! and no two modules import each other.
//!
//! 1. The data model: `schedule` (the RMIT order), `record` (a run's record and the queries
//!    every reader shares), `plan` (plan files, read into the record's settings) and `store`
//!    (saves and loads records).
//! 2. Judgements from the record alone: `warnings` and `verdicts`.
//! 3. Views: `report` renders a record (table, JSON, HTML, interval logs); it computes nothing
//!    the record or the verdicts own.
//!
//! `schedule`, `record`, `warnings` and `verdicts` (with `limits`) are quietbench-record's,
//! `store` is quietbench-store and `report` quietbench-report, re-exported here under the paths
//! they had when they lived in this crate; the store and the reports build on the record crate
//! alone and neither imports the other.
//! 4. Measuring: `progress` (what people see while it runs), `tls` (certificates and the
//!    controller's identity), `connection` and `local_agent`
//!    (agents), `fleet` (where hosts come from), `context` (what a command hands down: TLS,
//!    pre-warm, caps lookup, EC2 services), `request` (a run's options as one typed value, and
//!    its conversions to and from the wire and a file),
//!    `execute` (the schedule on every host), `run` and `restore` (a run's set-up and
//!    tear-down), `session` (all of it, for one run).
//! 5. `commands`, one module per command.
//!
//! Above this crate: `quietbench-service` (the controller as a gRPC service, `quietbench
//! serve`, and its client, `--controller`) and `quietbench-cli` (the clap command line, which
//! dispatches to the commands and the service). This crate links no clap: a command takes a
//! typed request, never arguments.

// The data model and the judgements made from it alone: quietbench-record, under the paths
// they had when they lived here.
pub use quietbench_record::{limits, record, schedule, series_csv, verdicts, warnings};

// The data model's files: plans here; the store is quietbench-store, under its old path.
pub mod plan;
pub use quietbench_store as store;

// Views: quietbench-report, under its old path.
pub use quietbench_report as report;

// Measuring.
pub mod connection;
pub mod context;
pub mod execute;
pub mod fleet;
pub mod local_agent;
pub mod prewarm;
pub mod progress;
pub mod request;
pub mod restore;
pub mod run;
pub mod session;
pub mod tls;

// Commands.
pub mod commands;
