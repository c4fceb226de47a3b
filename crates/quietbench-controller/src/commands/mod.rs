//! The commands: each takes what its command line asked (parsed by [`crate::cli`]), drives a
//! session or reads the store, prints, and returns the exit code. They sit on top of everything
//! else in the controller; nothing below imports them.

pub mod compare;
pub mod compare_runs;
pub mod history_changes;
pub mod history_normalized;
pub mod host;
pub mod limits;
pub mod release;
pub mod run;
pub mod stored;

use crate::fleet::HostEntry;

/// Hosts named with `--agent`, in order.
pub fn agent_entries(addresses: &[String]) -> Vec<HostEntry> {
    addresses
        .iter()
        .map(|a| HostEntry {
            address: a.clone(),
            label: None,
            source: "--agent".into(),
        })
        .collect()
}

/// A run id as the tables print it: its first 8 characters, enough to tell runs apart and to
/// pass back as a prefix.
pub(crate) fn short_id(id: &str) -> &str {
    &id[..id.len().min(8)]
}
