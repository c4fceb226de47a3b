//! The checks every agent makes of a `RunProbeRequest`'s timing and names before anything runs,
//! written once: the real agent and the test kit's fake agent refuse the same requests with the
//! same words, so a test on the fake cannot pass with a request the real agent would refuse.

use std::time::Duration;

/// The shortest reporting interval: below it, per-interval encoding would cost real CPU.
pub const MIN_INTERVAL_MS: u64 = 10;
/// The reporting interval when the request leaves it at 0.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;
/// The longest trial an agent accepts unless told otherwise (an hour).
pub const DEFAULT_MAX_DURATION_MS: u64 = 3_600_000;
/// The longest probe name.
pub const MAX_PROBE_BYTES: usize = 64;
/// The longest trial id.
pub const MAX_TRIAL_ID_BYTES: usize = 128;

/// A trial's measuring time and reporting interval, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialTiming {
    /// How long the trial measures.
    pub duration: Duration,
    /// How often it reports.
    pub interval: Duration,
}

/// Checks a request's probe name and trial id, and its timing against `max_duration_ms` (the
/// agent's `--max-trial-secs`): the reason of the first broken rule, in the wire's field names.
pub fn check(
    probe: &str,
    trial_id: &str,
    duration_ms: u64,
    interval_ms: u64,
    max_duration_ms: u64,
) -> Result<TrialTiming, String> {
    if probe.is_empty() {
        return Err("no probe named: give one, e.g. cpu.primes".into());
    }
    if probe.len() > MAX_PROBE_BYTES {
        return Err(format!(
            "probe: {} bytes, at most {MAX_PROBE_BYTES}",
            probe.len()
        ));
    }
    if trial_id.len() > MAX_TRIAL_ID_BYTES {
        return Err(format!(
            "trial_id is longer than {MAX_TRIAL_ID_BYTES} bytes"
        ));
    }
    if duration_ms == 0 || duration_ms > max_duration_ms {
        return Err(format!(
            "duration_ms {duration_ms} is out of range: give 1 to {max_duration_ms} (this agent's \
             --max-trial-secs {}; one hour unless set)",
            max_duration_ms / 1000
        ));
    }
    let interval_ms = if interval_ms == 0 {
        DEFAULT_INTERVAL_MS.min(duration_ms)
    } else {
        interval_ms
    };
    if interval_ms < MIN_INTERVAL_MS {
        return Err(format!(
            "interval_ms {interval_ms} is too short: give at least {MIN_INTERVAL_MS}"
        ));
    }
    if interval_ms > duration_ms {
        return Err(format!(
            "interval_ms {interval_ms} is longer than the trial's duration_ms {duration_ms}: give \
             at most the duration (one interval for the whole trial)"
        ));
    }
    Ok(TrialTiming {
        duration: Duration::from_millis(duration_ms),
        interval: Duration::from_millis(interval_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_is_checked_and_an_unset_interval_is_a_second_or_the_whole_trial() {
        let ok = check("cpu.primes", "", 3000, 0, DEFAULT_MAX_DURATION_MS).unwrap();
        assert_eq!(ok.interval, Duration::from_secs(1));
        let short = check("cpu.primes", "", 200, 0, DEFAULT_MAX_DURATION_MS).unwrap();
        assert_eq!(short.interval, Duration::from_millis(200));
        for (duration, interval, max, reason) in [
            (0, 0, 1000, "out of range"),
            (2000, 0, 1000, "--max-trial-secs 1"),
            (1000, 5, 5000, "too short"),
            (1000, 2000, 5000, "longer than the trial"),
        ] {
            let err = check("cpu.primes", "", duration, interval, max).unwrap_err();
            assert!(err.contains(reason), "{err}");
        }
        assert!(
            check("", "", 1000, 0, 5000)
                .unwrap_err()
                .contains("no probe")
        );
        assert!(check(&"p".repeat(65), "", 1000, 0, 5000).is_err());
        assert!(check("p", &"t".repeat(129), 1000, 0, 5000).is_err());
    }
}
