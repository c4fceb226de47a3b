//! The root directory that every reader resolves /proc and /sys paths against.

use std::path::{Path, PathBuf};

/// Where the readers find `proc/` and `sys/`: `/` on a live machine, a fixture folder in tests.
#[derive(Debug, Clone)]
pub struct HostRoot(PathBuf);

impl HostRoot {
    /// The live machine.
    pub fn live() -> Self {
        Self(PathBuf::from("/"))
    }

    /// A fake root, such as a fixture folder holding `proc/cpuinfo`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self(path.into())
    }

    /// Reads a file given by its absolute path on the machine, e.g. `/proc/cpuinfo`.
    pub fn read(&self, machine_path: &str) -> Result<String, ReadError> {
        let path = self.resolve(machine_path);
        std::fs::read_to_string(&path).map_err(|source| ReadError {
            path: machine_path.to_string(),
            source,
        })
    }

    /// The real path of `machine_path` below this root.
    pub fn resolve(&self, machine_path: &str) -> PathBuf {
        self.0.join(machine_path.trim_start_matches('/'))
    }

    /// The root directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// A file under the root could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct ReadError {
    /// The machine path, e.g. `/proc/cpuinfo`.
    pub path: String,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}
