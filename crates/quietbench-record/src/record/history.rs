//! A stored trial's value of one metric, as history and change-point searches read it.

use std::time::SystemTime;

/// One trial's value of one metric, for comparing runs over time.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPoint {
    /// The run.
    pub run_id: String,
    /// When the run started.
    pub started_at: SystemTime,
    /// HOST:PORT of the agent.
    pub host: String,
    /// The host's CPU model name.
    pub cpu_model: String,
    /// Variant name (in an A/B run, "A" and "B" of one probe differ in parameters).
    pub variant: String,
    /// The trial's parameters.
    pub params: std::collections::BTreeMap<String, String>,
    /// Round, from 1.
    pub round: u32,
    /// The trial's sequence number in its run.
    pub seq: usize,
    /// The metric's unit.
    pub unit: String,
    /// The metric's value.
    pub value: f64,
}
