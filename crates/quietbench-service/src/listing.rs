//! What ListRuns and GetRunReport answer, built from the service's records and its store
//! without writing anything: the rows of a listing, a caller's own runs as `quietbench runs`
//! prints them, and a run's JSON or HTML report exactly as `quietbench show --json/--html`
//! writes it.

use quietbench_proto::v1 as pb;

use super::state::Submission;
use quietbench_controller::record::RunRecord;
use quietbench_controller::store;

/// A listing's row for a run: what the store has of it (`stored`) and what the service knows
/// (`submission`), either of which may be missing.
pub fn row(submission: Option<&Submission>, stored: Option<&store::RunSummary>) -> pb::RunSummary {
    let owner = submission.and_then(|s| s.owner.clone()).unwrap_or_default();
    let status = |fallback: String| submission.map_or(fallback, |s| s.status_word().to_string());
    match stored {
        Some(r) => pb::RunSummary {
            run_id: r.id.clone(),
            status: status(r.status.as_str().to_string()),
            started_at_unix_ns: r
                .started_at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            probes: r.probes.clone(),
            hosts: u32::try_from(r.hosts).unwrap_or(u32::MAX),
            trials: u32::try_from(r.trials).unwrap_or(u32::MAX),
            submitted: submission.is_some(),
            owner,
        },
        None => pb::RunSummary {
            run_id: submission.map(|s| s.run_id.clone()).unwrap_or_default(),
            status: status(String::new()),
            submitted: submission.is_some(),
            owner,
            ..Default::default()
        },
    }
}

/// `caller`'s stored runs, `stored`, newest first, as `quietbench runs` prints a store's (the
/// whole store's text is for admins: it lists every tenant's runs).
pub fn own_runs_text(caller: &str, stored: &[store::RunSummary]) -> String {
    if stored.is_empty() {
        return format!("no runs stored by this service for {caller}\n");
    }
    let mut text = format!(
        "{:<36}  {:<24}  {:<11}  {:>5}  {:>6}  probes\n",
        "run", "started", "status", "hosts", "trials"
    );
    for r in stored {
        text.push_str(&format!(
            "{:<36}  {:<24}  {:<11}  {:>5}  {:>6}  {}\n",
            r.id,
            quietbench_controller::report::json::rfc3339(r.started_at),
            r.status.as_str(),
            r.hosts,
            r.trials,
            r.probes.join(",")
        ));
    }
    text
}

/// The JSON report of `record`, as `quietbench show --json FILE` writes it.
pub fn json_report(record: &RunRecord) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(&quietbench_controller::report::json::build(record))? + "\n")
}

/// The HTML report of `record`, as `quietbench show --html FILE` writes it.
pub fn html_report(record: &RunRecord) -> String {
    quietbench_controller::report::html::render_html(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(id: &str, trials: usize) -> store::RunSummary {
        store::RunSummary {
            id: id.into(),
            started_at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
            finished_at: None,
            status: store::RunStatus::Complete,
            error: None,
            probes: vec!["cpu.primes".into()],
            hosts: 1,
            trials,
        }
    }

    #[test]
    fn rows_carry_the_owner_and_the_service_status() {
        let mut s = Submission::new("a".into(), Vec::new());
        s.owner = Some("client a".into());
        let queued = row(Some(&s), None);
        assert_eq!(
            (
                queued.run_id.as_str(),
                queued.status.as_str(),
                queued.owner.as_str()
            ),
            ("a", "queued", "client a")
        );
        assert!(queued.submitted && queued.started_at_unix_ns == 0);
        let cli = row(None, Some(&stored("b", 4)));
        assert_eq!((cli.status.as_str(), cli.trials), ("complete", 4));
        assert!(!cli.submitted && cli.owner.is_empty());
    }

    #[test]
    fn own_runs_read_as_the_cli_lists_a_store() {
        let text = own_runs_text(
            "client a",
            &[stored("4f2a9c1e-0b6d-4e8a-9f3c-2d7b5a1e6c40", 3)],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("run ") && lines[0].ends_with("probes"));
        let words: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            words,
            [
                "4f2a9c1e-0b6d-4e8a-9f3c-2d7b5a1e6c40",
                "2023-11-14T22:13:20.000Z",
                "complete",
                "1",
                "3",
                "cpu.primes"
            ]
        );
        assert_eq!(
            own_runs_text("client a", &[]),
            "no runs stored by this service for client a\n"
        );
    }
}
