//! The progress file of a resumable pre-warm: which regions of the target have been read.
//!
//! A text header naming the layout, then one byte per region: `#` read, `.` not yet. Each probe
//! thread marks only its own regions, with a one-byte `pwrite` at the region's position, so
//! threads never need a lock and a torn update cannot corrupt another region's mark. Marks reach
//! the page cache at once (they survive the agent being killed) and the disk at the next sync,
//! at most [`SYNC_EVERY`] later (they survive a crash of the machine, less the last second).
//!
//! A state file for another layout (another size or region count) is refused, not reused: its
//! marks would name the wrong bytes.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often marks are synced to disk while a pre-warm runs.
pub(crate) const SYNC_EVERY: Duration = Duration::from_secs(1);

const DONE: u8 = b'#';
const PENDING: u8 = b'.';

/// The header line for a target of `size` bytes in `regions` regions.
pub(crate) fn header(size: u64, regions: usize) -> String {
    format!("quietbench-scan-state v1 size={size} regions={regions}\n")
}

/// The regions marked done in a state file's `content`, checked against the expected layout.
pub(crate) fn parse(content: &[u8], size: u64, regions: usize) -> Result<Vec<bool>, String> {
    let expected = header(size, regions);
    let Some(line_end) = content.iter().position(|&b| b == b'\n') else {
        return Err("it has no header line".to_string());
    };
    let found = String::from_utf8_lossy(&content[..=line_end]);
    if found != expected {
        return Err(format!(
            "it records a scan of another layout ({}), not size={size} regions={regions}",
            found.trim()
        ));
    }
    let body = &content[line_end + 1..];
    if body.len() > regions {
        return Err(format!(
            "it has {} region marks for {regions} regions",
            body.len()
        ));
    }
    let mut done = vec![false; regions];
    for (r, &b) in body.iter().enumerate() {
        done[r] = match b {
            DONE => true,
            // A mark never written (a crash while the file was created) reads as zero.
            PENDING | 0 => false,
            other => return Err(format!("region {r} has the unknown mark byte {other:#04x}")),
        };
    }
    Ok(done)
}

/// One thread's handle on the progress file.
pub(crate) struct ScanState {
    file: File,
    path: PathBuf,
    header_len: u64,
    done: Vec<bool>,
    last_sync: Instant,
    dirty: bool,
}

impl ScanState {
    /// Opens the progress file at `path`, creating it (all regions pending) when missing.
    pub(crate) fn open(path: &Path, size: u64, regions: usize) -> Result<Self, String> {
        let shown = path.display();
        // The path is always the agent's state directory's `scan/` and a checked name (see
        // `scan::state_path`): the one directory a probe may make is there.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the directory of state file {shown}: {e}"))?;
        }
        // Never through a link: one planted there would turn a progress mark into a write
        // into whatever file it names.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(nix::libc::ELOOP) => {
                    format!("state file {shown} is a symbolic link: refused, delete it")
                }
                _ => format!("cannot open state file {shown}: {e}"),
            })?;
        // Threads of one trial open it together: one creates, the others read.
        file.lock()
            .map_err(|e| format!("cannot lock state file {shown}: {e}"))?;
        let mut content = Vec::new();
        file.read_to_end(&mut content)
            .map_err(|e| format!("cannot read state file {shown}: {e}"))?;
        let head = header(size, regions);
        if content.is_empty() {
            content = head.clone().into_bytes();
            content.resize(head.len() + regions, PENDING);
            file.write_all_at(&content, 0)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot write state file {shown}: {e}"))?;
        }
        let done = parse(&content, size, regions).map_err(|why| {
            format!(
                "state file {shown} cannot be resumed: {why}; delete it to start over, or pass \
                 the same regions= as the run that wrote it"
            )
        })?;
        file.unlock()
            .map_err(|e| format!("cannot unlock state file {shown}: {e}"))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            header_len: head.len() as u64,
            done,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    /// Whether region `r` was done when the file was opened, or marked since by this handle.
    pub(crate) fn is_done(&self, r: usize) -> bool {
        self.done[r]
    }

    /// Marks region `r` done; syncs when the last sync is [`SYNC_EVERY`] old.
    pub(crate) fn mark_done(&mut self, r: usize) -> Result<(), String> {
        self.done[r] = true;
        self.file
            .write_all_at(&[DONE], self.header_len + r as u64)
            .map_err(|e| format!("cannot update state file {}: {e}", self.path.display()))?;
        self.dirty = true;
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.sync()?;
        }
        Ok(())
    }

    /// Flushes marks to disk.
    pub(crate) fn sync(&mut self) -> Result<(), String> {
        if self.dirty {
            self.file
                .sync_data()
                .map_err(|e| format!("cannot sync state file {}: {e}", self.path.display()))?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
