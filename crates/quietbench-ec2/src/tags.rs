//! The tags that make every resource a fleet creates findable and collectable: the run it
//! belongs to, who launched it, and when it may be deleted. Each resource gets them at creation
//! (RunInstances' and CreatePlacementGroup's tag specifications), so there is no moment in which
//! a resource exists untagged and a crash could orphan it.

use std::time::{Duration, SystemTime};

/// The run id.
pub const RUN: &str = "quietbench:run";
/// The caller's identity (an ARN) that launched it.
pub const OWNER: &str = "quietbench:owner";
/// RFC 3339 UTC: after this, `quietbench gc` deletes the resource. Renewed while the
/// controller lives (the lease); a killed controller's resources expire soon after.
pub const EXPIRES_AT: &str = "quietbench:expires-at";
/// The console's name column.
pub const NAME: &str = "Name";
/// An instance's part in the run: `host` (launched to be measured on, whatever the CPU-model
/// policy then decides) or `peer` (a network probe's other end, `http`'s or `tcp`'s load).
pub const ROLE: &str = "quietbench:role";

/// How far ahead each renewal moves the expiry: a controller killed without cleaning up leaves
/// resources that `gc` may delete at most this long after its last renewal.
pub const LEASE: Duration = Duration::from_secs(15 * 60);
/// How often the lease is renewed: three renewals fit in one lease, so one failed call (a
/// throttle, a blip) never lets the resources expire under a living controller.
pub const RENEW_EVERY: Duration = Duration::from_secs(5 * 60);
const _: () = assert!(
    RENEW_EVERY.as_secs() * 2 < LEASE.as_secs(),
    "a lease outlives at least two renewals"
);

/// The expiry a renewal at `now` sets: a lease ahead, but never past the run's `--ttl`
/// deadline.
pub fn expiry(now: SystemTime, deadline: SystemTime) -> SystemTime {
    (now + LEASE).min(deadline)
}

/// The tag value of an expiry: RFC 3339, UTC, whole seconds.
pub fn format_expiry(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A resource's expiry tag, read back. `Err` names what is wrong with it, so `gc` can say why it
/// leaves a resource alone rather than delete it on a guess.
pub fn parse_expiry(value: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339(value.trim())
        .map_err(|e| format!("{EXPIRES_AT} = {value:?} is not an RFC 3339 time: {e}"))
}

/// What a resource's tags say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The run it belongs to.
    pub run: String,
    /// Who launched it, when tagged.
    pub owner: Option<String>,
    /// When it may be deleted; `Err` when the tag is missing or unreadable.
    pub expires_at: Result<SystemTime, String>,
}

impl Ownership {
    /// Reads a resource's tags; `None` when it is not a fleet's (no run tag).
    pub fn from_tags<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let (mut run, mut owner, mut expires) = (None, None, None);
        for (key, value) in tags {
            match key {
                RUN => run = Some(value.to_string()),
                OWNER => owner = Some(value.to_string()),
                EXPIRES_AT => expires = Some(value.to_string()),
                _ => {}
            }
        }
        Some(Self {
            run: run?,
            owner,
            expires_at: match expires {
                Some(v) => parse_expiry(&v),
                None => Err(format!("no {EXPIRES_AT} tag")),
            },
        })
    }

    /// Whether `gc` may delete it at `now`: expired, and only then. A missing or unreadable
    /// expiry is not expired: `gc --run RUN` deletes such a run's resources by name.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires_at.as_ref().is_ok_and(|at| *at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        humantime::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn an_expiry_round_trips_and_never_passes_the_deadline() {
        let now = at("2026-11-24T10:00:00Z");
        assert_eq!(
            format_expiry(expiry(now, at("2026-11-24T12:00:00Z"))),
            "2026-11-24T10:15:00Z"
        );
        assert_eq!(
            format_expiry(expiry(now, at("2026-11-24T10:05:00Z"))),
            "2026-11-24T10:05:00Z"
        );
        assert_eq!(
            parse_expiry("2026-11-24T10:15:00Z").unwrap(),
            at("2026-11-24T10:15:00Z")
        );
        assert!(
            parse_expiry("tomorrow")
                .unwrap_err()
                .contains("is not an RFC 3339 time")
        );
    }

    #[test]
    fn only_a_runs_resource_with_a_past_expiry_is_expired() {
        let now = at("2026-11-24T10:00:00Z");
        let tags = |expires: &'static str| {
            vec![
                (RUN, "r1"),
                (OWNER, "arn:aws:iam::1:user/a"),
                (EXPIRES_AT, expires),
                ("Name", "x"),
            ]
        };
        let past = Ownership::from_tags(tags("2026-11-24T09:59:59Z")).unwrap();
        assert_eq!(past.run, "r1");
        assert_eq!(past.owner.as_deref(), Some("arn:aws:iam::1:user/a"));
        assert!(past.expired(now));
        assert!(
            !Ownership::from_tags(tags("2026-11-24T10:00:01Z"))
                .unwrap()
                .expired(now)
        );
        let garbled = Ownership::from_tags(tags("soon")).unwrap();
        assert!(
            !garbled.expired(now),
            "an unreadable expiry is never taken as expired"
        );
        let untagged = Ownership::from_tags([(RUN, "r2")]).unwrap();
        assert_eq!(untagged.expires_at, Err(format!("no {EXPIRES_AT} tag")));
        assert!(Ownership::from_tags([("Name", "someone else's")]).is_none());
    }
}
