//! What a run produced, and the forms it is shown in: the terminal table and the JSON report
//! (its schema is documented in docs/json-report.md and checked by tests).

pub mod hdrlog;
pub mod host;
pub mod html;
pub mod json;
pub mod remote_text;
pub mod spread;
pub mod table;
pub mod units;
