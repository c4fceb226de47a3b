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
/// Disk probes: the share of the I/O buffers backed by huge pages, in percent.
pub const IO_BUFFERS_HUGE_PAGES: &str = "io_buffers_huge_pages";
