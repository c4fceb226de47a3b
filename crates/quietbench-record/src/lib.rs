//! quietbench's data model and the judgements made from it alone, in layers:
//!
//! 1. `schedule` (the RMIT order), `record` (a run's record and the queries every reader
//!    shares) and `limits` (the caps of instances and volumes, which one binds, the caps cache
//!    and the seam to the EC2 API that looks them up); `series_csv`, series a user brings as CSV
//!    (`changes --csv`).
//! 2. `warnings` and `verdicts`: what the record says about the run and its comparisons.
//!
//! The store (quietbench-store), the reports (quietbench-report) and the controller (plans,
//! fleets, connections, sessions, the service and the CLI) build on this crate; nothing here
//! talks to an agent, a store or a terminal, so the statistics a release decision rests on
//! rebuild and test in seconds.

// The data model.
pub mod limits;
pub mod record;
pub mod schedule;
pub mod series_csv;

// Judgements.
pub mod verdicts;
pub mod warnings;
