//! What a disk probe reads and writes: a file it lays out itself, or a block device that it
//! opens read-only unless the user said `destructive=true`.
//!
//! A file is filled with real data once, before measuring: a file that is only preallocated
//! (fallocate) or sparse reads back zeros that the filesystem makes up without touching the
//! device, and would measure memory, not the disk. The fill grows the file's length only as data
//! lands (the preallocation keeps the size), so an interrupted fill is seen as a short file and
//! completed by the next run instead of being mistaken for a full one.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::aligned::{ALIGN, AlignedBuf, round_down};

/// Bytes written per system call while filling a file.
const FILL_CHUNK: usize = 4 << 20;

/// What the path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetKind {
    /// A regular file, or none yet (the probe creates it).
    File,
    /// A block device.
    BlockDevice,
}

/// A target as found before the probe runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetInfo {
    pub path: PathBuf,
    pub kind: TargetKind,
    /// The file's length or the device's size; None for a file that does not exist yet.
    pub size: Option<u64>,
}

/// Looks at `path` without changing anything.
pub(crate) fn inspect(path: &Path) -> Result<TargetInfo, String> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(TargetInfo {
                path: path.to_path_buf(),
                kind: TargetKind::File,
                size: None,
            });
        }
        Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
    };
    let file_type = meta.file_type();
    if file_type.is_block_device() {
        // The size of a block device is where its end is; stat reports 0.
        let file = File::open(path)
            .map_err(|e| format!("cannot open block device {}: {e}", path.display()))?;
        let size = nix::unistd::lseek(&file, 0, nix::unistd::Whence::SeekEnd)
            .map_err(|e| format!("cannot read the size of {}: {e}", path.display()))?;
        Ok(TargetInfo {
            path: path.to_path_buf(),
            kind: TargetKind::BlockDevice,
            size: Some(size as u64),
        })
    } else if file_type.is_file() {
        Ok(TargetInfo {
            path: path.to_path_buf(),
            kind: TargetKind::File,
            size: Some(meta.len()),
        })
    } else {
        Err(format!(
            "{} is neither a regular file nor a block device",
            path.display()
        ))
    }
}

/// What [`prepare_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// Bytes of real data found at the start of the file.
    pub found: u64,
    /// Bytes written now.
    pub filled: u64,
}

/// Makes `path` a file of at least `size` bytes of real, pseudo-random data: creates it,
/// preallocates it and writes what is missing (nothing when it is already long enough and has
/// no holes). Concurrent callers (the threads of one trial) serialise on a lock on the file.
pub(crate) fn prepare_file(path: &Path, size: u64, seed: u64) -> Result<Prepared, String> {
    let shown = path.display();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot create {shown}: {e}"))?;
    file.lock()
        .map_err(|e| format!("cannot lock {shown}: {e}"))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?
        .len();
    let found = data_prefix(&file, len.min(size));
    if found >= size {
        return Ok(Prepared { found, filled: 0 });
    }
    // Reserve the space first, so a full disk fails here and not halfway; keep the size, so
    // the length only ever covers written data. Filesystems without fallocate just write.
    let _ = nix::fcntl::fallocate(
        &file,
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        found as i64,
        (size - found) as i64,
    );
    let direct = open_direct(path, TargetKind::File, true)?;
    let mut chunk = AlignedBuf::random(FILL_CHUNK, seed)?;
    let mut offset = found;
    while offset < size {
        let len = (size - offset).min(FILL_CHUNK as u64) as usize;
        // Each 4 KiB block carries its own offset: no two blocks of the file are alike.
        let bytes = chunk.as_mut_slice();
        for block in (0..len).step_by(ALIGN) {
            bytes[block..block + 8].copy_from_slice(&(offset + block as u64).to_le_bytes());
            bytes[block + 8..block + 16].copy_from_slice(&seed.to_le_bytes());
        }
        direct
            .write_all_at(&chunk.as_slice()[..len], offset)
            .map_err(|e| format!("cannot fill {shown} at offset {offset}: {e}"))?;
        offset += len as u64;
    }
    direct
        .sync_data()
        .map_err(|e| format!("cannot sync {shown}: {e}"))?;
    Ok(Prepared {
        found,
        filled: size - found,
    })
}

/// How many bytes at the start of the file are data: up to the first hole, in whole fill
/// chunks (a fill interrupted mid-chunk leaves a partial one, redone).
fn data_prefix(file: &File, len: u64) -> u64 {
    let hole = nix::unistd::lseek(file, 0, nix::unistd::Whence::SeekHole)
        .map(|h| h as u64)
        .unwrap_or(len);
    hole.min(len) / FILL_CHUNK as u64 * FILL_CHUNK as u64
}

/// Opens a target for direct I/O. A block device opened for writing is opened exclusively, so
/// a mounted or otherwise claimed device is refused.
pub(crate) fn open_direct(path: &Path, kind: TargetKind, write: bool) -> Result<File, String> {
    let mut options = OpenOptions::new();
    options.read(true).write(write);
    let mut flags = nix::libc::O_DIRECT;
    if write && kind == TargetKind::BlockDevice {
        flags |= nix::libc::O_EXCL;
    }
    options.custom_flags(flags);
    options.open(path).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(nix::libc::EINVAL) => {
                " (this filesystem does not support direct I/O, as tmpfs does not: put the \
                 file on a disk-backed filesystem)"
            }
            Some(nix::libc::EBUSY) => " (the device is in use: mounted, or claimed by another)",
            Some(nix::libc::EACCES | nix::libc::EPERM) => {
                " (the agent needs read access to it, and write access for writes: run it as \
                 root or add its user to the disk group)"
            }
            _ => "",
        };
        format!(
            "cannot open {} for direct {}: {e}{why}",
            path.display(),
            if write { "reads and writes" } else { "reads" }
        )
    })
}

/// The largest usable size of a device of `size` bytes: whole 4 KiB blocks.
pub(crate) fn usable(size: u64) -> u64 {
    round_down(size)
}

#[cfg(test)]
mod tests;
