//! The CPU-model policies, as pure decisions over what came up (CONTEXT.md §1: one instance
//! type ships with several CPU models, ~6% apart).
//!
//! - `select` launches more than asked and keeps the first instances whose model matches. How
//!   many more: nothing says in advance which share of a type's launches a model gets (it
//!   differs by region, AZ and week), so the first batch is half again as many as asked
//!   ([`first_batch`]): what the wanted model needs, on average, when it comes up in two
//!   launches of three. A shortfall is made up by a next batch sized from the share actually
//!   seen ([`next_batch`]); the launches stop at [`MAX_BATCHES`].
//! - `reroll` stops and starts a non-matching instance: it may land on another host with
//!   another CPU. Bounded by `--max-rerolls` per instance.
//! - `stratify` keeps equally many hosts of each model that came up, so the per-model report
//!   has the same number of hosts behind each row.

/// Launch batches `select` and `stratify` make at most.
pub const MAX_BATCHES: u32 = 3;

/// Whether a CPU model name matches `--cpu-model` (case-insensitive substring: "8275CL" matches
/// "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz").
pub fn matches(model: &str, pattern: &str) -> bool {
    model.to_lowercase().contains(&pattern.to_lowercase())
}

/// The first batch of `select` and `stratify` for `want` hosts: half again as many.
pub fn first_batch(want: u32) -> u32 {
    want + want.div_ceil(2)
}

/// The next batch when `have` of `want` matched after `tried` launches: the missing ones
/// divided by the share seen, plus a fifth for luck; twice the missing when none matched yet.
pub fn next_batch(want: u32, have: u32, tried: u32) -> u32 {
    let missing = want.saturating_sub(have);
    if missing == 0 {
        return 0;
    }
    if have == 0 || tried == 0 {
        return missing * 2;
    }
    let share = f64::from(have) / f64::from(tried);
    ((f64::from(missing) / share) * 1.2).ceil() as u32
}

/// `select`: of the candidates (in launch order, each with its model), the first `want` that
/// match are kept; returns (kept, rejected) indexes.
pub fn select(models: &[String], pattern: &str, want: usize) -> (Vec<usize>, Vec<usize>) {
    let mut kept = Vec::new();
    let mut rejected = Vec::new();
    for (i, model) in models.iter().enumerate() {
        if kept.len() < want && matches(model, pattern) {
            kept.push(i);
        } else {
            rejected.push(i);
        }
    }
    (kept, rejected)
}

/// `stratify`: `want` hosts spread as evenly as the models allow, taking one of each model in
/// turn (models in order of first appearance, hosts in launch order); returns (kept, rejected).
pub fn stratify(models: &[String], want: usize) -> (Vec<usize>, Vec<usize>) {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, model) in models.iter().enumerate() {
        match groups.iter_mut().find(|(m, _)| *m == model) {
            Some((_, members)) => members.push(i),
            None => groups.push((model, vec![i])),
        }
    }
    let mut kept = Vec::new();
    let mut depth = 0;
    while kept.len() < want && groups.iter().any(|(_, members)| members.len() > depth) {
        for (_, members) in &groups {
            if kept.len() < want
                && let Some(&i) = members.get(depth)
            {
                kept.push(i);
            }
        }
        depth += 1;
    }
    kept.sort_unstable();
    let rejected = (0..models.len()).filter(|i| !kept.contains(i)).collect();
    (kept, rejected)
}

/// The models that came up and how many of each, in order of first appearance.
pub fn census(models: &[String]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for model in models {
        match out.iter_mut().find(|(m, _)| m == model) {
            Some((_, n)) => *n += 1,
            None => out.push((model.clone(), 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn select_keeps_the_first_matching_and_rejects_the_rest() {
        let m = models(&["Xeon 8124M", "Xeon 8275CL", "Xeon 8275CL", "Xeon 8275CL"]);
        assert_eq!(select(&m, "8275cl", 2), (vec![1, 2], vec![0, 3]));
        assert_eq!(select(&m, "EPYC", 2), (vec![], vec![0, 1, 2, 3]));
        assert!(matches(
            "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz",
            "8275CL"
        ));
    }

    #[test]
    fn batches_grow_with_what_the_first_one_showed() {
        assert_eq!(first_batch(20), 30);
        assert_eq!(first_batch(1), 2);
        assert_eq!(first_batch(2), 3);
        // 12 of 30 matched (40%): 8 missing / 0.4 * 1.2 = 24.
        assert_eq!(next_batch(20, 12, 30), 24);
        assert_eq!(next_batch(20, 0, 30), 40);
        assert_eq!(next_batch(20, 20, 30), 0);
    }

    #[test]
    fn stratify_balances_across_the_models_that_came_up() {
        let m = models(&["A", "A", "A", "B", "A", "B"]);
        assert_eq!(stratify(&m, 4), (vec![0, 1, 3, 5], vec![2, 4]));
        // One model short: the other fills the rest.
        assert_eq!(stratify(&m, 5), (vec![0, 1, 2, 3, 5], vec![4]));
        assert_eq!(census(&m), vec![("A".to_string(), 4), ("B".to_string(), 2)]);
    }
}
