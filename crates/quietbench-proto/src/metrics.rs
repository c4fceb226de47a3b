//! Metric names that both ends of the wire read: the agent's probes produce them, and the
//! controller looks them up by name (compare's verdicts, warnings). Kept here, in the wire
//! crate, so a rename is one edit and the two sides cannot drift apart. Names only the agent
//! uses stay with their probes.

/// `exec`: command A's invocations per second of wall time.
pub const INVOCATIONS_PER_SEC: &str = "invocations_per_sec";
/// `exec`: the wall time of each invocation of command A, a histogram in ns.
pub const WALL_TIME: &str = "wall_time";
/// `exec` paired mode: command B's invocations per second of wall time.
pub const B_INVOCATIONS_PER_SEC: &str = "b_invocations_per_sec";
/// `exec` paired mode: the wall time of each invocation of command B, a histogram in ns.
pub const B_WALL_TIME: &str = "b_wall_time";
/// `exec` paired mode: each pair's B/A wall-time ratio, a histogram in parts per million.
pub const B_OVER_A_WALL_PPM: &str = "b_over_a_wall_ppm";
/// `exec`: the CPU time (user + system, from wait4's rusage) of each invocation of command A,
/// a histogram in ns.
pub const CPU_TIME: &str = "cpu_time";
/// `exec` paired mode: the CPU time of each invocation of command B, a histogram in ns.
pub const B_CPU_TIME: &str = "b_cpu_time";
/// `exec` paired mode: each pair's B/A CPU-time ratio, a histogram in parts per million.
pub const B_OVER_A_CPU_PPM: &str = "b_over_a_cpu_ppm";
/// `exec` with `counters=instructions`: retired user-mode instructions of each invocation of
/// command A, a histogram.
pub const INSTRUCTIONS: &str = "instructions";
/// `exec` paired mode with `counters=instructions`: command B's instructions per invocation.
pub const B_INSTRUCTIONS: &str = "b_instructions";
/// `exec` paired mode with `counters=instructions`: each pair's B/A instructions ratio, ppm.
pub const B_OVER_A_INSTRUCTIONS_PPM: &str = "b_over_a_instructions_ppm";
/// Disk probes: the share of the I/O buffers backed by huge pages, in percent.
pub const IO_BUFFERS_HUGE_PAGES: &str = "io_buffers_huge_pages";
