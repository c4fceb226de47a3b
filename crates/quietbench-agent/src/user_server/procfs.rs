//! What /proc says of the user's server: who a pid is (its start time, so a recycled pid is
//! never taken for the server), which processes are in its group, and what they cost. The
//! parsers are pure and tested on files captured from a real machine (`fixtures/`); the readers
//! take a root directory so tests can build a fake /proc.

use quietbench_host::HostRoot;

/// The fields of /proc/PID/stat the agent uses. Times are in clock ticks (see
/// [`ticks_to_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: R, S, D, Z (zombie), X (dead), ...
    pub state: char,
    /// Field 5: the process group.
    pub pgid: i32,
    /// Field 14: user time.
    pub utime: u64,
    /// Field 15: system time.
    pub stime: u64,
    /// Field 16: user time of the children it waited for (signed in the kernel; never negative
    /// in practice, read as 0 if it were).
    pub cutime: u64,
    /// Field 17: system time of the children it waited for.
    pub cstime: u64,
    /// Field 22: when it started, in ticks since boot. A pid and its start time name one
    /// process for as long as the machine runs: a recycled pid has a later start time.
    pub start_ticks: u64,
}

impl ProcStat {
    /// A zombie or a dead process: it has exited, only its entry remains.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses /proc/PID/stat. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<ProcStat, String> {
    let close = text
        .rfind(')')
        .ok_or_else(|| format!("no ')' closing the command name in {:?}", shorten(text)))?;
    // After ") ": field 3 onwards.
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<&str, String> {
        fields
            .get(n - 3)
            .copied()
            .ok_or_else(|| format!("field {n} is missing in {:?}", shorten(text)))
    };
    let number = |n: usize| -> Result<u64, String> {
        let text = field(n)?;
        text.parse::<u64>()
            .map_err(|_| format!("field {n} is not a count: {text:?}"))
    };
    let signed = |n: usize| -> Result<u64, String> {
        let text = field(n)?;
        text.parse::<i64>()
            .map(|v| v.max(0) as u64)
            .map_err(|_| format!("field {n} is not a number: {text:?}"))
    };
    let state = field(3)?
        .chars()
        .next()
        .ok_or_else(|| "field 3 (the state) is empty".to_string())?;
    let pgid = field(5)?;
    let pgid = pgid
        .parse::<i32>()
        .map_err(|_| format!("field 5 (the process group) is not a number: {pgid:?}"))?;
    Ok(ProcStat {
        state,
        pgid,
        utime: number(14)?,
        stime: number(15)?,
        cutime: signed(16)?,
        cstime: signed(17)?,
        start_ticks: number(22)?,
    })
}

/// The peak resident set (`VmHWM`) of /proc/PID/status, in bytes; `None` when the file has no
/// such line (a zombie's, a kernel thread's).
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    let rest = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?;
    let mut words = rest.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        // The kernel has always written kB; another unit would be a format this does not know.
        _ => None,
    }
}

/// Clock ticks to nanoseconds, at `ticks_per_sec` (sysconf(_SC_CLK_TCK), 100 nearly
/// everywhere).
pub fn ticks_to_ns(ticks: u64, ticks_per_sec: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_sec.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The kernel's clock ticks per second (sysconf(_SC_CLK_TCK)).
pub fn ticks_per_sec() -> u64 {
    // SAFETY: sysconf takes a constant and returns a value or -1; it touches no memory of ours.
    let ticks = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// /proc/PID/stat of `pid` under `root`; `None` when there is no such process (or its entry
/// cannot be read: it is gone, or it is not ours to read).
pub fn read_stat(root: &HostRoot, pid: i32) -> Option<ProcStat> {
    let text = root.read(&format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).ok()
}

/// The peak resident set of `pid`, in bytes (see [`parse_vm_hwm`]).
pub fn read_vm_hwm(root: &HostRoot, pid: i32) -> Option<u64> {
    parse_vm_hwm(&root.read(&format!("/proc/{pid}/status")).ok()?)
}

/// The kernel's id of this boot (/proc/sys/kernel/random/boot_id): with it, a pid and start
/// time written before a reboot are never taken for a process of this boot. Empty when it
/// cannot be read.
pub fn read_boot_id(root: &HostRoot) -> String {
    root.read("/proc/sys/kernel/random/boot_id")
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// A process, told apart from a later one that reuses its pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Its pid.
    pub pid: i32,
    /// Its start time, ticks since boot.
    pub start_ticks: u64,
}

impl Identity {
    /// Who `pid` is now, if it exists.
    pub fn of(root: &HostRoot, pid: i32) -> Option<Self> {
        read_stat(root, pid).map(|s| Self {
            pid,
            start_ticks: s.start_ticks,
        })
    }

    /// Whether this process still exists (perhaps as a zombie: its pid and group are still
    /// its own then).
    pub fn exists(&self, root: &HostRoot) -> bool {
        read_stat(root, self.pid).is_some_and(|s| s.start_ticks == self.start_ticks)
    }

    /// Whether this process still exists and has not exited.
    pub fn is_alive(&self, root: &HostRoot) -> bool {
        read_stat(root, self.pid)
            .is_some_and(|s| s.start_ticks == self.start_ticks && !s.has_exited())
    }
}

/// The pids of every process whose process group is `pgid`, from /proc under `root`.
pub fn group_members(root: &HostRoot, pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(root.resolve("/proc")) else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| read_stat(root, pid).is_some_and(|s| s.pgid == pgid))
        .collect();
    pids.sort_unstable();
    pids
}

/// The CPU time, in ticks, of the process group led by `leader`: user plus system time of
/// every process now in the group, plus the leader's children that it has waited for (cutime
/// and cstime). Children reaped by a process other than the leader are counted only through
/// their reaper, if it is the leader.
pub fn group_cpu_ticks(root: &HostRoot, leader: i32) -> u64 {
    let mut ticks = 0u64;
    for pid in group_members(root, leader) {
        if let Some(stat) = read_stat(root, pid) {
            ticks = ticks.saturating_add(stat.utime + stat.stime);
            if pid == leader {
                ticks = ticks.saturating_add(stat.cutime + stat.cstime);
            }
        }
    }
    ticks
}

fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/src/user_server/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
    }

    #[test]
    fn stat_fields_are_read_from_a_captured_process() {
        let busy = parse_stat(&fixture("busy.stat")).unwrap();
        assert_eq!(
            busy,
            ProcStat {
                state: 'R',
                pgid: 11822,
                utime: 61,
                stime: 5,
                cutime: 6,
                cstime: 2,
                start_ticks: 4745522,
            }
        );
        assert!(!busy.has_exited());
        let shell = parse_stat(&fixture("shell-after-child.stat")).unwrap();
        assert_eq!((shell.utime, shell.stime), (0, 0));
        assert_eq!((shell.cutime, shell.cstime), (48, 5), "its child's time");
        assert_eq!((shell.pgid, shell.start_ticks), (11021, 4743614));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let odd = parse_stat(&fixture("odd-comm.stat")).unwrap();
        assert_eq!(odd.state, 'S');
        assert_eq!(odd.pgid, 11021);
        assert_eq!(odd.start_ticks, 4743685);
    }

    #[test]
    fn a_zombie_is_seen_as_exited_and_has_no_peak_rss() {
        let zombie = parse_stat(&fixture("zombie.stat")).unwrap();
        assert!(zombie.has_exited());
        assert_eq!(zombie.start_ticks, 4744951);
        assert_eq!(parse_vm_hwm(&fixture("zombie.status")), None);
    }

    #[test]
    fn peak_rss_is_vm_hwm_in_bytes() {
        assert_eq!(parse_vm_hwm(&fixture("busy.status")), Some(64700 * 1024));
        assert_eq!(
            parse_vm_hwm(&fixture("shell-after-child.status")),
            Some(3120 * 1024)
        );
    }

    #[test]
    fn damaged_stat_text_is_an_error_naming_the_field() {
        assert!(parse_stat("").unwrap_err().contains("no ')'"));
        let cut = fixture("busy.stat");
        let cut = &cut[..cut.find(" 4745522").unwrap()];
        assert!(parse_stat(cut).unwrap_err().contains("field 22"), "{cut}");
    }

    #[test]
    fn ticks_become_nanoseconds() {
        assert_eq!(ticks_to_ns(66, 100), 660_000_000);
        assert_eq!(ticks_to_ns(1, 250), 4_000_000);
        assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX);
        assert_eq!(ticks_to_ns(5, 0), 5_000_000_000, "a 0 rate is taken as 1");
    }

    /// A fake /proc holding captured processes under their own pids.
    fn fake_proc() -> (tempfile::TempDir, HostRoot) {
        let dir = tempfile::tempdir().unwrap();
        for (pid, name) in [
            (12923, "group-leader"),
            (12980, "group-member"),
            (11024, "shell-after-child"),
            (11155, "odd-comm"),
            (11660, "zombie"),
        ] {
            let proc = dir.path().join(format!("proc/{pid}"));
            std::fs::create_dir_all(&proc).unwrap();
            std::fs::write(proc.join("stat"), fixture(&format!("{name}.stat"))).unwrap();
            if let Ok(status) = std::fs::read_to_string(format!(
                "{}/src/user_server/fixtures/{name}.status",
                env!("CARGO_MANIFEST_DIR")
            )) {
                std::fs::write(proc.join("status"), status).unwrap();
            }
        }
        // Not a process: skipped.
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        let root = HostRoot::at(dir.path());
        (dir, root)
    }

    #[test]
    fn the_readers_find_a_group_and_add_up_its_time() {
        let (_dir, root) = fake_proc();
        assert_eq!(group_members(&root, 12923), vec![12923, 12980]);
        assert_eq!(group_members(&root, 11021), vec![11024, 11155]);
        // The member's 41 + 2, and the leader's own 0 + 0 and its waited-for child's 50 + 4;
        // the member's own children (6 + 3) are not the group's leader's.
        assert_eq!(group_cpu_ticks(&root, 12923), 41 + 2 + 50 + 4);
        assert_eq!(group_cpu_ticks(&root, 4), 0, "no such group");
        assert_eq!(read_vm_hwm(&root, 11024), Some(3120 * 1024));
        assert_eq!(read_vm_hwm(&root, 11155), None, "no status file");
        assert_eq!(read_vm_hwm(&root, 11660), None, "a zombie's");
        let zombie = Identity::of(&root, 11660).unwrap();
        assert!(zombie.exists(&root) && !zombie.is_alive(&root));
        let shell = Identity::of(&root, 11024).unwrap();
        assert_eq!(shell.start_ticks, 4743614);
        assert!(shell.exists(&root) && shell.is_alive(&root));
        let recycled = Identity {
            pid: 11024,
            start_ticks: 1,
        };
        assert!(
            !recycled.exists(&root),
            "a pid with another start time is someone else"
        );
        assert!(Identity::of(&root, 99).is_none());
    }
}
