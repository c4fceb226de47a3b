//! The user's server of the end-to-end tests: a copy of the tests crate's test server under a
//! name of the test's own (tests/src/bin/testserver.rs), so that a test can find that server's
//! processes in /proc (to stall one, or to check that none is left) without touching another
//! test's; and the processes themselves.

use std::path::{Path, PathBuf};

/// A copy of the test server named `name`, in `dir`.
pub fn own_server(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(env!("CARGO_BIN_EXE_testserver"), &path).unwrap();
    path
}

/// Pids of live processes whose executable is `exe` (zombies, which have no exe link and are
/// past running, aside).
pub fn processes_of(exe: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|target| target == exe)
                && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
        })
        .collect()
}
