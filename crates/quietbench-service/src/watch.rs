//! A run's event stream, read from where the run leaves its traces: the service's record of it
//! (queued, started, finished), the result store (hosts and trials as they are committed) and
//! its process's output files. Reading them rather than keeping events in memory means every
//! watcher, however late, and a watcher of a restarted service, sees the run from its start.
//! One thread per watcher polls; it ends when the run ends or the watcher goes away.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use quietbench_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

use super::runs::Runs;
use super::state::Stage;
use quietbench_controller::store::Store;

/// How often a watcher looks for news.
const POLL: Duration = Duration::from_millis(200);
/// Trials read from the store per look.
const TRIALS_PER_LOOK: usize = 256;

type Sender = mpsc::Sender<Result<pb::RunEvent, Status>>;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn event(e: pb::run_event::Event) -> pb::RunEvent {
    pb::RunEvent {
        at_unix_ns: now_ns(),
        event: Some(e),
    }
}

/// Streams run `run_id`'s events into `tx` until it ends or the receiver is dropped; `slot` is
/// given back then.
pub fn spawn(runs: Arc<Runs>, run_id: String, tx: Sender, slot: WatchSlot) {
    std::thread::Builder::new()
        .name("quietbench-watch".into())
        .spawn(move || {
            let _slot = slot;
            let mut watcher = Watcher::new(&runs, run_id, tx);
            if let Err(status) = watcher.follow(&runs) {
                let _ = watcher.tx.blocking_send(Err(status));
            }
        })
        .map(|_| ())
        .unwrap_or_else(|e| eprintln!("quietbench serve: warning: cannot start a watcher: {e}"));
}

struct Watcher {
    run_id: String,
    tx: Sender,
    store: Option<Store>,
    db: PathBuf,
    dir: PathBuf,
    queued_sent: bool,
    starts_sent: u32,
    hosts_sent: usize,
    trials_sent: usize,
    stderr_read: u64,
    partial_line: String,
}

/// The receiver went away: stop quietly.
struct Gone;

impl Watcher {
    fn new(runs: &Runs, run_id: String, tx: Sender) -> Self {
        Self {
            dir: runs.state().run_dir(&run_id),
            db: runs.db().to_path_buf(),
            run_id,
            tx,
            store: None,
            queued_sent: false,
            starts_sent: 0,
            hosts_sent: 0,
            trials_sent: 0,
            stderr_read: 0,
            partial_line: String::new(),
        }
    }

    fn send(&self, e: pb::run_event::Event) -> Result<(), Gone> {
        self.tx.blocking_send(Ok(event(e))).map_err(|_| Gone)
    }

    fn follow(&mut self, runs: &Runs) -> Result<(), Status> {
        loop {
            let Some(submission) = runs.get(&self.run_id) else {
                return Err(Status::not_found(format!("no run {}", self.run_id)));
            };
            // Read everything the run left before looking at whether it ended, so the last
            // trials come before RunFinished.
            if let Err(Gone) = self.news(runs, &submission) {
                return Ok(());
            }
            if runs.is_stopping() {
                return Err(Status::unavailable(format!(
                    "the service is stopping; run {} resumes when it starts again",
                    self.run_id
                )));
            }
            if let Stage::Finished {
                status,
                exit_code,
                error,
            } = submission.stage
            {
                // Every trial before the end, however many are left to send.
                loop {
                    match self.stored_news() {
                        Err(Gone) => return Ok(()),
                        Ok(0) => break,
                        Ok(_) => {}
                    }
                }
                let output = std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
                // The watcher may be gone by now: nothing is left to tell either way.
                let _ = self
                    .send(pb::run_event::Event::Output(pb::RunOutput { text: output }))
                    .and_then(|()| {
                        self.send(pb::run_event::Event::Finished(pb::RunFinished {
                            status,
                            exit_code,
                            error: error.unwrap_or_default(),
                        }))
                    });
                return Ok(());
            }
            if self.tx.is_closed() {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }

    fn news(&mut self, runs: &Runs, submission: &super::state::Submission) -> Result<(), Gone> {
        if !self.queued_sent {
            self.queued_sent = true;
            let reason = runs
                .waiting_for(&self.run_id)
                .unwrap_or_else(|| "accepted".to_string());
            self.send(pb::run_event::Event::Queued(pb::RunQueued { reason }))?;
        }
        while self.starts_sent < submission.starts {
            self.starts_sent += 1;
            self.send(pb::run_event::Event::Started(pb::RunStarted {
                resumed: self.starts_sent > 1,
            }))?;
        }
        self.stored_news()?;
        self.output_news()
    }

    /// Hosts and trials the store committed since the last look (at most [`TRIALS_PER_LOOK`]
    /// trials); returns how many trials. A store that cannot be read now (locked, not created
    /// yet) is tried again at the next look.
    fn stored_news(&mut self) -> Result<usize, Gone> {
        if self.store.is_none() {
            self.store = Store::open(&self.db).ok();
        }
        let Some(store) = &self.store else {
            return Ok(0);
        };
        let hosts = store
            .hosts_from(&self.run_id, self.hosts_sent)
            .unwrap_or_default();
        let trials = store
            .trials_from(&self.run_id, self.trials_sent, TRIALS_PER_LOOK)
            .unwrap_or_default();
        for h in hosts {
            self.hosts_sent = h.index + 1;
            self.send(pb::run_event::Event::Host(pb::HostStored {
                index: u32::try_from(h.index).unwrap_or(u32::MAX),
                address: h.address,
                cpu_model: h.cpu_model,
                instance_type: h.instance_type.unwrap_or_default(),
            }))?;
        }
        let sent = trials.len();
        for t in trials {
            self.trials_sent = t.seq + 1;
            self.send(pb::run_event::Event::Trial(pb::TrialFinished {
                seq: u32::try_from(t.seq).unwrap_or(u32::MAX),
                host: u32::try_from(t.host).unwrap_or(u32::MAX),
                variant: t.variant,
                round: t.round,
                warmup: t.warmup,
                cancelled: t.cancelled,
                figures: t
                    .figures
                    .into_iter()
                    .map(|(metric, unit, value)| pb::Figure {
                        metric,
                        unit,
                        value,
                    })
                    .collect(),
            }))?;
        }
        Ok(sent)
    }

    /// Whole lines the run's process wrote to stderr since the last look: warnings, errors and
    /// what it says. Progress bars are not drawn there (no terminal).
    fn output_news(&mut self) -> Result<(), Gone> {
        let text = read_from(&self.dir.join("stderr"), &mut self.stderr_read);
        self.partial_line.push_str(&text);
        while let Some(end) = self.partial_line.find('\n') {
            let line: String = self.partial_line.drain(..=end).collect();
            let line = line.trim_end().to_string();
            if line.is_empty() {
                continue;
            }
            let e = match line.strip_prefix("quietbench: warning: ") {
                Some(w) => pb::run_event::Event::Warning(pb::RunMessage {
                    text: w.to_string(),
                }),
                None => pb::run_event::Event::Log(pb::RunMessage { text: line }),
            };
            self.send(e)?;
        }
        Ok(())
    }
}

/// What a file holds past `offset` (which it moves on), as text.
fn read_from(path: &Path, offset: &mut u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    if file.seek(SeekFrom::Start(*offset)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    *offset += bytes.len() as u64;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One open event stream, counted while it lives.
pub struct WatchSlot(Arc<AtomicUsize>);

impl WatchSlot {
    /// A slot counted in `open` (already incremented by the caller, which checked the limit).
    pub fn new(open: Arc<AtomicUsize>) -> Self {
        Self(open)
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
