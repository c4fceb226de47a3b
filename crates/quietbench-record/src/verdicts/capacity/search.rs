//! The search for the highest offered rate a server sustains under its guards: doubling from a
//! start until a rate fails (or halving until one holds), then bisecting the bracket on a
//! log scale until its ends are within the resolution, then a longer confirming step at the
//! rate found (mutilate's `--search`, Nighthawk's adaptive controller). A confirmation that
//! fails makes that rate the bracket's top and the search goes on below it, so the rate
//! reported is one that held twice. Pure: the caller measures each step and records it.

/// How a search runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchConfig {
    /// The first rate offered, requests/s.
    pub start: u64,
    /// The lowest rate worth offering: a server that fails here has no capacity to report.
    pub min: u64,
    /// The highest rate offered.
    pub max: u64,
    /// The search ends when the lowest failing rate is within this fraction of the highest
    /// holding one (0.05: 5%).
    pub resolution: f64,
    /// The most steps, confirmations included: a search on a host too noisy to settle ends
    /// here with its bracket, said to be unsettled.
    pub max_steps: usize,
}

impl SearchConfig {
    /// Why these settings cannot search, or `None`.
    pub fn refusal(&self) -> Option<String> {
        if self.min == 0 || self.min > self.start || self.start > self.max {
            return Some(format!(
                "the search's rates must satisfy 1 <= min ({}) <= start ({}) <= max ({})",
                self.min, self.start, self.max
            ));
        }
        if !(self.resolution >= 0.001 && self.resolution <= 1.0) {
            return Some(format!(
                "the resolution {} must be from 0.1% to 100%",
                self.resolution * 100.0
            ));
        }
        if self.max_steps < 2 {
            return Some("a search needs at least 2 steps".into());
        }
        None
    }
}

/// What the search wants measured next, or its end.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Offer this rate; `confirm`: the confirming step at the rate found.
    Measure { rate: u64, confirm: bool },
    /// The search is over.
    Done(Capacity),
}

/// A build's capacity: the bracket the search ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// The highest rate that held, confirmed; `None` when not even the lowest rate held, or
    /// the steps ran out before its confirming step held.
    pub rate: Option<u64>,
    /// The highest rate that held once, when the steps ran out before it was confirmed.
    pub unconfirmed: Option<u64>,
    /// The lowest rate that broke a guard; `None` when none did up to the highest rate.
    pub failed_at: Option<u64>,
    /// Why it broke.
    pub why_failed: Option<String>,
    /// The bracket is within the resolution, or the search reached a bound (min or max);
    /// false when the steps ran out first.
    pub settled: bool,
    /// Steps measured.
    pub steps: usize,
}

impl Capacity {
    /// The bracket as people read it: "1,800 to 1,900 requests/s".
    pub fn describe(&self) -> String {
        let settled = if self.settled {
            ""
        } else {
            " (unsettled: the steps ran out before the bracket closed)"
        };
        if let (None, Some(held)) = (self.rate, self.unconfirmed) {
            let above = self
                .failed_at
                .map(|f| format!("; {} did not", thousands(f)))
                .unwrap_or_default();
            return format!(
                "{} requests/s held once but was not confirmed{above}{settled}",
                thousands(held)
            );
        }
        match (self.rate, self.failed_at) {
            (Some(rate), Some(failed)) => format!(
                "{} requests/s (held; {} did not){settled}",
                thousands(rate),
                thousands(failed)
            ),
            (Some(rate), None) => format!(
                "at least {} requests/s (the highest rate offered held){settled}",
                thousands(rate)
            ),
            (None, Some(failed)) => format!(
                "under {} requests/s (the lowest rate offered did not hold){settled}",
                thousands(failed)
            ),
            (None, None) => format!("not found{settled}"),
        }
    }
}

/// A whole number with thousands separators: 12,500.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One build's search.
#[derive(Debug, Clone)]
pub struct Search {
    config: SearchConfig,
    /// The highest rate that held and was not refuted by a failed confirmation.
    lo: Option<u64>,
    /// The lowest rate that failed.
    hi: Option<u64>,
    why_failed: Option<String>,
    /// Every rate that held.
    held: Vec<u64>,
    /// `lo` held its confirming step.
    confirmed: bool,
    steps: usize,
}

impl Search {
    /// A search with `config` (checked with [`SearchConfig::refusal`] first).
    pub fn new(config: SearchConfig) -> Self {
        Self {
            config,
            lo: None,
            hi: None,
            why_failed: None,
            held: Vec::new(),
            confirmed: false,
            steps: 0,
        }
    }

    fn done(&self, settled: bool) -> Next {
        Next::Done(Capacity {
            rate: self.lo.filter(|_| self.confirmed),
            unconfirmed: self.lo.filter(|_| !self.confirmed),
            failed_at: self.hi,
            why_failed: self.why_failed.clone(),
            settled,
            steps: self.steps,
        })
    }

    /// The bracket is as narrow as it gets: confirm its bottom, or end.
    fn closing(&self) -> Next {
        match self.lo {
            Some(rate) if !self.confirmed => Next::Measure {
                rate,
                confirm: true,
            },
            _ => self.done(true),
        }
    }

    /// What to measure next.
    pub fn next(&self) -> Next {
        if self.steps >= self.config.max_steps {
            return self.done(false);
        }
        let c = &self.config;
        match (self.lo, self.hi) {
            (None, None) => Next::Measure {
                rate: c.start,
                confirm: false,
            },
            (Some(lo), None) if lo >= c.max => self.closing(),
            (Some(lo), None) => Next::Measure {
                rate: lo.saturating_mul(2).min(c.max),
                confirm: false,
            },
            (None, Some(hi)) if hi <= c.min => self.done(true),
            (None, Some(hi)) => Next::Measure {
                rate: (hi / 2).max(c.min),
                confirm: false,
            },
            (Some(lo), Some(hi)) => {
                if hi as f64 <= lo as f64 * (1.0 + c.resolution) {
                    return self.closing();
                }
                let rate = ((lo as f64) * (hi as f64)).sqrt().round() as u64;
                if rate <= lo || rate >= hi {
                    return self.closing();
                }
                Next::Measure {
                    rate,
                    confirm: false,
                }
            }
        }
    }

    /// Records a measured step: `Ok` when `rate` held every guard, else why not.
    pub fn record(&mut self, rate: u64, confirm: bool, outcome: Result<(), String>) {
        self.steps += 1;
        match outcome {
            Ok(()) if confirm => self.confirmed = true,
            Ok(()) => {
                self.held.push(rate);
                if self.lo.is_none_or(|lo| rate > lo) {
                    self.lo = Some(rate);
                    self.confirmed = false;
                }
            }
            Err(why) => {
                if self.hi.is_none_or(|hi| rate <= hi) {
                    self.hi = Some(rate);
                    self.why_failed = Some(why);
                }
                // What held once and failed since is refuted: the bracket's bottom is the
                // highest rate that held below the new top.
                self.held.retain(|&r| r < rate);
                self.lo = self.held.iter().copied().max();
                self.confirmed = false;
            }
        }
    }
}

/// How two builds' capacities compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityCall {
    /// B's bracket lies wholly below A's: B broke a guard at a rate A held.
    BLower,
    /// B's lies wholly above.
    BHigher,
    /// The brackets overlap: no difference this resolution can see.
    NotApart,
}

/// B's capacity against A's, with the range of B/A the brackets allow, as a sentence.
pub fn compare(a: &Capacity, b: &Capacity) -> (CapacityCall, String) {
    let below = |x: &Capacity, y: &Capacity| match (x.failed_at, y.rate) {
        (Some(failed), Some(held)) => failed <= held,
        (Some(_), None) | (None, _) => false,
    };
    let call = if below(b, a) {
        CapacityCall::BLower
    } else if below(a, b) {
        CapacityCall::BHigher
    } else {
        CapacityCall::NotApart
    };
    // B/A: the rates that held, and the range the brackets allow (a top that never failed is
    // unknown, so its side of the range is open).
    let range = match (a.rate, b.rate) {
        (Some(ra), Some(rb)) => {
            let low = a.failed_at.map(|fa| rb as f64 / fa as f64);
            let high = b.failed_at.map(|fb| fb as f64 / ra as f64);
            let side = |v: Option<f64>| v.map_or("?".to_string(), |v| format!("{v:.3}"));
            format!(
                "B/A {:.3} (the brackets allow {} to {})",
                rb as f64 / ra as f64,
                side(low),
                side(high)
            )
        }
        _ => "B/A unknown: a build held no rate".to_string(),
    };
    let sentence = match call {
        CapacityCall::BLower => format!("B has less capacity than A: {range}"),
        CapacityCall::BHigher => format!("B has more capacity than A: {range}"),
        CapacityCall::NotApart => format!(
            "no difference in capacity at this resolution: {range}; a difference smaller than \
             a step of the search cannot be seen"
        ),
    };
    (call, sentence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SearchConfig {
        SearchConfig {
            start: 100,
            min: 10,
            max: 100_000,
            resolution: 0.05,
            max_steps: 40,
        }
    }

    /// Runs a search against a server that holds every rate up to `capacity`, or against
    /// `holds` for noisier truths. Returns the end and the rates measured.
    fn search_with(
        config: SearchConfig,
        holds: &mut dyn FnMut(u64, bool) -> bool,
    ) -> (Capacity, Vec<(u64, bool)>) {
        let mut search = Search::new(config);
        let mut measured = Vec::new();
        loop {
            match search.next() {
                Next::Measure { rate, confirm } => {
                    measured.push((rate, confirm));
                    let outcome = if holds(rate, confirm) {
                        Ok(())
                    } else {
                        Err(format!("p99 over the SLO at {rate}"))
                    };
                    search.record(rate, confirm, outcome);
                }
                Next::Done(capacity) => return (capacity, measured),
            }
            assert!(
                measured.len() <= 100,
                "the search does not end: {measured:?}"
            );
        }
    }

    #[test]
    fn a_known_capacity_is_found_within_the_resolution_and_confirmed() {
        for truth in [10, 57, 100, 999, 1_850, 2_000, 33_333, 99_999] {
            let (cap, measured) = search_with(config(), &mut |rate, _| rate <= truth);
            let rate = cap.rate.unwrap_or_else(|| panic!("{truth}: {cap:?}"));
            assert!(rate <= truth, "{truth}: reported {rate}");
            let failed = cap.failed_at.expect("something failed");
            assert!(failed > truth, "{truth}: failed at {failed}");
            assert!(
                failed as f64 <= rate as f64 * 1.05 || failed - rate <= 1,
                "{truth}: bracket {rate}..{failed} wider than 5%"
            );
            assert!(cap.settled);
            // The rate reported was measured twice: once searching, once confirming.
            assert!(measured.contains(&(rate, false)) && measured.contains(&(rate, true)));
            assert_eq!(measured.last(), Some(&(rate, true)), "{truth}");
            assert!(cap.steps <= 25, "{truth}: {} steps", cap.steps);
        }
    }

    #[test]
    fn bounds_end_the_search_honestly() {
        // Holds everything: capacity at least the highest rate, nothing failed.
        let (cap, _) = search_with(config(), &mut |_, _| true);
        assert_eq!((cap.rate, cap.failed_at), (Some(100_000), None));
        assert!(cap.describe().starts_with("at least 100,000 requests/s"));
        // Holds nothing: no capacity, the lowest failing rate is the minimum.
        let (cap, measured) = search_with(config(), &mut |_, _| false);
        assert_eq!((cap.rate, cap.failed_at), (None, Some(10)));
        assert!(cap.describe().starts_with("under 10 requests/s"));
        assert!(measured.iter().all(|(_, confirm)| !confirm));
    }

    #[test]
    fn a_failed_confirmation_moves_the_bracket_down() {
        // The server holds 1,000 and below; 1,000 to 1,100 hold when searched but fail the
        // longer confirmation, as a server whose queue grows slowly would.
        let (cap, measured) = search_with(config(), &mut |rate, confirm| {
            rate <= 1_000 || (!confirm && rate <= 1_100)
        });
        let rate = cap.rate.unwrap();
        assert!(
            rate <= 1_000 && rate as f64 >= 1_000.0 / 1.05 / 1.05,
            "{cap:?}"
        );
        assert!(cap.failed_at.unwrap() > rate);
        assert!(
            measured.iter().filter(|(_, c)| *c).count() >= 2,
            "{measured:?}"
        );
    }

    #[test]
    fn a_search_that_cannot_settle_ends_at_its_step_limit() {
        let mut flip = false;
        let config = SearchConfig {
            max_steps: 6,
            ..config()
        };
        let (cap, measured) = search_with(config, &mut |_, _| {
            flip = !flip;
            flip
        });
        assert_eq!(measured.len(), 6);
        assert!(!cap.settled);
        assert!(cap.describe().contains("unsettled"));
    }

    #[test]
    fn a_rate_that_held_once_is_said_when_the_steps_ran_out_before_its_confirmation() {
        // Capacity 900 from a start of 200: 200, 400, 800 hold, 1600 fails, and the bisection's
        // steps run out before 800 is confirmed. The lowest rate did hold: say what did.
        let config = SearchConfig {
            start: 200,
            max_steps: 6,
            ..config()
        };
        let (cap, measured) = search_with(config, &mut |rate, _| rate <= 900);
        assert_eq!(measured.len(), 6);
        assert_eq!((cap.rate, cap.unconfirmed), (None, Some(800)));
        let text = cap.describe();
        assert!(
            text.starts_with("800 requests/s held once but was not confirmed; 951 did not"),
            "{text}"
        );
        assert!(!text.contains("lowest rate offered did not hold"), "{text}");
    }

    #[test]
    fn capacities_compare_only_when_their_brackets_part() {
        let cap = |rate, failed| Capacity {
            rate,
            unconfirmed: None,
            failed_at: failed,
            why_failed: None,
            settled: true,
            steps: 8,
        };
        let a = cap(Some(2_000), Some(2_090));
        let (call, sentence) = compare(&a, &cap(Some(1_800), Some(1_880)));
        assert_eq!(call, CapacityCall::BLower);
        assert!(sentence.contains("B/A 0.900"), "{sentence}");
        assert!(sentence.contains("0.861 to 0.940"), "{sentence}");
        assert_eq!(
            compare(&a, &cap(Some(2_150), Some(2_250))).0,
            CapacityCall::BHigher
        );
        let (call, sentence) = compare(&a, &cap(Some(2_040), Some(2_130)));
        assert_eq!(call, CapacityCall::NotApart);
        assert!(sentence.contains("cannot be seen"), "{sentence}");
        // A top that never failed leaves its side open.
        let (call, sentence) = compare(&cap(Some(100_000), None), &cap(Some(100_000), None));
        assert_eq!(call, CapacityCall::NotApart);
        assert!(sentence.contains("? to ?"), "{sentence}");
        let (_, sentence) = compare(&a, &cap(None, Some(10)));
        assert!(sentence.contains("unknown"), "{sentence}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = [
            SearchConfig { min: 0, ..config() },
            SearchConfig {
                start: 5,
                ..config()
            },
            SearchConfig {
                max: 50,
                ..config()
            },
            SearchConfig {
                resolution: 0.0,
                ..config()
            },
            SearchConfig {
                resolution: f64::NAN,
                ..config()
            },
            SearchConfig {
                max_steps: 1,
                ..config()
            },
        ];
        for c in bad {
            assert!(c.refusal().is_some(), "{c:?}");
        }
        assert_eq!(config().refusal(), None);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
