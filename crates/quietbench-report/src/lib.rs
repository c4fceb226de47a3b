//! What a run produced, and the forms it is shown in: the terminal table and the JSON report
//! (its schema is documented in docs/json-report.md and checked by tests), the HTML page and
//! HDR interval logs.
//!
//! Views only: every figure and judgement comes from quietbench-record (the record's queries,
//! warnings and verdicts). A crate of its own so a report rebuilds and tests without the store,
//! the service or the CLI: it reads no store and must never depend on quietbench-store, the
//! controller, a terminal or command-line crate (indicatif, clap) or tonic of its own (CI
//! checks with `cargo tree`). The controller re-exports it as `report`.

pub mod hdrlog;
pub mod host;
pub mod html;
pub mod json;
pub mod remote_text;
pub mod spread;
pub mod table;
pub mod units;
