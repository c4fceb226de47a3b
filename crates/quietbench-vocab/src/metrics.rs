//! Every metric a probe emits, by name, with its unit, its kind and the form it travels in.
//!
//! The agent's probes produce these names and the controller looks them up (compare's verdicts,
//! cap attribution (which cap binds), warnings, pre-warm progress), so both take them from here and a
//! rename is one edit. Each name is a `&str` constant, and the [`REGISTRY`] lists them all with
//! their units: one macro writes both, so a constant cannot exist without its registry entry.
//! quietbench-probe's tests check that every metric set and counter it defines names a
//! registered metric in the registered unit.
//!
//! The registry does not say whether higher is better: the controller decides that from the
//! unit (rates up, times and instruction counts down, anything else not judged), and a second
//! table here would be a second place for that rule to drift.

/// What a metric's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Events per unit of time: events/s, IOPS, invocations per CPU-second.
    Rate,
    /// Bytes per second: MB/s, GB/s, Gbit/s.
    Throughput,
    /// A duration: the time of each sample, or a mean time.
    Time,
    /// One quantity over another: B/A ratios in parts per million, fractions, percentages.
    Ratio,
    /// A number of things: instructions, segments, datagrams, regions, bytes.
    Count,
    /// 1 for yes and 0 for no; averaged over a trial's threads, the share that said yes.
    Flag,
}

/// How a metric travels in `quietbench.v1.Metric`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// A metric set's distribution of samples: a histogram, with its mean as the value, in every
    /// interval and in the trial's result.
    Histogram,
    /// A figure computed from a metric set's samples (its rate, its throughput): a value without
    /// a histogram, in every interval and in the trial's result.
    Value,
    /// A whole-trial figure a workload kept itself: a value in the trial's result only.
    Counter,
}

/// One registered metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Metric {
    /// The name on the wire, e.g. "events_per_sec".
    pub name: &'static str,
    /// The unit of its values (and of its histogram's), e.g. "events/s", "ns".
    pub unit: &'static str,
    /// What its values are.
    pub kind: Kind,
    /// How it travels.
    pub form: Form,
}

/// The registered metric of this name.
pub fn lookup(name: &str) -> Option<&'static Metric> {
    REGISTRY.iter().find(|m| m.name == name)
}

/// The name server (or command) B's copy of metric `name` has in a duet, `b_` before it, when
/// one is registered: one rule for the probe that writes B's figures and the controller that
/// accounts B's server.
pub fn duet_b(name: &str) -> Option<&'static str> {
    REGISTRY
        .iter()
        .find(|m| m.name.strip_prefix("b_") == Some(name))
        .map(|m| m.name)
}

/// Writes one `pub const NAME: &str` per entry and the [`REGISTRY`] of them all, from one list:
/// a constant that is not in the registry, or an entry without a constant, cannot be written.
macro_rules! registry {
    ($($(#[$doc:meta])* $constant:ident = $name:literal, $unit:literal, $kind:ident, $form:ident;)*) => {
        $(
            $(#[$doc])*
            pub const $constant: &str = $name;
        )*

        /// Every metric a probe emits, in the order of the list above.
        pub const REGISTRY: &[Metric] = &[$(Metric {
            name: $constant,
            unit: $unit,
            kind: Kind::$kind,
            form: Form::$form,
        }),*];
    };
}

registry! {
    // The single metric set of most probes (cpu.primes, and the default of a workload).
    /// cpu.primes and most probes: events per second.
    EVENTS_PER_SEC = "events_per_sec", "events/s", Rate, Value;
    /// cpu.primes and most probes: each event's latency, a histogram in ns.
    EVENT_LATENCY = "event_latency", "ns", Time, Histogram;

    // exec.
    /// `exec`: command A's invocations per second of wall time.
    INVOCATIONS_PER_SEC = "invocations_per_sec", "invocations/s", Rate, Value;
    /// `exec`: the wall time of each invocation of command A, a histogram in ns.
    WALL_TIME = "wall_time", "ns", Time, Histogram;
    /// `exec`: command A's invocations per second of CPU time, the steal-resistant rate.
    INVOCATIONS_PER_CPU_SEC = "invocations_per_cpu_sec", "invocations/CPU-s", Rate, Value;
    /// `exec`: the CPU time (user + system, from wait4's rusage) of each invocation of command A,
    /// a histogram in ns.
    CPU_TIME = "cpu_time", "ns", Time, Histogram;
    /// `exec` with `counters=instructions`: retired user-mode instructions of each invocation of
    /// command A, a histogram.
    INSTRUCTIONS = "instructions", "instructions", Count, Histogram;
    /// `exec` paired mode: command B's invocations per second of wall time.
    B_INVOCATIONS_PER_SEC = "b_invocations_per_sec", "invocations/s", Rate, Value;
    /// `exec` paired mode: the wall time of each invocation of command B, a histogram in ns.
    B_WALL_TIME = "b_wall_time", "ns", Time, Histogram;
    /// `exec` paired mode: command B's invocations per second of CPU time.
    B_INVOCATIONS_PER_CPU_SEC = "b_invocations_per_cpu_sec", "invocations/CPU-s", Rate, Value;
    /// `exec` paired mode: the CPU time of each invocation of command B, a histogram in ns.
    B_CPU_TIME = "b_cpu_time", "ns", Time, Histogram;
    /// `exec` paired mode with `counters=instructions`: command B's instructions per invocation.
    B_INSTRUCTIONS = "b_instructions", "instructions", Count, Histogram;
    /// `exec` paired mode: each pair's B/A wall-time ratio, a histogram in parts per million.
    B_OVER_A_WALL_PPM = "b_over_a_wall_ppm", "ppm", Ratio, Histogram;
    /// `exec` paired mode: each pair's B/A CPU-time ratio, a histogram in parts per million.
    B_OVER_A_CPU_PPM = "b_over_a_cpu_ppm", "ppm", Ratio, Histogram;
    /// `exec` paired mode with `counters=instructions`: each pair's B/A instructions ratio, ppm.
    B_OVER_A_INSTRUCTIONS_PPM = "b_over_a_instructions_ppm", "ppm", Ratio, Histogram;
    /// `exec` paired mode: the B/A wall-time ratios of the pairs where A had the first turn (ran
    /// first; in a duet, ran on the pair's first CPU), ppm. With [`B_OVER_A_WALL_PPM_B_FIRST`]
    /// the verdict weighs both turns alike, so a turn's own advantage cancels.
    B_OVER_A_WALL_PPM_A_FIRST = "b_over_a_wall_ppm_a_first", "ppm", Ratio, Histogram;
    /// `exec` paired mode: the B/A wall-time ratios of the pairs where B had the first turn, ppm.
    B_OVER_A_WALL_PPM_B_FIRST = "b_over_a_wall_ppm_b_first", "ppm", Ratio, Histogram;
    /// `exec` paired mode: the B/A CPU-time ratios of the pairs where A had the first turn, ppm.
    B_OVER_A_CPU_PPM_A_FIRST = "b_over_a_cpu_ppm_a_first", "ppm", Ratio, Histogram;
    /// `exec` paired mode: the B/A CPU-time ratios of the pairs where B had the first turn, ppm.
    B_OVER_A_CPU_PPM_B_FIRST = "b_over_a_cpu_ppm_b_first", "ppm", Ratio, Histogram;

    // cpu.spawn: events alternate between ASLR on and off.
    /// `cpu.spawn`: fork+exec per second with ASLR on.
    SPAWNS_PER_SEC_ASLR_ON = "spawns_per_sec_aslr_on", "spawns/s", Rate, Value;
    /// `cpu.spawn`: each fork+exec's latency with ASLR on, a histogram in ns.
    SPAWN_LATENCY_ASLR_ON = "spawn_latency_aslr_on", "ns", Time, Histogram;
    /// `cpu.spawn`: fork+exec per second with ASLR off.
    SPAWNS_PER_SEC_ASLR_OFF = "spawns_per_sec_aslr_off", "spawns/s", Rate, Value;
    /// `cpu.spawn`: each fork+exec's latency with ASLR off, a histogram in ns.
    SPAWN_LATENCY_ASLR_OFF = "spawn_latency_aslr_off", "ns", Time, Histogram;

    // mem.latency: one metric set per working-set size, and the exact mean per load.
    /// `mem.latency`, 16 KiB working set: loads per second.
    LOADS_PER_SEC_16K = "loads_per_sec_16k", "loads/s", Rate, Value;
    /// `mem.latency`, 16 KiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_16K = "load_latency_16k", "ns", Time, Histogram;
    /// `mem.latency`, 16 KiB working set: the exact mean ns per load.
    LOAD_NS_16K = "load_ns_16k", "ns", Time, Counter;
    /// `mem.latency`, 128 KiB working set: loads per second.
    LOADS_PER_SEC_128K = "loads_per_sec_128k", "loads/s", Rate, Value;
    /// `mem.latency`, 128 KiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_128K = "load_latency_128k", "ns", Time, Histogram;
    /// `mem.latency`, 128 KiB working set: the exact mean ns per load.
    LOAD_NS_128K = "load_ns_128k", "ns", Time, Counter;
    /// `mem.latency`, 1 MiB working set: loads per second.
    LOADS_PER_SEC_1M = "loads_per_sec_1m", "loads/s", Rate, Value;
    /// `mem.latency`, 1 MiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_1M = "load_latency_1m", "ns", Time, Histogram;
    /// `mem.latency`, 1 MiB working set: the exact mean ns per load.
    LOAD_NS_1M = "load_ns_1m", "ns", Time, Counter;
    /// `mem.latency`, 8 MiB working set: loads per second.
    LOADS_PER_SEC_8M = "loads_per_sec_8m", "loads/s", Rate, Value;
    /// `mem.latency`, 8 MiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_8M = "load_latency_8m", "ns", Time, Histogram;
    /// `mem.latency`, 8 MiB working set: the exact mean ns per load.
    LOAD_NS_8M = "load_ns_8m", "ns", Time, Counter;
    /// `mem.latency`, 64 MiB working set: loads per second.
    LOADS_PER_SEC_64M = "loads_per_sec_64m", "loads/s", Rate, Value;
    /// `mem.latency`, 64 MiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_64M = "load_latency_64m", "ns", Time, Histogram;
    /// `mem.latency`, 64 MiB working set: the exact mean ns per load.
    LOAD_NS_64M = "load_ns_64m", "ns", Time, Counter;
    /// `mem.latency`, 256 MiB working set: loads per second.
    LOADS_PER_SEC_256M = "loads_per_sec_256m", "loads/s", Rate, Value;
    /// `mem.latency`, 256 MiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_256M = "load_latency_256m", "ns", Time, Histogram;
    /// `mem.latency`, 256 MiB working set: the exact mean ns per load.
    LOAD_NS_256M = "load_ns_256m", "ns", Time, Counter;
    /// `mem.latency`, 1 GiB working set: loads per second.
    LOADS_PER_SEC_1G = "loads_per_sec_1g", "loads/s", Rate, Value;
    /// `mem.latency`, 1 GiB working set: mean load latency of each step, a histogram in ns.
    LOAD_LATENCY_1G = "load_latency_1g", "ns", Time, Histogram;
    /// `mem.latency`, 1 GiB working set: the exact mean ns per load.
    LOAD_NS_1G = "load_ns_1g", "ns", Time, Counter;

    // mem.bandwidth: STREAM's kernels, one pass per event.
    /// `mem.bandwidth` read kernel: passes per second.
    PASSES_PER_SEC_READ = "passes_per_sec_read", "passes/s", Rate, Value;
    /// `mem.bandwidth` read kernel: each pass's time, a histogram in ns.
    PASS_LATENCY_READ = "pass_latency_read", "ns", Time, Histogram;
    /// `mem.bandwidth` read kernel: bytes read per second, as STREAM counts them.
    GB_PER_SEC_READ = "gb_per_sec_read", "GB/s", Throughput, Value;
    /// `mem.bandwidth` copy kernel: passes per second.
    PASSES_PER_SEC_COPY = "passes_per_sec_copy", "passes/s", Rate, Value;
    /// `mem.bandwidth` copy kernel: each pass's time, a histogram in ns.
    PASS_LATENCY_COPY = "pass_latency_copy", "ns", Time, Histogram;
    /// `mem.bandwidth` copy kernel: bytes moved per second, as STREAM counts them.
    GB_PER_SEC_COPY = "gb_per_sec_copy", "GB/s", Throughput, Value;
    /// `mem.bandwidth` triad kernel: passes per second.
    PASSES_PER_SEC_TRIAD = "passes_per_sec_triad", "passes/s", Rate, Value;
    /// `mem.bandwidth` triad kernel: each pass's time, a histogram in ns.
    PASS_LATENCY_TRIAD = "pass_latency_triad", "ns", Time, Histogram;
    /// `mem.bandwidth` triad kernel: bytes moved per second, as STREAM counts them.
    GB_PER_SEC_TRIAD = "gb_per_sec_triad", "GB/s", Throughput, Value;

    // Reads and writes: the disk probes (as I/Os) and net.throughput (as socket calls) share
    // the latency names.
    /// `net.throughput`: socket writes per second.
    WRITES_PER_SEC = "writes_per_sec", "writes/s", Rate, Value;
    /// `net.throughput` and the disk probes: each write's latency, a histogram in ns.
    WRITE_LATENCY = "write_latency", "ns", Time, Histogram;
    /// `net.throughput`: socket reads per second.
    READS_PER_SEC = "reads_per_sec", "reads/s", Rate, Value;
    /// `net.throughput` and the disk probes: each read's latency, a histogram in ns.
    READ_LATENCY = "read_latency", "ns", Time, Histogram;

    // net.throughput.
    /// `net.throughput` (send, reverse): the flow's Gbit/s.
    GBIT_PER_SEC = "gbit_per_sec", "Gbit/s", Throughput, Value;
    /// `net.throughput` bidir: Gbit/s sent.
    GBIT_PER_SEC_TX = "gbit_per_sec_tx", "Gbit/s", Throughput, Value;
    /// `net.throughput` bidir: Gbit/s received.
    GBIT_PER_SEC_RX = "gbit_per_sec_rx", "Gbit/s", Throughput, Value;
    /// `net.throughput` and TCP `net.rr`: segments retransmitted (TCP_INFO), summed over senders.
    TCP_RETRANSMITS = "tcp_retransmits", "segments", Count, Counter;
    /// `net.throughput` and TCP `net.rr`: the smoothed round-trip time (TCP_INFO), in
    /// microseconds, averaged over senders.
    TCP_RTT_US = "tcp_rtt_us", "us", Time, Counter;
    /// `net.throughput`: whether the sending interface's qdisc is fq (pacing needs it).
    FQ_QDISC = "fq_qdisc", "bool", Flag, Counter;

    // net.rr.
    /// `net.rr`: round trips per second.
    ROUND_TRIPS_PER_SEC = "round_trips_per_sec", "round trips/s", Rate, Value;
    /// `net.rr`: each round trip's latency, a histogram in ns.
    ROUND_TRIP_LATENCY = "round_trip_latency", "ns", Time, Histogram;
    /// UDP `net.rr`: datagrams whose response did not come back in time.
    UDP_LOST = "udp_lost", "datagrams", Count, Counter;
    /// `net.rr` at a fixed rate: requests sent after their intended time.
    LATE_SENDS = "late_sends", "requests", Count, Counter;

    // http and tcp: a load generator against a user's server (HTTP/1.1, or raw TCP).
    /// `http` and `tcp`: complete responses (http: 2xx/3xx) per second (over the thread's measured
    /// time, warm-up included: see [`REQUESTS_PER_SEC_AFTER_WARMUP`]).
    REQUESTS_PER_SEC = "requests_per_sec", "requests/s", Rate, Value;
    /// `http` and `tcp`: each request's latency from when it was due (open loop; closed loop: from
    /// its send) to its response's last byte, a histogram in ns.
    REQUEST_LATENCY = "request_latency", "ns", Time, Histogram;
    /// `http` and `tcp`: each request's time from its actual send to its response's last byte, in
    /// ns.
    SERVICE_TIME = "service_time", "ns", Time, Histogram;
    /// `http` and `tcp` at a fixed rate: how late the generator sent each due request it had an
    /// idle connection for (its own lateness, not the server's), a histogram in ns.
    SEND_LAG = "send_lag", "ns", Time, Histogram;
    /// `http` and `tcp`: connect attempts that failed (refused, unreachable, timed out).
    ERRORS_CONNECT = "errors_connect", "errors", Count, Counter;
    /// `http` and `tcp`: requests not answered within `timeout_ms`.
    ERRORS_TIMEOUT = "errors_timeout", "errors", Count, Counter;
    /// `http` (only: a raw response has no status): complete responses with a 4xx status.
    ERRORS_4XX = "errors_4xx", "errors", Count, Counter;
    /// `http` (only): complete responses with a 5xx status.
    ERRORS_5XX = "errors_5xx", "errors", Count, Counter;
    /// `http` and `tcp`: requests lost to a reset, a malformed response (`tcp`: one past 1 MiB
    /// without its terminator, or bytes past its end) or a stream ended mid-response.
    ERRORS_IO = "errors_io", "errors", Count, Counter;
    // http with grpc=: calls whose grpc-status was not OK, one counter per code (1 to 16,
    // gRPC's status codes); a code past 16 is counted as UNKNOWN, as gRPC's clients do.
    /// `http` with `grpc=`: calls answered with grpc-status 1 (CANCELLED).
    ERRORS_GRPC_CANCELLED = "errors_grpc_cancelled", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 2 (UNKNOWN).
    ERRORS_GRPC_UNKNOWN = "errors_grpc_unknown", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 3 (INVALID_ARGUMENT).
    ERRORS_GRPC_INVALID_ARGUMENT = "errors_grpc_invalid_argument", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 4 (DEADLINE_EXCEEDED).
    ERRORS_GRPC_DEADLINE_EXCEEDED = "errors_grpc_deadline_exceeded", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 5 (NOT_FOUND).
    ERRORS_GRPC_NOT_FOUND = "errors_grpc_not_found", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 6 (ALREADY_EXISTS).
    ERRORS_GRPC_ALREADY_EXISTS = "errors_grpc_already_exists", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 7 (PERMISSION_DENIED).
    ERRORS_GRPC_PERMISSION_DENIED = "errors_grpc_permission_denied", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 8 (RESOURCE_EXHAUSTED).
    ERRORS_GRPC_RESOURCE_EXHAUSTED = "errors_grpc_resource_exhausted", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 9 (FAILED_PRECONDITION).
    ERRORS_GRPC_FAILED_PRECONDITION = "errors_grpc_failed_precondition", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 10 (ABORTED).
    ERRORS_GRPC_ABORTED = "errors_grpc_aborted", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 11 (OUT_OF_RANGE).
    ERRORS_GRPC_OUT_OF_RANGE = "errors_grpc_out_of_range", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 12 (UNIMPLEMENTED).
    ERRORS_GRPC_UNIMPLEMENTED = "errors_grpc_unimplemented", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 13 (INTERNAL).
    ERRORS_GRPC_INTERNAL = "errors_grpc_internal", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 14 (UNAVAILABLE).
    ERRORS_GRPC_UNAVAILABLE = "errors_grpc_unavailable", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 15 (DATA_LOSS).
    ERRORS_GRPC_DATA_LOSS = "errors_grpc_data_loss", "errors", Count, Counter;
    /// `http` with `grpc=`: calls answered with grpc-status 16 (UNAUTHENTICATED).
    ERRORS_GRPC_UNAUTHENTICATED = "errors_grpc_unauthenticated", "errors", Count, Counter;
    /// `http` and `tcp`: connections closed (by the server, an error or a timeout) and reopened.
    RECONNECTS = "reconnects", "connections", Count, Counter;
    /// `http` and `tcp`: requests sent after the warm-up.
    REQUESTS_SENT = "requests_sent", "requests", Count, Counter;
    /// `http` and `tcp` at a fixed rate: requests due by the trial's end that never got a
    /// connection.
    REQUESTS_UNSENT = "requests_unsent", "requests", Count, Counter;
    /// `http` and `tcp`: requests still in flight at the trial's end, not recorded.
    REQUESTS_ABANDONED = "requests_abandoned", "requests", Count, Counter;
    /// `http` and `tcp` at a fixed rate: the largest send lag after the warm-up, in microseconds,
    /// the worst thread's.
    SEND_LAG_MAX_US = "send_lag_max_us", "us", Time, Counter;
    /// `http` and `tcp` with a warm-up: complete responses (http: 2xx/3xx) per second from the
    /// warm-up's end, summed over threads: the trial's rate where [`REQUESTS_PER_SEC`] counts the
    /// warm-up's time too.
    REQUESTS_PER_SEC_AFTER_WARMUP = "requests_per_sec_after_warmup", "requests/s", Rate, Counter;
    // http and tcp: the user's server, as its agent measured it (StopServer), added by the
    // controller.
    /// `http` and `tcp`: user plus system CPU time of the server's process tree over its whole life
    /// (start-up and warm-up included), in ns.
    SERVER_CPU_TIME = "server_cpu_time", "ns", Time, Counter;
    /// `http` and `tcp`: [`SERVER_CPU_TIME`] over the requests sent after the warm-up: the
    /// companion figure that neither the network nor the load generator moves. It charges start-up
    /// and warm-up to the measured requests, alike for two builds at the same rate.
    SERVER_CPU_PER_REQUEST = "server_cpu_per_request", "ns", Time, Counter;
    /// `http` and `tcp`: the largest resident set of the server's leading process (VmHWM), in
    /// bytes.
    SERVER_PEAK_RSS = "server_peak_rss", "bytes", Count, Counter;

    // http with two servers in duet (compare --probe http --interleave duet): server B's
    // figures, beside server A's under the unprefixed names.
    /// `http` in duet: server B's complete responses per second.
    B_REQUESTS_PER_SEC = "b_requests_per_sec", "requests/s", Rate, Value;
    /// `http` in duet: server B's request latencies from when each was due, a histogram in ns.
    B_REQUEST_LATENCY = "b_request_latency", "ns", Time, Histogram;
    /// `http` in duet: server B's service times, a histogram in ns.
    B_SERVICE_TIME = "b_service_time", "ns", Time, Histogram;
    /// `http` in duet: the generator's lag on server B's requests, a histogram in ns.
    B_SEND_LAG = "b_send_lag", "ns", Time, Histogram;
    /// `http` in duet: server B's failed connects.
    B_ERRORS_CONNECT = "b_errors_connect", "errors", Count, Counter;
    /// `http` in duet: server B's timeouts.
    B_ERRORS_TIMEOUT = "b_errors_timeout", "errors", Count, Counter;
    /// `http` in duet: server B's 4xx responses.
    B_ERRORS_4XX = "b_errors_4xx", "errors", Count, Counter;
    /// `http` in duet: server B's 5xx responses.
    B_ERRORS_5XX = "b_errors_5xx", "errors", Count, Counter;
    /// `http` in duet: server B's I/O errors.
    B_ERRORS_IO = "b_errors_io", "errors", Count, Counter;
    /// `http` in duet: server B's reopened connections.
    B_RECONNECTS = "b_reconnects", "connections", Count, Counter;
    /// `http` in duet: requests sent to server B after the warm-up.
    B_REQUESTS_SENT = "b_requests_sent", "requests", Count, Counter;
    /// `http` in duet: server B's requests due and never sent.
    B_REQUESTS_UNSENT = "b_requests_unsent", "requests", Count, Counter;
    /// `http` in duet: server B's requests in flight at the trial's end.
    B_REQUESTS_ABANDONED = "b_requests_abandoned", "requests", Count, Counter;
    /// `http` in duet: the largest send lag on server B's requests, in microseconds.
    B_SEND_LAG_MAX_US = "b_send_lag_max_us", "us", Time, Counter;
    /// `http` in duet: server B's complete responses per second from the warm-up's end.
    B_REQUESTS_PER_SEC_AFTER_WARMUP = "b_requests_per_sec_after_warmup", "requests/s", Rate, Counter;
    /// `http` in duet: server B's CPU time over its life, in ns.
    B_SERVER_CPU_TIME = "b_server_cpu_time", "ns", Time, Counter;
    /// `http` in duet: server B's CPU time per request sent to it after the warm-up.
    B_SERVER_CPU_PER_REQUEST = "b_server_cpu_per_request", "ns", Time, Counter;
    /// `http` in duet: server B's peak resident set, in bytes.
    B_SERVER_PEAK_RSS = "b_server_peak_rss", "bytes", Count, Counter;

    // disk.seq and disk.rand.
    /// Disk probes: reads per second.
    READ_IOPS = "read_iops", "IOPS", Rate, Value;
    /// Disk probes: MB read per second (decimal, as fio and the clouds' caps count).
    READ_MB_PER_SEC = "read_mb_per_sec", "MB/s", Throughput, Value;
    /// Disk probes: writes per second.
    WRITE_IOPS = "write_iops", "IOPS", Rate, Value;
    /// Disk probes: MB written per second.
    WRITE_MB_PER_SEC = "write_mb_per_sec", "MB/s", Throughput, Value;
    /// Disk probes: whether the I/O went through io_uring (1) or the thread fallback (0),
    /// averaged over threads.
    ENGINE_IO_URING = "engine_io_uring", "bool", Flag, Counter;
    /// Disk probes: whether io_uring used registered (fixed) buffers, averaged over threads.
    IO_URING_FIXED_BUFFERS = "io_uring_fixed_buffers", "bool", Flag, Counter;
    /// Disk probes: the share of the I/O buffers backed by huge pages, in percent.
    IO_BUFFERS_HUGE_PAGES = "io_buffers_huge_pages", "%", Ratio, Counter;

    // disk.scan.
    /// `disk.scan`: re-reads of the sampled regions per second.
    REREAD_IOPS = "reread_iops", "IOPS", Rate, Value;
    /// `disk.scan`: each re-read's latency, a histogram in ns.
    REREAD_LATENCY = "reread_latency", "ns", Time, Histogram;
    /// `disk.scan`: MB re-read per second.
    REREAD_MB_PER_SEC = "reread_mb_per_sec", "MB/s", Throughput, Value;
    /// `disk.scan --prewarm`: whether everything has been read, averaged over threads.
    PREWARM_COMPLETE = "prewarm_complete", "bool", Flag, Counter;
    /// `disk.scan --prewarm`: bytes this trial read.
    PREWARM_BYTES_READ = "prewarm_bytes_read", "bytes", Count, Counter;
    /// `disk.scan --prewarm`: bytes read so far, by this trial and by earlier runs.
    PREWARM_BYTES_DONE = "prewarm_bytes_done", "bytes", Count, Counter;
    /// `disk.scan --prewarm`: bytes an interrupted earlier run had read, skipped by this trial.
    PREWARM_BYTES_SKIPPED = "prewarm_bytes_skipped", "bytes", Count, Counter;
    /// `disk.scan --prewarm`: all the bytes to read.
    PREWARM_BYTES_TOTAL = "prewarm_bytes_total", "bytes", Count, Counter;
    /// `disk.scan`: whether the survey finished.
    SCAN_COMPLETE = "scan_complete", "bool", Flag, Counter;
    /// `disk.scan`: regions read in the first pass.
    REGIONS_READ = "regions_read", "regions", Count, Counter;
    /// `disk.scan`: MB per second over the whole survey.
    SURVEY_MB_PER_SEC = "survey_mb_per_sec", "MB/s", Throughput, Counter;
    /// `disk.scan`: the median region's first-read MB/s.
    REGION_MB_PER_SEC_P50 = "region_mb_per_sec_p50", "MB/s", Throughput, Counter;
    /// `disk.scan`: the slowest region's first-read MB/s.
    REGION_MB_PER_SEC_MIN = "region_mb_per_sec_min", "MB/s", Throughput, Counter;
    /// `disk.scan`: the fastest region's first-read MB/s.
    REGION_MB_PER_SEC_MAX = "region_mb_per_sec_max", "MB/s", Throughput, Counter;
    /// `disk.scan`: regions read a second time to tell cold from warm.
    RESAMPLED_REGIONS = "resampled_regions", "regions", Count, Counter;
    /// `disk.scan`: resampled regions whose first reads were `cold_factor` times slower than the
    /// re-reads.
    COLD_REGIONS = "cold_regions", "regions", Count, Counter;
    /// `disk.scan`: the cold share of the resampled regions.
    COLD_FRACTION = "cold_fraction", "fraction", Ratio, Counter;
    /// `disk.scan`: the median first-read latency over the median re-read latency of the
    /// resampled regions.
    SLOWDOWN = "slowdown", "ratio", Ratio, Counter;
}

/// The gRPC error counters, `GRPC_ERRORS[code - 1]` for status codes 1 to 16.
pub const GRPC_ERRORS: [&str; 16] = [
    ERRORS_GRPC_CANCELLED,
    ERRORS_GRPC_UNKNOWN,
    ERRORS_GRPC_INVALID_ARGUMENT,
    ERRORS_GRPC_DEADLINE_EXCEEDED,
    ERRORS_GRPC_NOT_FOUND,
    ERRORS_GRPC_ALREADY_EXISTS,
    ERRORS_GRPC_PERMISSION_DENIED,
    ERRORS_GRPC_RESOURCE_EXHAUSTED,
    ERRORS_GRPC_FAILED_PRECONDITION,
    ERRORS_GRPC_ABORTED,
    ERRORS_GRPC_OUT_OF_RANGE,
    ERRORS_GRPC_UNIMPLEMENTED,
    ERRORS_GRPC_INTERNAL,
    ERRORS_GRPC_UNAVAILABLE,
    ERRORS_GRPC_DATA_LOSS,
    ERRORS_GRPC_UNAUTHENTICATED,
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn names_are_unique_and_every_metric_has_a_unit() {
        let mut seen = BTreeSet::new();
        for m in REGISTRY {
            assert!(seen.insert(m.name), "{} is registered twice", m.name);
            assert!(!m.name.is_empty(), "an empty name is registered");
            assert!(!m.unit.is_empty(), "{} has no unit", m.name);
        }
    }

    #[test]
    fn a_duets_b_names_are_a_names_with_b_before_them_in_the_same_unit() {
        assert_eq!(duet_b(ERRORS_CONNECT), Some(B_ERRORS_CONNECT));
        assert_eq!(
            duet_b(SERVER_CPU_PER_REQUEST),
            Some(B_SERVER_CPU_PER_REQUEST)
        );
        assert_eq!(
            duet_b(REQUESTS_PER_SEC_AFTER_WARMUP),
            Some(B_REQUESTS_PER_SEC_AFTER_WARMUP)
        );
        assert_eq!(duet_b(EVENTS_PER_SEC), None);
        assert_eq!(duet_b(B_ERRORS_CONNECT), None);
        for m in REGISTRY {
            if let Some(b) = duet_b(m.name) {
                let b = lookup(b).unwrap();
                assert_eq!(
                    (m.unit, m.kind, m.form),
                    (b.unit, b.kind, b.form),
                    "{}",
                    b.name
                );
            }
        }
    }

    #[test]
    fn names_are_lower_snake_case() {
        for m in REGISTRY {
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn lookup_finds_what_is_registered_and_nothing_else() {
        let m = lookup(READ_MB_PER_SEC).unwrap();
        assert_eq!(
            (m.unit, m.kind, m.form),
            ("MB/s", Kind::Throughput, Form::Value)
        );
        assert_eq!(lookup(WALL_TIME).unwrap().form, Form::Histogram);
        assert_eq!(lookup("mb_per_sec"), None);
    }

    #[test]
    fn the_http_rate_and_its_honest_twin_are_rates_in_one_unit() {
        let value = lookup(REQUESTS_PER_SEC).unwrap();
        let counter = lookup(REQUESTS_PER_SEC_AFTER_WARMUP).unwrap();
        assert_eq!((value.kind, value.form), (Kind::Rate, Form::Value));
        assert_eq!((counter.kind, counter.form), (Kind::Rate, Form::Counter));
        assert_eq!(value.unit, counter.unit);
        for name in [REQUEST_LATENCY, SERVICE_TIME, SEND_LAG] {
            assert_eq!(lookup(name).unwrap().form, Form::Histogram, "{name}");
        }
    }

    /// Histograms hold integers: the agent records per-sample times in ns, instruction counts
    /// and ppm ratios, never a rate or a throughput.
    #[test]
    fn histograms_are_times_counts_or_ratios() {
        for m in REGISTRY.iter().filter(|m| m.form == Form::Histogram) {
            assert!(
                matches!(m.kind, Kind::Time | Kind::Count | Kind::Ratio),
                "{}: {:?}",
                m.name,
                m.kind
            );
        }
    }
}
