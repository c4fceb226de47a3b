//! Progress for people while hosts measure at once: on a terminal, one bar over every trial and,
//! for a fleet small enough to read, a line per host with its trials done / planned and its
//! latest figure; otherwise (a log, CI) one line per finished trial and per failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::remote_text::escape_remote;

/// Above this many hosts a line each would scroll the terminal: the bar's message counts them.
const MAX_HOST_LINES: usize = 16;

/// The whole run's progress.
#[derive(Clone)]
pub struct Progress {
    multi: MultiProgress,
    overall: ProgressBar,
}

impl Progress {
    /// A bar over `trials` trials, drawn on stderr when it is a terminal.
    pub fn new(trials: u64) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(trials));
        overall.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:24} {pos}/{len} trials  {msg}",
            )
            .expect("constant template is valid"),
        );
        Self { multi, overall }
    }

    /// True when nothing is drawn (stderr is no terminal): progress goes out as lines.
    fn as_lines(&self) -> bool {
        self.overall.is_hidden()
    }

    /// A line above the bars (or on stderr when there are none).
    pub fn line(&self, text: &str) {
        if self.as_lines() {
            eprintln!("{text}");
        } else {
            // Printing fails only when the terminal is gone; nothing to tell then.
            let _ = self.multi.println(text);
        }
    }

    /// The number of trials planned, once the hosts are known.
    pub fn set_length(&self, trials: u64) {
        self.overall.set_length(trials);
    }

    /// The overall bar's message.
    pub fn status(&self, text: String) {
        self.overall.set_message(text);
    }

    /// Progress handles for `hosts` (label, trials planned), in host order.
    pub fn hosts(&self, hosts: &[(String, u64)]) -> Vec<HostProgress> {
        // The ticker thread starts here, after a local fleet pinned the controller to its
        // housekeeping CPU, so it inherits that pinning.
        if !self.as_lines() {
            self.overall.enable_steady_tick(Duration::from_millis(200));
        }
        let with_lines = hosts.len() <= MAX_HOST_LINES && !self.as_lines();
        hosts
            .iter()
            .map(|(label, planned)| {
                let bar = if with_lines {
                    let bar = self.multi.add(ProgressBar::new(*planned));
                    bar.set_style(
                        ProgressStyle::with_template("  {prefix} {pos}/{len}  {msg}")
                            .expect("constant template is valid"),
                    );
                    bar.set_prefix(label.clone());
                    bar
                } else {
                    ProgressBar::hidden()
                };
                HostProgress {
                    bar,
                    planned: *planned,
                    done: Arc::new(AtomicU64::new(0)),
                    overall: self.overall.clone(),
                    multi: self.multi.clone(),
                    label: label.clone(),
                    lines: self.as_lines(),
                }
            })
            .collect()
    }

    /// Removes the bars.
    pub fn finish(&self) {
        self.overall.finish_and_clear();
        // Host lines stay as the run left them only while it runs.
        let _ = self.multi.clear();
    }
}

/// One host's progress line.
#[derive(Clone)]
pub struct HostProgress {
    bar: ProgressBar,
    planned: u64,
    done: Arc<AtomicU64>,
    overall: ProgressBar,
    multi: MultiProgress,
    label: String,
    lines: bool,
}

impl HostProgress {
    /// What the host does now (its line's message). Host lines are one line each and quote
    /// the agent (its units, its errors), so their text is escaped here ([`escape_remote`]);
    /// text escaped before reads the same.
    pub fn status(&self, text: String) {
        self.bar.set_message(escape_remote(&text).into_owned());
    }

    /// A trial finished: `summary` names it and its figure.
    pub fn trial_done(&self, summary: &str) {
        let summary = escape_remote(summary);
        self.bar.inc(1);
        self.done.fetch_add(1, Ordering::Relaxed);
        self.bar.set_message(format!("latest: {summary}"));
        self.overall.inc(1);
        if self.lines {
            eprintln!("{}: {summary}", self.label);
        }
    }

    /// Something the user must see about this host (a lost agent, a retry), by name.
    pub fn say(&self, text: &str) {
        let text = format!("quietbench: host {}: {}", self.label, escape_remote(text));
        if self.lines {
            eprintln!("{text}");
        } else {
            let _ = self.multi.println(text);
        }
    }

    /// The host failed: said at once, by name, whatever the display.
    pub fn failed(&self, error: &str) {
        let error = escape_remote(error);
        self.bar.set_message(format!("FAILED: {error}"));
        self.bar.abandon();
        // Its unrun trials leave the overall count, so the bar still ends full.
        let unrun = self
            .planned
            .saturating_sub(self.done.load(Ordering::Relaxed));
        if let Some(length) = self.overall.length() {
            self.overall.set_length(length.saturating_sub(unrun));
        }
        let text = format!("quietbench: host {} failed: {error}", self.label);
        if self.lines {
            eprintln!("{text}");
        } else {
            let _ = self.multi.println(text);
        }
    }
}
