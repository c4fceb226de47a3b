//! How long the service keeps a finished submission's own files (`DIR/runs/<run id>/`: its
//! record, plan and output): `serve --keep-days` and `--keep-mib`. The run's results in the
//! store are never touched; once its folder goes, the run is known to the store alone (an
//! admin's, then: see [`super::access`]). Queued and measuring runs are never removed, and a
//! run that has just finished is kept for [`GRACE`] so that its watchers get its end.
//!
//! [`select`] is the rule, pure; [`super::runs::Runs`] measures the folders and applies it at
//! start and whenever a run finishes.

use std::time::Duration;

/// How long a run that finished is kept whatever the limits: its watchers still read its
/// output and end.
pub const GRACE: Duration = Duration::from_secs(60);
/// `--keep-days` by default.
pub const DEFAULT_KEEP_DAYS: u32 = 30;
/// `--keep-mib` by default.
pub const DEFAULT_KEEP_MIB: u64 = 1024;

/// The retention rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A finished submission older than this is removed.
    pub keep_for: Duration,
    /// While all submissions together take more, the oldest finished ones are removed.
    pub keep_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self::new(DEFAULT_KEEP_DAYS, DEFAULT_KEEP_MIB)
    }
}

impl Retention {
    /// `--keep-days DAYS --keep-mib MIB`.
    pub fn new(days: u32, mib: u64) -> Self {
        Self {
            keep_for: Duration::from_secs(u64::from(days) * 86_400),
            keep_bytes: mib.saturating_mul(1024 * 1024),
        }
    }
}

/// One submission as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Its run id.
    pub run_id: String,
    /// How long ago it finished; `None` while it is queued or measuring.
    pub finished_ago: Option<Duration>,
    /// What its folder takes.
    pub bytes: u64,
}

/// The submissions `rule` removes from `all`: every finished one older than `keep_for`, then
/// the oldest finished ones while everything left takes more than `keep_bytes`. Never one that
/// is queued or measuring, nor one finished less than [`GRACE`] ago.
pub fn select(all: &[Kept], rule: Retention) -> Vec<String> {
    let mut removable: Vec<&Kept> = all
        .iter()
        .filter(|k| k.finished_ago.is_some_and(|ago| ago >= GRACE))
        .collect();
    // Oldest first; the id breaks ties so the choice does not depend on the listing's order.
    removable.sort_by(|a, b| {
        b.finished_ago
            .cmp(&a.finished_ago)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    let mut total: u64 = all.iter().map(|k| k.bytes).sum();
    let mut removed = Vec::new();
    for k in removable {
        let too_old = k.finished_ago.is_some_and(|ago| ago > rule.keep_for);
        if too_old || total > rule.keep_bytes {
            total = total.saturating_sub(k.bytes);
            removed.push(k.run_id.clone());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn kept(id: &str, finished_ago: Option<Duration>, bytes: u64) -> Kept {
        Kept {
            run_id: id.into(),
            finished_ago,
            bytes,
        }
    }

    #[test]
    fn old_finished_runs_go_and_queued_or_measuring_ones_never_do() {
        let rule = Retention::new(30, 1024);
        let all = [
            kept("old", Some(31 * DAY), 10),
            kept("recent", Some(29 * DAY), 10),
            kept("queued long ago", None, 10),
            kept("just now", Some(Duration::from_secs(1)), 10),
        ];
        assert_eq!(select(&all, rule), ["old"]);
    }

    #[test]
    fn over_the_byte_limit_the_oldest_finished_go_first_until_it_fits() {
        let rule = Retention {
            keep_for: 365 * DAY,
            keep_bytes: 100,
        };
        let all = [
            kept("b", Some(2 * DAY), 40),
            kept("running", None, 50),
            kept("a", Some(3 * DAY), 40),
            kept("c", Some(DAY), 40),
        ];
        // 170 bytes: a (oldest) goes, 130; then b, 90; c stays.
        assert_eq!(select(&all, rule), ["a", "b"]);
        // Runs still measuring never go, even when they alone pass the limit.
        let alone = [kept("big", None, 500), kept("small", Some(DAY), 1)];
        assert_eq!(select(&alone, rule), ["small"]);
        // A run that has just finished waits out the grace.
        let fresh = [kept("fresh", Some(GRACE / 2), 500)];
        assert!(select(&fresh, rule).is_empty());
        assert!(select(&[], rule).is_empty());
    }

    #[test]
    fn the_flags_are_days_and_mebibytes() {
        let rule = Retention::new(2, 3);
        assert_eq!(rule.keep_for, 2 * DAY);
        assert_eq!(rule.keep_bytes, 3 * 1024 * 1024);
        assert_eq!(
            Retention::default(),
            Retention::new(DEFAULT_KEEP_DAYS, DEFAULT_KEEP_MIB)
        );
    }
}
