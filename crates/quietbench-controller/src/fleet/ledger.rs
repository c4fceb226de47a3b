//! The fleet ledger: what a running controller holds, on disk, so that a later command can give
//! it back when the controller was killed before its own release ran. One small JSON file per
//! run, `$XDG_DATA_HOME/quietbench/fleets/RUN.json`, written once the hosts are acquired and
//! removed once they are released; `quietbench release` reads what is left.
//!
//! A local fleet's agents die with their controller (parent-death signal), so its entry only
//! says so. A static fleet's hosts stay tuned when the controller that tuned them dies: release
//! restores them. The EC2 fleet will record its instances here too, and terminate them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Target;
use crate::store::holder::Holder;

/// What one run's controller holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The run.
    pub run_id: String,
    /// The fleet's kind ("local", "static").
    pub kind: String,
    /// The controller process; `None` where /proc did not say (then it is never presumed dead).
    pub holder: Option<Holder>,
    /// The run tuned its hosts (`--tune`): releasing restores them.
    pub tuned: bool,
    /// The hosts, as the fleet obtained them.
    pub hosts: Vec<LedgerHost>,
}

/// One host in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerHost {
    /// HOST:PORT of its agent.
    pub address: String,
    /// How messages name it.
    pub label: String,
    /// How the fleet obtained it.
    pub obtained: String,
    /// Its cloud instance, where known.
    pub instance_id: Option<String>,
}

impl LedgerEntry {
    /// The entry for `run_id` on `targets`, held by this process.
    pub fn new(run_id: &str, kind: &str, tuned: bool, targets: &[Target]) -> Self {
        Self {
            run_id: run_id.to_string(),
            kind: kind.to_string(),
            holder: Holder::this_process(),
            tuned,
            hosts: targets
                .iter()
                .map(|t| LedgerHost {
                    address: t.address.clone(),
                    label: t.label.clone(),
                    obtained: t.obtained.clone(),
                    instance_id: t.instance_id.clone(),
                })
                .collect(),
        }
    }
}

/// The folder of ledger files.
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// The ledger beside the default result store.
    pub fn default_location() -> Self {
        let store = crate::store::Store::default_path();
        let data = store.parent().unwrap_or(Path::new("."));
        Self::at(data.join("fleets"))
    }

    /// A ledger in `dir`.
    pub fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, run_id: &str) -> PathBuf {
        self.dir.join(format!("{run_id}.json"))
    }

    /// Writes `entry` (atomically: a reader never sees half a file).
    pub fn record(&self, entry: &LedgerEntry) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let path = self.file(&entry.run_id);
        let tmp = path.with_extension("json.partial");
        let text = serde_json::to_string_pretty(entry)?;
        std::fs::write(&tmp, text + "\n")
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
    }

    /// Removes `run_id`'s entry: its hosts were released. A missing entry is no error.
    pub fn forget(&self, run_id: &str) -> anyhow::Result<()> {
        match std::fs::remove_file(self.file(run_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", self.file(run_id).display()))
            }
            _ => Ok(()),
        }
    }

    /// Every entry, oldest file name first; a file that cannot be read or parsed is returned as
    /// an error naming it, so one damaged file does not hide the others.
    pub fn entries(&self) -> anyhow::Result<Vec<Result<LedgerEntry, String>>> {
        let listing = match std::fs::read_dir(&self.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other.with_context(|| format!("cannot list {}", self.dir.display()))?,
        };
        let mut paths: Vec<PathBuf> = listing
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::HostKind;

    fn target(address: &str) -> Target {
        Target {
            address: address.into(),
            kind: HostKind::Remote,
            label: address.into(),
            obtained: "--agent".into(),
            instance_id: None,
            access: crate::connection::AgentAccess::Fleet(None),
            peer: None,
            inner_ip: None,
        }
    }

    #[test]
    fn entries_round_trip_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::at(dir.path().join("fleets"));
        assert!(
            ledger.entries().unwrap().is_empty(),
            "no folder yet: no entry"
        );
        let entry = LedgerEntry::new("run-1", "static", true, &[target("a:1"), target("b:1")]);
        assert!(entry.holder.is_some(), "this process can be named");
        ledger.record(&entry).unwrap();
        assert_eq!(ledger.entries().unwrap(), vec![Ok(entry.clone())]);
        std::fs::write(ledger.dir().join("broken.json"), "{").unwrap();
        let entries = ledger.entries().unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries[0].as_ref().unwrap_err().contains("broken.json"));
        ledger.forget("run-1").unwrap();
        ledger.forget("run-1").unwrap();
        assert_eq!(ledger.entries().unwrap().len(), 1);
    }

    #[test]
    fn this_process_is_not_gone_and_a_dead_one_is() {
        let mut holder = Holder::this_process().unwrap();
        assert!(!holder.is_gone());
        holder.start_ticks += 1; // the pid, reused by another process
        assert!(holder.is_gone());
    }
}
