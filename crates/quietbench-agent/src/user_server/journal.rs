//! The servers journal: every user's server the agent starts is written here, and fsynced,
//! before it can run a single instruction of its own (its child waits on a pipe until then), so
//! that an agent killed mid-trial leaves nothing the next agent start does not stop.
//!
//! One line per server: the boot it was started in, the agent that owns it and the server,
//! each a pid and its start time (a recycled pid is never taken for either), and the command
//! for the logs:
//!
//! ```text
//! boot=8e1ff44c-2aa9-40ae-90e7-63660523e202 agent=4242@4745000 server=4243@4745522 command=python3 -m http.server 8080
//! ```
//!
//! Not JSON, as the tuning journal is, so the agent needs no JSON parser for four numbers.
//! A line without its newline was cut short by a crash while it was written: its server was
//! never released (the child exits when the agent's end of the pipe closes), so it is skipped.
//!
//! Several agents may share a state directory (two on one machine): each line names its
//! agent, and an agent starting up stops only the servers of agents that are gone. Every
//! change of the file is made under an flock of `servers.lock`, which dies with its holder.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use quietbench_host::HostRoot;

use super::procfs::Identity;

/// The journal's name inside the agent's state directory.
pub const SERVER_JOURNAL_FILE: &str = "servers.journal";
/// The lock held while the journal is changed.
const LOCK_FILE: &str = "servers.lock";

/// One journaled server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    /// /proc/sys/kernel/random/boot_id when it was started (empty if unreadable).
    pub boot: String,
    /// The agent that started it.
    pub agent: Identity,
    /// The server, whose pid is also its process group.
    pub server: Identity,
    /// The command as run, for the logs.
    pub command: String,
}

/// One line, newline included. The command's backslashes, newlines and carriage returns are
/// escaped so that it stays on its line.
pub fn format_entry(entry: &ServerEntry) -> String {
    let mut command = String::with_capacity(entry.command.len());
    for c in entry.command.chars() {
        match c {
            '\\' => command.push_str("\\\\"),
            '\n' => command.push_str("\\n"),
            '\r' => command.push_str("\\r"),
            c => command.push(c),
        }
    }
    format!(
        "boot={} agent={}@{} server={}@{} command={command}\n",
        entry.boot,
        entry.agent.pid,
        entry.agent.start_ticks,
        entry.server.pid,
        entry.server.start_ticks
    )
}

/// Parses one line (without its newline).
pub fn parse_entry(line: &str) -> Result<ServerEntry, String> {
    let mut rest = line;
    let mut take = |key: &str| -> Result<&str, String> {
        let after = rest
            .strip_prefix(key)
            .and_then(|r| r.strip_prefix('='))
            .ok_or_else(|| format!("expected {key}= in {line:?}"))?;
        if key == "command" {
            rest = "";
            return Ok(after);
        }
        let (value, tail) = after
            .split_once(' ')
            .ok_or_else(|| format!("{key}= is the last field of {line:?}"))?;
        rest = tail;
        Ok(value)
    };
    let boot = take("boot")?.to_string();
    let agent = take("agent")?;
    let agent = identity("agent", agent)?;
    let server = take("server")?;
    let server = identity("server", server)?;
    let escaped = take("command")?;
    let mut command = String::with_capacity(escaped.len());
    let mut chars = escaped.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            command.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => command.push('\\'),
            Some('n') => command.push('\n'),
            Some('r') => command.push('\r'),
            other => return Err(format!("bad escape \\{other:?} in the command of {line:?}")),
        }
    }
    Ok(ServerEntry {
        boot,
        agent,
        server,
        command,
    })
}

fn identity(key: &str, text: &str) -> Result<Identity, String> {
    let parsed = text
        .split_once('@')
        .and_then(|(pid, start)| Some((pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?)));
    match parsed {
        Some((pid, start_ticks)) if pid > 0 => Ok(Identity { pid, start_ticks }),
        _ => Err(format!("{key}={text} is not PID@START_TICKS")),
    }
}

/// Parses the journal: its entries, and one sentence per line skipped (cut short by a crash,
/// or damaged).
pub fn parse_journal(text: &str) -> (Vec<ServerEntry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let Some(line) = line.strip_suffix('\n') else {
            skipped.push(format!(
                "line {}: cut short (no newline): its server never started",
                number + 1
            ));
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        match parse_entry(line) {
            Ok(entry) => entries.push(entry),
            Err(why) => skipped.push(format!("line {}: {why}", number + 1)),
        }
    }
    (entries, skipped)
}

/// The journal could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("servers journal {path}: cannot {action}: {source}")]
pub struct JournalError {
    /// The journal (or its directory).
    path: PathBuf,
    /// What was being done.
    action: &'static str,
    /// Why it failed.
    #[source]
    source: std::io::Error,
}

/// What a start-up found of servers left behind.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// Servers of agents that are gone, killed (their group got SIGKILL).
    pub killed: Vec<ServerEntry>,
    /// Entries dropped: their server had already ended (or the machine rebooted since).
    pub gone: Vec<ServerEntry>,
    /// Entries kept: their agent is alive, and owns them.
    pub kept: Vec<ServerEntry>,
    /// Lines that could not be read.
    pub skipped: Vec<String>,
}

/// The servers journal of a state directory.
#[derive(Debug, Clone)]
pub struct ServerJournal {
    dir: PathBuf,
}

impl ServerJournal {
    /// The journal of `state_dir`, created at the first server.
    pub fn in_dir(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: state_dir.into(),
        }
    }

    /// The journal file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(SERVER_JOURNAL_FILE)
    }

    fn fail(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
        move |source| JournalError {
            path: self.path(),
            action,
            source,
        }
    }

    /// Holds the journal's lock until dropped (blocking: other holders keep it for a few file
    /// operations).
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, JournalError> {
        std::fs::create_dir_all(&self.dir).map_err(self.fail("create its directory"))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(LOCK_FILE))
            .map_err(self.fail("open its lock file"))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| self.fail("lock it")(std::io::Error::from(errno)))
    }

    fn read(&self) -> Result<(Vec<ServerEntry>, Vec<String>), JournalError> {
        match std::fs::read_to_string(self.path()) {
            Ok(text) => Ok(parse_journal(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), Vec::new())),
            Err(err) => Err(self.fail("read it")(err)),
        }
    }

    /// Every entry, and the lines that could not be read.
    #[cfg(test)]
    pub fn entries(&self) -> Result<(Vec<ServerEntry>, Vec<String>), JournalError> {
        let _lock = self.lock()?;
        self.read()
    }

    /// Makes `entry` durable: appended, the file fsynced, and its directory too when the file
    /// was created. Only then may the server start.
    pub fn record(&self, entry: &ServerEntry) -> Result<(), JournalError> {
        let _lock = self.lock()?;
        let created = !self.path().exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path())
            .map_err(self.fail("open it"))?;
        file.write_all(format_entry(entry).as_bytes())
            .map_err(self.fail("append to it"))?;
        file.sync_all().map_err(self.fail("fsync it"))?;
        if created {
            sync_dir(&self.dir).map_err(self.fail("fsync its directory"))?;
        }
        Ok(())
    }

    /// Removes the entry of `server` (it has been stopped and reaped).
    pub fn remove(&self, server: Identity) -> Result<(), JournalError> {
        let _lock = self.lock()?;
        let (entries, _) = self.read()?;
        if !entries.iter().any(|e| e.server == server) {
            return Ok(());
        }
        let remaining: Vec<ServerEntry> =
            entries.into_iter().filter(|e| e.server != server).collect();
        self.replace(&remaining)
    }

    /// At agent start, before serving: SIGKILLs the group of every journaled server whose
    /// agent is gone and which still runs (same pid, same start time, same boot), and clears
    /// their entries. Entries of live agents (another agent sharing this state directory) are
    /// kept. `me` is the agent starting up.
    pub fn stop_orphans(
        &self,
        root: &HostRoot,
        boot: &str,
        me: Identity,
    ) -> Result<OrphanReport, JournalError> {
        let _lock = self.lock()?;
        let (entries, skipped) = self.read()?;
        let mut report = OrphanReport {
            skipped,
            ..OrphanReport::default()
        };
        if entries.is_empty() && report.skipped.is_empty() {
            return Ok(report);
        }
        for entry in entries {
            let this_boot = entry.boot == boot;
            if this_boot && entry.agent != me && entry.agent.is_alive(root) {
                report.kept.push(entry);
            } else if this_boot && entry.server.exists(root) {
                // SAFETY: kill(2) with a negative pid signals that process group. The group's
                // leader exists with the start time journaled, so the group is the server's.
                unsafe { nix::libc::kill(-entry.server.pid, nix::libc::SIGKILL) };
                report.killed.push(entry);
            } else {
                report.gone.push(entry);
            }
        }
        self.replace(&report.kept)?;
        Ok(report)
    }

    /// Replaces the journal with `remaining`, or removes it when none remain. Atomic: written
    /// beside, fsynced, renamed.
    fn replace(&self, remaining: &[ServerEntry]) -> Result<(), JournalError> {
        if remaining.is_empty() {
            match std::fs::remove_file(self.path()) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(err) => return Err(self.fail("remove it")(err)),
            }
            return sync_dir(&self.dir).map_err(self.fail("fsync its directory"));
        }
        let tmp = self.dir.join(format!("{SERVER_JOURNAL_FILE}.tmp"));
        let mut file = File::create(&tmp).map_err(self.fail("write its replacement"))?;
        for entry in remaining {
            file.write_all(format_entry(entry).as_bytes())
                .map_err(self.fail("write its replacement"))?;
        }
        file.sync_all()
            .map_err(self.fail("fsync its replacement"))?;
        std::fs::rename(&tmp, self.path()).map_err(self.fail("replace it"))?;
        sync_dir(&self.dir).map_err(self.fail("fsync its directory"))
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(server_pid: i32, command: &str) -> ServerEntry {
        ServerEntry {
            boot: "8e1ff44c-2aa9-40ae-90e7-63660523e202".into(),
            agent: Identity {
                pid: 4242,
                start_ticks: 4745000,
            },
            server: Identity {
                pid: server_pid,
                start_ticks: 4745522,
            },
            command: command.into(),
        }
    }

    #[test]
    fn a_line_reads_back_as_written_whatever_the_command_holds() {
        let plain = entry(4243, "python3 -m http.server 8080");
        let line = format_entry(&plain);
        assert_eq!(
            line,
            "boot=8e1ff44c-2aa9-40ae-90e7-63660523e202 agent=4242@4745000 server=4243@4745522 \
             command=python3 -m http.server 8080\n"
        );
        assert_eq!(parse_entry(line.trim_end_matches('\n')).unwrap(), plain);
        let odd = entry(7, "sh -c 'echo a\\nb\nc\r' command=x server=1@2 ");
        let line = format_entry(&odd);
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert_eq!(parse_journal(&line), (vec![odd], vec![]));
        let empty_boot = ServerEntry {
            boot: String::new(),
            ..entry(9, "")
        };
        assert_eq!(
            parse_journal(&format_entry(&empty_boot)).0,
            vec![empty_boot]
        );
    }

    #[test]
    fn a_line_cut_short_or_damaged_is_skipped_and_named() {
        let full = format_entry(&entry(4243, "server --port 1"));
        for cut in [10, 40, full.len() - 1] {
            let text = format!("{full}{}", &full[..cut]);
            let (entries, skipped) = parse_journal(&text);
            assert_eq!(entries.len(), 1, "cut at {cut}");
            assert_eq!(skipped.len(), 1, "cut at {cut}");
            assert!(skipped[0].starts_with("line 2: cut short"), "{skipped:?}");
        }
        let (entries, skipped) = parse_journal("boot= agent=1@2 server=x@3 command=a\n\n");
        assert!(entries.is_empty());
        assert!(skipped[0].contains("server=x@3"), "{skipped:?}");
        assert!(
            parse_entry("boot=b agent=0@2 server=3@4 command=").is_err(),
            "pid 0"
        );
        assert!(
            parse_entry("boot=b agent=1@2 server=3@4").is_err(),
            "no command"
        );
    }

    #[test]
    fn entries_are_recorded_durably_and_removed_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let journal = ServerJournal::in_dir(dir.path().join("state"));
        assert_eq!(journal.entries().unwrap(), (vec![], vec![]));
        journal.record(&entry(10, "a")).unwrap();
        journal.record(&entry(11, "b")).unwrap();
        assert_eq!(
            journal.entries().unwrap().0,
            vec![entry(10, "a"), entry(11, "b")]
        );
        journal.remove(entry(10, "a").server).unwrap();
        assert_eq!(journal.entries().unwrap().0, vec![entry(11, "b")]);
        journal.remove(entry(10, "a").server).unwrap(); // idempotent
        journal.remove(entry(11, "b").server).unwrap();
        assert!(!journal.path().exists(), "an empty journal is removed");
    }

    #[test]
    fn an_unwritable_state_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let err = ServerJournal::in_dir(&file)
            .record(&entry(1, "a"))
            .unwrap_err();
        assert!(err.to_string().contains("servers journal"), "{err}");
    }

    /// A `sleep 60` in a process group of its own, as the agent starts servers.
    fn sleeper() -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_start_up_kills_only_the_servers_of_agents_that_are_gone() {
        let root = HostRoot::live();
        let boot = super::super::procfs::read_boot_id(&root);
        let me = Identity::of(&root, std::process::id() as i32).unwrap();
        let (mut orphan, mut owned, mut other_agent) = (sleeper(), sleeper(), sleeper());
        let who = |child: &std::process::Child| Identity::of(&root, child.id() as i32).unwrap();
        let dead_agent = Identity {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        let journaled = |agent, server, command: &str| ServerEntry {
            boot: boot.clone(),
            agent,
            server,
            command: command.into(),
        };
        let dir = tempfile::tempdir().unwrap();
        let journal = ServerJournal::in_dir(dir.path());
        let orphaned = journaled(dead_agent, who(&orphan), "orphan");
        let kept = journaled(who(&other_agent), who(&owned), "owned");
        let recycled = journaled(
            dead_agent,
            Identity {
                start_ticks: 1,
                ..who(&owned)
            },
            "recycled pid",
        );
        let other_boot = ServerEntry {
            boot: "another-boot".into(),
            ..journaled(dead_agent, who(&owned), "before a reboot")
        };
        for e in [&orphaned, &kept, &recycled, &other_boot] {
            journal.record(e).unwrap();
        }
        let report = journal.stop_orphans(&root, &boot, me).unwrap();
        assert_eq!(report.killed, vec![orphaned]);
        assert_eq!(report.kept, vec![kept.clone()]);
        assert_eq!(report.gone, vec![recycled, other_boot]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(orphan.wait().unwrap().signal(), Some(9));
        assert!(
            owned.try_wait().unwrap().is_none(),
            "a live agent's server runs on"
        );
        assert_eq!(journal.entries().unwrap().0, vec![kept]);
        for child in [&mut owned, &mut other_agent] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        // Its agent gone too, the last one goes at the next start.
        let report = journal.stop_orphans(&root, &boot, me).unwrap();
        assert_eq!(report.gone.len(), 1);
        assert!(!journal.path().exists());
    }
}
