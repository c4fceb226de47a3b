//! Whole exec trials under bounds: through the runner, as the agent runs them, with commands
//! that would run for half a minute and leave a grandchild behind. Every time bound here is
//! far from what the machine's speed could decide: a command that is not killed takes 30 s,
//! and the tests allow 15.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::affinity::current_thread_affinity;
use crate::spec::TrialBounds;
use crate::test_params as params;
use crate::{RunError, TrialOutcome, TrialSettings, plan_placement, resolve_probe, run_trial};

/// A command that starts `sleep 300` in the background, writes its pid to `pidfile`, and
/// then runs `rest`.
fn leaves_a_grandchild(pidfile: &Path, rest: &str) -> String {
    format!("sleep 300 & echo $! > {}; {rest}", pidfile.display())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qb-exec-bounds-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The pid a command wrote, once it has.
fn pid_in(pidfile: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            pidfile.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` still runs: it exists and is not a zombie (a killed process whose new parent
/// has not reaped it yet has stopped running all the same).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits (up to 5 s: the kill is immediate, its delivery is up to the scheduler) for `pid` to
/// stop running.
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Runs an exec trial of `pairs` for `duration`, bounded with `grace` (None: unbounded, as a
/// library caller that sets no bounds), cancelled when `cancel` is set.
fn trial(
    pairs: &[(&str, &str)],
    duration: Duration,
    grace: Option<Duration>,
    cancel: &Arc<AtomicBool>,
) -> Result<TrialOutcome, RunError> {
    let mut spec = resolve_probe("exec", &params(pairs)).unwrap();
    if let Some(grace) = grace {
        spec = spec.with_bounds(TrialBounds {
            cancel: Arc::clone(cancel),
            duration,
            grace,
        });
    }
    let allowed = current_thread_affinity().unwrap();
    let settings = TrialSettings {
        duration,
        interval: Duration::from_millis(100),
        plan: plan_placement(spec.threads, &allowed, &[]).unwrap(),
        unpinned: None,
    };
    run_trial(&spec, &settings, cancel, &mut |_| true)
}

/// How a trial ended, short (its histograms are no help in a failure message).
fn summary(outcome: &Result<TrialOutcome, RunError>) -> String {
    match outcome {
        Ok(o) => format!(
            "it ended normally after {} events (cancelled: {})",
            o.total.events(),
            o.cancelled
        ),
        Err(e) => format!("it failed otherwise: {e}"),
    }
}

#[test]
fn a_command_past_the_deadline_is_killed_with_its_group_and_fails_the_trial() {
    let dir = scratch("deadline");
    let pidfile = dir.join("pid");
    let cmd = leaves_a_grandchild(&pidfile, "sleep 30");
    let started = Instant::now();
    let outcome = trial(
        &[("cmd", &cmd), ("shell", "true")],
        Duration::from_millis(200),
        Some(Duration::from_secs(2)),
        &Arc::new(AtomicBool::new(false)),
    );
    let took = started.elapsed();
    let grandchild = pid_in(&pidfile);
    std::fs::remove_dir_all(&dir).unwrap();
    let Err(RunError::Workload(message)) = outcome else {
        panic!("the trial did not fail: {}", summary(&outcome));
    };
    assert!(
        message.starts_with(
            "exec: the command ran past the trial's deadline of 2.2 s (duration 0.2 s + grace \
             2 s); it was killed"
        ),
        "{message}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(gone(grandchild), "the grandchild {grandchild} still runs");
}

#[test]
fn a_cancel_kills_the_running_command_and_its_group_and_the_trial_ends_cancelled() {
    let dir = scratch("cancel");
    let pidfile = dir.join("pid");
    let cmd = leaves_a_grandchild(&pidfile, "sleep 30");
    let cancel = Arc::new(AtomicBool::new(false));
    let canceller = {
        let (cancel, pidfile) = (Arc::clone(&cancel), pidfile.clone());
        std::thread::spawn(move || {
            let pid = pid_in(&pidfile);
            cancel.store(true, Ordering::Relaxed);
            pid
        })
    };
    let started = Instant::now();
    // A minute's trial with an hour's grace: only the cancel can end it soon.
    let outcome = trial(
        &[("cmd", &cmd), ("shell", "true")],
        Duration::from_secs(60),
        Some(Duration::from_secs(3600)),
        &cancel,
    );
    let took = started.elapsed();
    let grandchild = canceller.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let outcome = outcome.expect("a cancelled trial ends normally");
    assert!(outcome.cancelled);
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(gone(grandchild), "the grandchild {grandchild} still runs");
}

#[test]
fn what_a_command_leaves_behind_is_killed_when_it_ends_even_unbounded() {
    let dir = scratch("leftover");
    let pidfile = dir.join("pid");
    // The command itself ends at once; its grandchild would sleep on for five minutes.
    let cmd = leaves_a_grandchild(&pidfile, "true");
    let outcome = trial(
        &[("cmd", &cmd), ("shell", "true")],
        Duration::from_millis(100),
        None,
        &Arc::new(AtomicBool::new(false)),
    );
    let grandchild = pid_in(&pidfile);
    std::fs::remove_dir_all(&dir).unwrap();
    let outcome = outcome.unwrap();
    assert!(outcome.total.events() > 0);
    assert!(gone(grandchild), "the grandchild {grandchild} still runs");
}

#[test]
fn a_duet_obeys_the_deadline_and_the_cancel() {
    let started = Instant::now();
    let outcome = trial(
        &[("cmd", "sleep 30"), ("cmd_b", "sleep 30"), ("duet", "true")],
        Duration::from_millis(200),
        Some(Duration::from_millis(300)),
        &Arc::new(AtomicBool::new(false)),
    );
    let took = started.elapsed();
    let Err(RunError::Workload(message)) = outcome else {
        panic!("the duet did not fail: {}", summary(&outcome));
    };
    assert!(
        message.contains("ran past the trial's deadline of 0.5 s"),
        "{message}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");

    let dir = scratch("duet-cancel");
    let (a, b) = (dir.join("a"), dir.join("b"));
    let (cmd_a, cmd_b) = (
        leaves_a_grandchild(&a, "sleep 30"),
        leaves_a_grandchild(&b, "sleep 30"),
    );
    let cancel = Arc::new(AtomicBool::new(false));
    let canceller = {
        let (cancel, a, b) = (Arc::clone(&cancel), a.clone(), b.clone());
        std::thread::spawn(move || {
            let pids = (pid_in(&a), pid_in(&b));
            cancel.store(true, Ordering::Relaxed);
            pids
        })
    };
    let started = Instant::now();
    let outcome = trial(
        &[
            ("cmd", &cmd_a),
            ("cmd_b", &cmd_b),
            ("shell", "true"),
            ("duet", "true"),
        ],
        Duration::from_secs(60),
        Some(Duration::from_secs(3600)),
        &cancel,
    );
    let took = started.elapsed();
    let (pid_a, pid_b) = canceller.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(outcome.expect("a cancelled duet ends normally").cancelled);
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(gone(pid_a) && gone(pid_b), "{pid_a} or {pid_b} still runs");
}
