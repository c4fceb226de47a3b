//! The exec probe's metrics in each mode, in the order its workloads record them. The indices
//! are positions in these arrays: one command records 0 and 1 (and 2 when counting
//! instructions); pairs and duets record A at 0 and 1, B at 2 and 3, the per-pair B/A ratios
//! at 4 and 5, the same ratios split by which command had the first turn at 6 to 9, and,
//! counting instructions, A's, B's and their ratio at 10, 11 and 12.

use quietbench_vocab::metrics;

use crate::MetricSet;

const WALL: MetricSet = MetricSet {
    rate_metric: metrics::INVOCATIONS_PER_SEC,
    rate_unit: "invocations/s",
    latency_metric: metrics::WALL_TIME,
    latency_unit: "ns",
    throughput: None,
};
const CPU: MetricSet = MetricSet {
    rate_metric: metrics::INVOCATIONS_PER_CPU_SEC,
    rate_unit: "invocations/CPU-s",
    latency_metric: metrics::CPU_TIME,
    latency_unit: "ns",
    throughput: None,
};
const INSTRUCTIONS: MetricSet = ratio_less(metrics::INSTRUCTIONS, "instructions");
const B_WALL: MetricSet = MetricSet {
    rate_metric: metrics::B_INVOCATIONS_PER_SEC,
    rate_unit: "invocations/s",
    latency_metric: metrics::B_WALL_TIME,
    latency_unit: "ns",
    throughput: None,
};
const B_CPU: MetricSet = MetricSet {
    rate_metric: metrics::B_INVOCATIONS_PER_CPU_SEC,
    rate_unit: "invocations/CPU-s",
    latency_metric: metrics::B_CPU_TIME,
    latency_unit: "ns",
    throughput: None,
};
const B_INSTRUCTIONS: MetricSet = ratio_less(metrics::B_INSTRUCTIONS, "instructions");
const WALL_RATIO: MetricSet = ratio_less(metrics::B_OVER_A_WALL_PPM, "ppm");
const CPU_RATIO: MetricSet = ratio_less(metrics::B_OVER_A_CPU_PPM, "ppm");
const INSTRUCTIONS_RATIO: MetricSet = ratio_less(metrics::B_OVER_A_INSTRUCTIONS_PPM, "ppm");
const WALL_RATIO_A_FIRST: MetricSet = ratio_less(metrics::B_OVER_A_WALL_PPM_A_FIRST, "ppm");
const WALL_RATIO_B_FIRST: MetricSet = ratio_less(metrics::B_OVER_A_WALL_PPM_B_FIRST, "ppm");
const CPU_RATIO_A_FIRST: MetricSet = ratio_less(metrics::B_OVER_A_CPU_PPM_A_FIRST, "ppm");
const CPU_RATIO_B_FIRST: MetricSet = ratio_less(metrics::B_OVER_A_CPU_PPM_B_FIRST, "ppm");

/// A distribution with no rate (counts and ratios are not "per second" of anything).
const fn ratio_less(latency_metric: &'static str, latency_unit: &'static str) -> MetricSet {
    MetricSet {
        rate_metric: "",
        rate_unit: "",
        latency_metric,
        latency_unit,
        throughput: None,
    }
}

/// One command: wall time per invocation (rate: invocations per second of wall time) and CPU
/// time per invocation (rate: invocations per CPU-second, the steal-resistant figure: CPU time
/// does not advance while a hypervisor runs someone else).
pub const METRIC_SETS: &[MetricSet] = &[WALL, CPU];
/// One command, counting its retired user-mode instructions too.
pub const COUNTED_METRIC_SETS: &[MetricSet] = &[WALL, CPU, INSTRUCTIONS];
/// Pairs and duets (`cmd_b` given): A's times, B's times and each pair's B/A ratios of wall
/// and CPU times (parts per million, so 1,030,000 is B taking 3% longer), then the same ratios
/// split by turn: the pairs where A went first (in a duet: ran on the pair's first CPU) and
/// those where B did. A turn can favour whoever has it (a warmer cache for the second command,
/// a faster CPU in a duet); the median of all ratios then lands in one turn's cluster whenever
/// the turns' counts differ by one, which a trial's end makes common, and the verdict reads
/// that advantage as a difference. The verdict takes each turn's median and weighs them alike.
/// Ratios have no rate.
pub const PAIRED_METRIC_SETS: &[MetricSet] = &[
    WALL,
    CPU,
    B_WALL,
    B_CPU,
    WALL_RATIO,
    CPU_RATIO,
    WALL_RATIO_A_FIRST,
    WALL_RATIO_B_FIRST,
    CPU_RATIO_A_FIRST,
    CPU_RATIO_B_FIRST,
];
/// Pairs and duets counting instructions: the paired sets, then A's and B's instructions and
/// their per-pair ratio.
pub const PAIRED_COUNTED_METRIC_SETS: &[MetricSet] = &[
    WALL,
    CPU,
    B_WALL,
    B_CPU,
    WALL_RATIO,
    CPU_RATIO,
    WALL_RATIO_A_FIRST,
    WALL_RATIO_B_FIRST,
    CPU_RATIO_A_FIRST,
    CPU_RATIO_B_FIRST,
    INSTRUCTIONS,
    B_INSTRUCTIONS,
    INSTRUCTIONS_RATIO,
];

/// Where one side's figures go: (wall, CPU, instructions) indices.
pub(super) const fn side_indices(b: bool) -> (usize, usize, usize) {
    if b { (2, 3, 11) } else { (0, 1, 10) }
}
/// Where a pair's ratios go: (wall, CPU, instructions) indices.
pub(super) const RATIO_INDICES: (usize, usize, usize) = (4, 5, 12);
/// Where a pair's ratios go again by turn: (wall, CPU) indices when A had the first turn, or
/// when B had it.
pub(super) const fn turn_ratio_indices(a_first: bool) -> (usize, usize) {
    if a_first { (6, 8) } else { (7, 9) }
}
/// Where a single command's instructions go.
pub(super) const SINGLE_INSTRUCTIONS: usize = 2;

/// The sets of a mode.
pub(super) fn for_mode(paired: bool, counted: bool) -> &'static [MetricSet] {
    match (paired, counted) {
        (false, false) => METRIC_SETS,
        (false, true) => COUNTED_METRIC_SETS,
        (true, false) => PAIRED_METRIC_SETS,
        (true, true) => PAIRED_COUNTED_METRIC_SETS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_name_the_metrics_they_record() {
        let sets = PAIRED_COUNTED_METRIC_SETS;
        let name = |i: usize| sets[i].latency_metric;
        let (w, c, n) = side_indices(false);
        assert_eq!(
            [name(w), name(c), name(n)],
            ["wall_time", "cpu_time", "instructions"]
        );
        let (w, c, n) = side_indices(true);
        assert_eq!(
            [name(w), name(c), name(n)],
            ["b_wall_time", "b_cpu_time", "b_instructions"]
        );
        let (w, c, n) = RATIO_INDICES;
        assert_eq!(
            [name(w), name(c), name(n)],
            [
                "b_over_a_wall_ppm",
                "b_over_a_cpu_ppm",
                "b_over_a_instructions_ppm"
            ]
        );
        assert_eq!(
            COUNTED_METRIC_SETS[SINGLE_INSTRUCTIONS].latency_metric,
            "instructions"
        );
        // Without counting, the paired sets are the counted ones' prefix: a ratio index never
        // moves with the mode.
        assert_eq!(PAIRED_METRIC_SETS, &PAIRED_COUNTED_METRIC_SETS[..10]);
        let (w, c) = turn_ratio_indices(true);
        assert_eq!(
            [name(w), name(c)],
            ["b_over_a_wall_ppm_a_first", "b_over_a_cpu_ppm_a_first"]
        );
        let (w, c) = turn_ratio_indices(false);
        assert_eq!(
            [name(w), name(c)],
            ["b_over_a_wall_ppm_b_first", "b_over_a_cpu_ppm_b_first"]
        );
    }
}
