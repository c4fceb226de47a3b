//! What a disk probe reads and writes: a file it lays out itself, or a block device that it
//! opens read-only unless the user said `destructive=true`.
//!
//! A file is filled with real data once, before measuring: a file that is only preallocated
//! (fallocate) or sparse reads back zeros that the filesystem makes up without touching the
//! device, and would measure memory, not the disk. The fill grows the file's length only as data
//! lands (the preallocation keeps the size), so an interrupted fill is seen as a short file and
//! completed by the next run instead of being mistaken for a full one.
//!
//! What a probe may write: only a file it created itself, which it proves by the mark in the
//! file's first block ([`MARK`]), read again through the very descriptor it writes; or a file
//! or device the user named with `destructive=true`. Paths are absolute, and a file is never
//! opened through a symbolic link. The first block is the mark's: a file's data starts after it.

use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

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

/// The first bytes of every file a disk probe lays out: its proof that the file is its own.
/// A file without them was made by someone else and is never written unless the user said
/// `destructive=true` (a red team pointed a read-mode probe at the service's store and the fill
/// overwrote it).
pub(crate) const MARK: &[u8] = b"quietbench disk-probe file v1\n";

/// Bytes before a file's data: the block that holds [`MARK`], never touched by a trial's I/O.
pub(crate) const HEADER_BYTES: u64 = ALIGN as u64;

/// Refuses a relative path: it would land in whatever directory the agent happens to run in.
pub(crate) fn require_absolute(path: &Path) -> Result<(), String> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(format!(
            "{} is a relative path: give an absolute one (a relative path would name a file in \
             the agent's working directory, not yours)",
            path.display()
        ))
    }
}

/// Opens `path` with `flags`, refusing a symbolic link anywhere in it (openat2's
/// RESOLVE_NO_SYMLINKS): a probe that writes never writes through a link, which could point it
/// at a file it was not meant to touch. Kernels before 5.6 lack openat2: there each component is
/// checked with lstat and the last opened with O_NOFOLLOW (a link swapped in between the two is
/// not caught there).
pub(crate) fn open_no_symlinks(path: &Path, flags: OFlag, mode: u32) -> std::io::Result<File> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how) {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::ENOSYS) => {
            let mut walked = PathBuf::new();
            for component in path.parent().into_iter().flat_map(Path::components) {
                walked.push(component);
                if std::fs::symlink_metadata(&walked)?.file_type().is_symlink() {
                    return Err(std::io::Error::from_raw_os_error(nix::libc::ELOOP));
                }
            }
            let fd = nix::fcntl::open(
                path,
                flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
                Mode::from_bits_truncate(mode),
            )?;
            Ok(File::from(fd))
        }
        Err(errno) => Err(std::io::Error::from(errno)),
    }
}

/// The message for a failed open of a file the probe would write.
fn open_error(path: &Path, e: &std::io::Error) -> String {
    let shown = path.display();
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) => {
            let real = std::fs::canonicalize(path)
                .map(|p| format!(" (it leads to {})", p.display()))
                .unwrap_or_default();
            format!(
                "{shown} goes through a symbolic link{real}: a disk probe never writes through a \
                 link; give the real path"
            )
        }
        Some(nix::libc::ENOENT) => format!(
            "the directory of {shown} does not exist: a disk probe creates no directories; make \
             it first"
        ),
        _ => format!("cannot open {shown} for writing: {e}"),
    }
}

/// Whether `file` starts with [`MARK`].
fn has_mark(file: &File) -> std::io::Result<bool> {
    let mut head = [0u8; MARK.len()];
    match file.read_exact_at(&mut head, 0) {
        Ok(()) => Ok(head == MARK),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes the header block: [`MARK`], then zeros.
fn write_mark(file: &File) -> std::io::Result<()> {
    let mut block = vec![0u8; HEADER_BYTES as usize];
    block[..MARK.len()].copy_from_slice(MARK);
    file.write_all_at(&block, 0)?;
    file.sync_data()
}

/// The refusal for an existing file that is not the probe's own.
fn not_ours(path: &Path) -> String {
    format!(
        "{} exists and was not made by a quietbench disk probe (it lacks the probe's header): \
         a disk probe writes only files it created; give a new path, or pass destructive=true \
         to let it overwrite this file",
        path.display()
    )
}

/// Checks, without changing anything, that a file target may be used: an absolute path with no
/// link at its end, and either missing (the probe will create it), the probe's own, or
/// `destructive`. Run when the parameters are checked, so a refusal comes before the trial.
pub(crate) fn check_file_target(path: &Path, destructive: bool) -> Result<(), String> {
    require_absolute(path)?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(open_error(
                path,
                &std::io::Error::from_raw_os_error(nix::libc::ELOOP),
            ));
        }
        Ok(_) => {}
    }
    let file = open_no_symlinks(path, OFlag::O_RDONLY, 0).map_err(|e| open_error(path, &e))?;
    let ours = has_mark(&file).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if ours || destructive {
        Ok(())
    } else {
        Err(not_ours(path))
    }
}

/// A file's identity: which inode on which device.
pub(crate) type FileId = (u64, u64);

fn file_id(file: &File) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// What [`prepare_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// Bytes of real data found after the header.
    pub found: u64,
    /// Bytes written now.
    pub filled: u64,
    /// The file prepared: the trial's threads open this very file, or fail.
    pub id: FileId,
}

/// Makes `path` a file of the probe's own with at least `size` bytes of real, pseudo-random data
/// after its header block: creates it (never through a link, never in a directory it would have
/// to make), or reuses it when it carries the probe's mark, or claims it when `destructive`;
/// preallocates it and writes what is missing (nothing when it is already long enough and has
/// no holes). Callers of one file serialise on a lock on it.
pub(crate) fn prepare_file(
    path: &Path,
    size: u64,
    seed: u64,
    destructive: bool,
) -> Result<Prepared, String> {
    let shown = path.display();
    require_absolute(path)?;
    let (file, created) =
        match open_no_symlinks(path, OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL, 0o600) {
            Ok(file) => (file, true),
            Err(e) if e.raw_os_error() == Some(nix::libc::EEXIST) => (
                open_no_symlinks(path, OFlag::O_RDWR, 0).map_err(|e| open_error(path, &e))?,
                false,
            ),
            Err(e) => return Err(open_error(path, &e)),
        };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    file.lock()
        .map_err(|e| format!("cannot lock {shown}: {e}"))?;
    let ours = !created && has_mark(&file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !ours {
        if !created && !destructive {
            return Err(not_ours(path));
        }
        write_mark(&file).map_err(|e| format!("cannot write the header of {shown}: {e}"))?;
    }
    let id = file_id(&file).map_err(|e| format!("cannot stat {shown}: {e}"))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?
        .len()
        .saturating_sub(HEADER_BYTES);
    let found = data_prefix(&file, len.min(size));
    if found >= size {
        return Ok(Prepared {
            found,
            filled: 0,
            id,
        });
    }
    // Reserve the space first, so a full disk fails here and not halfway; keep the size, so
    // the length only ever covers written data. Filesystems without fallocate just write.
    let _ = nix::fcntl::fallocate(
        &file,
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        (HEADER_BYTES + found) as i64,
        (size - found) as i64,
    );
    let direct = open_direct(path, TargetKind::File, true)?;
    if file_id(&direct).ok() != Some(id) {
        return Err(format!("{shown} was replaced while it was being prepared"));
    }
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
            .write_all_at(&chunk.as_slice()[..len], HEADER_BYTES + offset)
            .map_err(|e| format!("cannot fill {shown} at offset {offset}: {e}"))?;
        offset += len as u64;
    }
    direct
        .sync_data()
        .map_err(|e| format!("cannot sync {shown}: {e}"))?;
    Ok(Prepared {
        found,
        filled: size - found,
        id,
    })
}

/// How many bytes of data follow the header: up to the first hole, in whole fill chunks (a
/// fill interrupted mid-chunk leaves a partial one, redone). `len` is the data's length.
fn data_prefix(file: &File, len: u64) -> u64 {
    let hole = nix::unistd::lseek(file, HEADER_BYTES as i64, nix::unistd::Whence::SeekHole)
        .map(|h| (h as u64).saturating_sub(HEADER_BYTES))
        .unwrap_or(len);
    hole.min(len) / FILL_CHUNK as u64 * FILL_CHUNK as u64
}

/// Opens a target for direct I/O. A block device opened for writing is opened exclusively, so
/// a mounted or otherwise claimed device is refused. A file is opened with no link anywhere in
/// its path and, for writing, only when it carries the probe's mark (read through this very
/// descriptor, so what is checked is what is written).
pub(crate) fn open_direct(path: &Path, kind: TargetKind, write: bool) -> Result<File, String> {
    let mut flags = OFlag::O_DIRECT
        | if write {
            OFlag::O_RDWR
        } else {
            OFlag::O_RDONLY
        };
    if write && kind == TargetKind::BlockDevice {
        flags |= OFlag::O_EXCL;
    }
    let opened = match kind {
        TargetKind::File => open_no_symlinks(path, flags, 0),
        TargetKind::BlockDevice => nix::fcntl::open(path, flags | OFlag::O_CLOEXEC, Mode::empty())
            .map(File::from)
            .map_err(std::io::Error::from),
    };
    let file = opened.map_err(|e| {
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
            Some(nix::libc::ELOOP) => {
                " (a symbolic link is in its path: a disk probe opens files by their real path)"
            }
            _ => "",
        };
        format!(
            "cannot open {} for direct {}: {e}{why}",
            path.display(),
            if write { "reads and writes" } else { "reads" }
        )
    })?;
    if write && kind == TargetKind::File {
        let mut head = AlignedBuf::new(ALIGN)?;
        file.read_exact_at(head.as_mut_slice(), 0)
            .map_err(|e| format!("cannot read the header of {}: {e}", path.display()))?;
        if !head.as_slice().starts_with(MARK) {
            return Err(not_ours(path));
        }
    }
    Ok(file)
}

/// The largest usable size of a device of `size` bytes: whole 4 KiB blocks.
pub(crate) fn usable(size: u64) -> u64 {
    round_down(size)
}

#[cfg(test)]
mod tests;
