use std::path::PathBuf;

use super::*;

fn submission(id: &str, stage: Stage, finished_days_ago: Option<u64>) -> Submission {
    let mut s = Submission::new(id.into(), vec!["local".into()]);
    s.owner = Some("client a".into());
    s.stage = stage;
    s.finished_at_unix_ns = finished_days_ago.map(|days| {
        super::super::state::now_unix_ns() - i64::try_from(days * 86_400).unwrap() * 1_000_000_000
    });
    s
}

fn complete() -> Stage {
    Stage::Finished {
        status: "complete".into(),
        exit_code: 0,
        error: None,
    }
}

#[test]
fn a_start_prunes_old_finished_runs_and_fails_those_whose_env_values_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    let mut with_env = submission("env", Stage::Queued, None);
    with_env.env = [("API_TOKEN".to_string(), "<redacted>".to_string())].into();
    for s in [
        submission("old", complete(), Some(40)),
        submission("recent", complete(), Some(2)),
        submission("queued", Stage::Queued, None),
        submission("was running", Stage::Running, None),
        with_env,
    ] {
        state.save(&s).unwrap();
    }
    let children = ChildSettings {
        exe: PathBuf::from("/bin/false"),
        db: dir.path().join("store.sqlite3"),
        agent_tls_args: Vec::new(),
    };
    let runs = Runs::load(state.clone(), children, 1, Retention::new(30, 1024)).unwrap();
    // The old one's folder is gone; the others stay, queued ones as they were.
    assert!(runs.get("old").is_none() && !state.run_dir("old").exists());
    assert_eq!(runs.get("recent").unwrap().stage, complete());
    assert_eq!(runs.get("queued").unwrap().stage, Stage::Queued);
    assert_eq!(runs.get("was running").unwrap().stage, Stage::Queued);
    let lost = runs.get("env").unwrap();
    assert!(
        matches!(&lost.stage, Stage::Finished { status, error: Some(e), .. }
            if status == "failed" && e.contains("submit the run again")),
        "{:?}",
        lost.stage
    );
    assert!(lost.finished_at_unix_ns.is_some());
    // It just failed: kept through the grace, whatever the limits.
    assert!(runs.prune().is_empty());
}
