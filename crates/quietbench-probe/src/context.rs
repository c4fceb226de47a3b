//! What an agent tells the probes about itself when it resolves a request: passed down as a
//! value, never kept in a process-wide slot.

use std::path::PathBuf;

/// The agent's side of a probe request.
#[derive(Debug, Clone, Default)]
pub struct ProbeContext {
    /// The agent's state directory. disk.scan keeps pre-warm progress under its `scan/` folder,
    /// the only place a probe creates directories; None (a library caller with no agent) refuses
    /// a pre-warm.
    pub state_dir: Option<PathBuf>,
}
