//! `http`: a load generator for a user's HTTP/1.1 server, or with `http2=true` an HTTP/2 one
//! over cleartext (`http/h2.rs`), or with `grpc=` a gRPC server's unary calls over that HTTP/2
//! (`http/grpc.rs`). A *load agent* runs it; the server runs on another host,
//! started by someone else, and the controller fills in its address (`target`).
//!
//! Each probe thread owns a share of the connections (keep-alive, one request in flight on
//! each: no pipelining) and a share of the schedule, and drives them from one non-blocking
//! event loop (epoll), one pass per [`crate::Workload::step`]. No tokio: a runtime's scheduler
//! would sit between the schedule and the socket, and its lateness would be measured as the
//! server's.
//!
//! # What is measured, and from when
//!
//! At `rate` > 0 (open loop), thread t of T sends its request k at `start + (k*T + t) / rate`,
//! whatever happened to the requests before it (wrk2's correction of coordinated omission):
//!
//! - `request_latency`: from that *intended* time to the response's last byte. A request due
//!   while all the thread's connections are busy waits, in order, for the next idle one, and
//!   that wait is in its latency: a user at that rate would see it.
//! - `service_time`: from the request's actual send to the response's last byte.
//! - `send_lag`: how late the loop itself noticed a due request while it had an idle connection
//!   (descheduled, or too slow). Past `max_lag_ms` after the warm-up, the trial is void: the
//!   step fails and says so, since the generator, not the server, was measured. Queueing behind
//!   busy connections is the server's doing and is not lag. Lateness while no connection is
//!   idle cannot be told from the server's: it shows in latency only.
//!
//! At `rate=0` (closed loop) each connection sends its next request when the previous answer
//! is in; latency is then the service time, and there is no schedule to lag behind.
//!
//! Every request is the one of `path=` and `method=`, or one of a request file's
//! (`requests=FILE`, whose text the controller sends: the format is
//! [`quietbench_vocab::requests`], the formatting and the order `http/requests.rs`), all
//! formatted once before the trial.
//!
//! Only complete 2xx/3xx responses are samples. Errors are counted by kind and never folded
//! into latency: `errors_connect` (per failed attempt), `errors_timeout`, `errors_4xx`,
//! `errors_5xx`, `errors_io` (reset, malformed response, end of stream mid-response).
//!
//! # Warm-up and the rate
//!
//! Requests due (closed loop: sent) in the first `warmup` seconds are sent but not recorded,
//! and nothing that happens in them is counted. The harness computes `requests_per_sec` as the
//! recorded responses over each thread's measured time, and that time includes the warm-up: with
//! `warmup` > 0, the rate of the whole trial (and of any interval the warm-up overlaps) is
//! understated by the warm-up's share. Intervals after the warm-up are exact. So with a warm-up
//! the probe also reports the counter `requests_per_sec_after_warmup`: each thread's recorded
//! responses over its time from the warm-up's end to its last step, summed over threads, the
//! same rule as the harness's over the honest span. That is the trial's rate to read; the
//! harness's stays as it is for every other probe.

// `framing`, `request`, `requests` and `response` serve `tcp` too: the same loop with raw
// framing (crate::tcp).
pub(crate) mod framing;
mod grpc;
mod h2;
pub(crate) mod request;
pub(crate) mod requests;
pub(crate) mod response;
mod schedule;
mod sys;
#[cfg(test)]
pub(crate) mod tests;
mod tls;
mod workload;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quietbench_vocab::metrics;

// The request-file format is the vocabulary's, shared with the controller; re-exported so
// that `quietbench_probe::http::REQUESTS_TEXT` and the bounds stay where the agent reads them.
/// The HTTP/2 response reader on arbitrary bytes, for the fuzz targets only
/// (crates/quietbench-fuzz): the first byte sets the read size, the rest is a server's bytes.
#[doc(hidden)]
pub fn fuzz_http2_reader(data: &[u8]) {
    h2::fuzz(data);
}

pub use framing::Framing;
pub use quietbench_vocab::requests::{MAX_REQUESTS, MAX_REQUESTS_TEXT_BYTES, REQUESTS_TEXT};
pub use requests::{Order, RequestSet};
pub use workload::HttpWorkload;

use crate::spec::{IntParam, WorkKind, resolve_integers};
use crate::{MetricSet, ParamError, ProbeSpec, RateBasis};

/// The probe's name.
pub const PROBE: &str = "http";

/// Index of the request-latency metric set (with the rate).
pub(crate) const LATENCY: usize = 0;
/// Index of the service-time metric set.
pub(crate) const SERVICE: usize = 1;
/// Index of the send-lag metric set (open loop only).
pub(crate) const LAG: usize = 2;

const REQUEST_LATENCY: MetricSet = MetricSet {
    rate_metric: metrics::REQUESTS_PER_SEC,
    rate_unit: "requests/s",
    latency_metric: metrics::REQUEST_LATENCY,
    latency_unit: "ns",
    throughput: None,
};

/// Service times are the same requests as the latencies: one rate is enough.
const SERVICE_TIME: MetricSet = MetricSet {
    rate_metric: "",
    rate_unit: "",
    latency_metric: metrics::SERVICE_TIME,
    latency_unit: "ns",
    throughput: None,
};

const SEND_LAG: MetricSet = MetricSet {
    rate_metric: "",
    rate_unit: "",
    latency_metric: metrics::SEND_LAG,
    latency_unit: "ns",
    throughput: None,
};

/// The metric sets at a fixed rate: latency from the intended time, service time, send lag.
pub const OPEN_LOOP_METRIC_SETS: &[MetricSet] = &[REQUEST_LATENCY, SERVICE_TIME, SEND_LAG];
/// The metric sets of a closed loop: no schedule, so no lag.
pub const CLOSED_LOOP_METRIC_SETS: &[MetricSet] = &[REQUEST_LATENCY, SERVICE_TIME];

const B_REQUEST_LATENCY: MetricSet = MetricSet {
    rate_metric: metrics::B_REQUESTS_PER_SEC,
    latency_metric: metrics::B_REQUEST_LATENCY,
    ..REQUEST_LATENCY
};
const B_SERVICE_TIME: MetricSet = MetricSet {
    latency_metric: metrics::B_SERVICE_TIME,
    ..SERVICE_TIME
};
const B_SEND_LAG: MetricSet = MetricSet {
    latency_metric: metrics::B_SEND_LAG,
    ..SEND_LAG
};

/// In a duet (`duet_target=`), server A's metric sets, then server B's: the threads that load
/// B record at an offset of one lane's sets.
pub const DUET_OPEN_LOOP_METRIC_SETS: &[MetricSet] = &[
    REQUEST_LATENCY,
    SERVICE_TIME,
    SEND_LAG,
    B_REQUEST_LATENCY,
    B_SERVICE_TIME,
    B_SEND_LAG,
];
/// A duet's closed loop.
pub const DUET_CLOSED_LOOP_METRIC_SETS: &[MetricSet] = &[
    REQUEST_LATENCY,
    SERVICE_TIME,
    B_REQUEST_LATENCY,
    B_SERVICE_TIME,
];

/// The metric sets of a load: open or closed loop, one server or two in duet.
pub(crate) fn metric_sets(open_loop: bool, duet: bool) -> &'static [MetricSet] {
    match (open_loop, duet) {
        (true, false) => OPEN_LOOP_METRIC_SETS,
        (false, false) => CLOSED_LOOP_METRIC_SETS,
        (true, true) => DUET_OPEN_LOOP_METRIC_SETS,
        (false, true) => DUET_CLOSED_LOOP_METRIC_SETS,
    }
}

/// The largest `rate`: 10 M requests/s is beyond any one load agent; a typo is more likely.
pub const MAX_RATE: u64 = 10_000_000;
/// The most connections of one trial.
pub const MAX_CONNECTIONS: u64 = 100_000;
/// The most probe threads.
pub const MAX_THREADS: u64 = 64;
/// The longest warm-up, seconds.
pub const MAX_WARMUP_SECS: f64 = 3600.0;

/// The integer parameters (`tcp`'s too: they say the same there).
pub(crate) const INT_PARAMS: &[IntParam] = &[
    IntParam {
        name: "rate",
        default: 1000,
        min: 0,
        max: MAX_RATE,
        meaning: "requests per second across all threads, each timed from when it was due; 0: \
         closed loop, each connection sends its next request when the answer is in",
    },
    IntParam {
        name: "connections",
        default: 16,
        min: 1,
        max: MAX_CONNECTIONS,
        meaning: "keep-alive connections in all, split evenly over the threads (at least one each)",
    },
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: MAX_THREADS,
        meaning: "probe threads, each driving its share of the connections and of the schedule",
    },
    IntParam {
        name: "timeout_ms",
        default: 2000,
        min: 1,
        max: 600_000,
        meaning: "a request (or connect) not answered in this time counts as a timeout, and its \
         connection is closed and reopened",
    },
    IntParam {
        name: "max_lag_ms",
        default: 10,
        min: 1,
        max: 60_000,
        meaning: "how late the generator may send a due request it had a connection for before \
         the trial is void",
    },
];

/// A text parameter: name, default (None: required), meaning.
type TextParam = (&'static str, Option<&'static str>, &'static str);

const TEXT_PARAMS: &[TextParam] = &[
    (
        "target",
        None,
        "IP:PORT of the server under load (set by the controller)",
    ),
    ("path", Some("/"), "the request target, from '/'"),
    ("method", Some("GET"), "GET, POST, PUT, HEAD or DELETE"),
    (
        "requests",
        None,
        "a file of requests to replay instead of path= and method=, on the controller's \
         machine (read once per run): one per line, PATH or METHOD PATH; blank lines and # \
         comments skipped; body=, header.NAME= and host= go with each; at most 100000 \
         requests and 1 MiB",
    ),
    (
        "requests_order",
        Some("sequence"),
        "sequence: the file's lines in order, the threads together, wrapping at its end; \
         random: uniform draws from requests_seed",
    ),
    (
        "requests_seed",
        None,
        "the seed of requests_order=random; default: the run's --seed, so a rerun with it \
         draws the same requests",
    ),
    (
        REQUESTS_TEXT,
        None,
        "the text of the requests= file (set by the controller, which reads it)",
    ),
    (
        "body",
        Some(""),
        "the request body, sent with its Content-Length",
    ),
    ("host", None, "the Host header's value; default: the target"),
    (
        "tls",
        Some("false"),
        "true: over TLS (the server's certificate is not verified; SNI from host= when it is a \
         name), offering ALPN h2 with http2=true, else http/1.1",
    ),
    (
        "http2",
        Some("false"),
        "true: HTTP/2 over cleartext with prior knowledge (no TLS, no Upgrade), one stream in \
         flight per connection; body= at most 16384 bytes",
    ),
    (
        "warmup",
        Some("0"),
        "seconds at the start of each trial whose requests are sent but not recorded",
    ),
    (
        "grpc",
        None,
        "PACKAGE.SERVICE/METHOD: unary gRPC calls over HTTP/2 instead of HTTP requests, each \
         sending grpc_request='s message; recorded when grpc-status is 0, any other code counted \
         in errors_grpc_CODE",
    ),
    (
        "grpc_request",
        None,
        "with grpc=: the request message's file on the controller's machine (read once per \
         run), JSON (proto3's JSON mapping) or binary protobuf; at most 16379 bytes encoded",
    ),
    (
        "grpc_descriptor",
        None,
        "with grpc=: the descriptor set the method is in (protoc --include_imports \
         --descriptor_set_out, or buf build -o), on the controller's machine",
    ),
    (
        "grpc_message",
        None,
        "the encoded request message in hex (set by the controller from grpc_request=)",
    ),
    (
        "duet_target",
        None,
        "IP:PORT of server B, running at the same time as server A on other CPUs (set by the \
         controller for compare --interleave duet): rate, connections and threads are then each \
         server's, and the two servers' requests alternate",
    ),
    (
        "duet_b_first",
        Some("false"),
        "true: in a duet, B's requests take the even threads and the first slot of each pair \
         (the controller swaps the sides every round, so neither build always goes first)",
    ),
];

/// Headers are given as `header.NAME=VALUE`, any number.
const HEADER_PREFIX: &str = "header.";

/// One trial's load, checked by [`resolve`] (or `tcp`'s); every thread's workload is made
/// from it.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The probe: `http` or `tcp`, for messages.
    pub probe: &'static str,
    /// How a response ends: HTTP/1.1, or raw (`tcp`).
    pub framing: Framing,
    /// The server.
    pub target: SocketAddr,
    /// Server B of a duet: odd threads load it (even ones with `duet_b_first`), recording
    /// B's metrics. `rate`, `connections` and `threads` are then both servers' together (twice
    /// each server's).
    pub duet_target: Option<SocketAddr>,
    /// In a duet, B's lane takes the even threads, whose requests are due first in each pair.
    pub duet_b_first: bool,
    /// `tls=true`: TLS to the server, with this Host's name for SNI when it is one.
    pub tls_host: Option<String>,
    /// The requests, formatted once: the one of `path=`, or a file's.
    pub requests: Arc<RequestSet>,
    /// The order a thread sends them in.
    pub order: Order,
    /// Requests per second across all threads; 0: closed loop.
    pub rate: u64,
    /// Connections across all threads.
    pub connections: usize,
    /// Probe threads.
    pub threads: usize,
    /// The start of each trial whose requests are not recorded.
    pub warmup: Duration,
    /// Per request (and per connect).
    pub timeout: Duration,
    /// The generator's own lateness bound.
    pub max_lag: Duration,
}

impl HttpConfig {
    /// The connections thread `thread` owns: an even split, the first threads taking one more
    /// where it does not divide.
    pub fn connections_of(&self, thread: usize) -> usize {
        let (threads, connections) = (self.threads.max(1), self.connections);
        connections / threads + usize::from(thread < connections % threads)
    }
}

/// Bytes each thread's workload keeps: one response buffer per connection of the busiest
/// thread, and what that is in the request's terms.
pub fn buffers_per_thread(resolved: &BTreeMap<String, String>) -> (u64, String) {
    let int = |key: &str| {
        resolved
            .get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let per_thread = int("connections").div_ceil(int("threads").max(1));
    (
        per_thread.saturating_mul(response::BUFFER_BYTES as u64),
        format!(
            "{per_thread} connections x a {} KiB response buffer",
            response::BUFFER_BYTES / 1024
        ),
    )
}

/// Resolves the `http` probe's parameters: `target` (required, IP:PORT), `path` (/), `method`
/// (GET), `body` (empty), `host` (the target), `warmup` (0 s), `rate` (1000), `connections`
/// (16), `threads` (1), `timeout_ms` (2000), `max_lag_ms` (10), `http2` (false), and
/// `header.NAME=VALUE` for each header to send; or, instead of `path` and `method`, a request file: `requests` (its
/// name, for the record) with `requests_text` (its text), `requests_order` (sequence) and
/// `requests_seed` (0).
pub fn resolve(params: &BTreeMap<String, String>) -> Result<ProbeSpec, ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe: PROBE,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let is_text = |key: &str| TEXT_PARAMS.iter().any(|(n, ..)| *n == key);
    if let Some(key) = params.keys().find(|k| {
        !is_text(k) && !k.starts_with(HEADER_PREFIX) && !INT_PARAMS.iter().any(|p| p.name == *k)
    }) {
        let known: Vec<&str> = TEXT_PARAMS
            .iter()
            .map(|(n, ..)| *n)
            .chain(INT_PARAMS.iter().map(|p| p.name))
            .chain(["header.NAME"])
            .collect();
        return Err(ParamError::UnknownParam {
            probe: PROBE,
            key: key.clone(),
            known: known.join(", "),
        });
    }
    let ints: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| INT_PARAMS.iter().any(|p| p.name == *k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let values = resolve_integers(PROBE, INT_PARAMS, &ints)?;
    let text = |key: &str| -> Option<String> {
        params.get(key).cloned().or_else(|| {
            TEXT_PARAMS
                .iter()
                .find(|(n, ..)| *n == key)
                .and_then(|(_, d, _)| d.map(str::to_string))
        })
    };

    let target_text = text("target").unwrap_or_default();
    let target =
        request::parse_target(&target_text).map_err(|why| bad("target", &target_text, why))?;
    let body = text("body").unwrap_or_default();
    if body.len() > request::MAX_BODY_BYTES {
        return Err(bad(
            "body",
            &format!("({} bytes)", body.len()),
            format!("at most {} bytes", request::MAX_BODY_BYTES),
        ));
    }
    let flag = |key: &str, what: &str| -> Result<bool, ParamError> {
        let value = text(key).unwrap_or_default();
        match value.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad(key, &value, format!("true or false ({what})"))),
        }
    };
    let grpc = params.contains_key("grpc");
    let http2 = grpc || flag("http2", "HTTP/2, or HTTP/1.1")?;
    let tls = flag("tls", "over TLS, or cleartext")?;
    if http2 && body.len() > h2::MAX_BODY_BYTES {
        return Err(bad(
            "body",
            &format!("({} bytes)", body.len()),
            format!(
                "with http2=true at most {} bytes (one DATA frame within the server's initial \
                 window)",
                h2::MAX_BODY_BYTES
            ),
        ));
    }
    let host = params
        .get("host")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|| target_text.trim().to_string());
    request::check_header_value(&host).map_err(|why| bad("host", &host, why))?;
    let warmup_text = text("warmup").unwrap_or_default();
    let warmup = parse_warmup(&warmup_text).map_err(|why| bad("warmup", &warmup_text, why))?;
    let mut headers = Vec::new();
    for (key, value) in params {
        let Some(name) = key.strip_prefix(HEADER_PREFIX) else {
            continue;
        };
        let value = value.trim();
        request::check_header(name, value).map_err(|why| bad(key, value, why))?;
        if http2 {
            h2::check_header(name).map_err(|why| bad(key, value, why))?;
        }
        headers.push((name.to_string(), value.to_string()));
    }

    let threads = values["threads"];
    let connections = values["connections"];
    check_connections(PROBE, threads, connections)?;
    let rate = values["rate"];
    let duet_target = match params.get("duet_target") {
        Some(text) if grpc => {
            return Err(bad(
                "duet_target",
                text,
                "servers in duet are not built for grpc= yet: compare gRPC servers in \
                 alternating trials"
                    .into(),
            ));
        }
        Some(text) => {
            Some(request::parse_target(text).map_err(|why| bad("duet_target", text, why))?)
        }
        None => None,
    };
    let duet_b_first = flag("duet_b_first", "B's requests first in each pair")?;
    // In a duet every figure is each server's: the generator runs both servers' share.
    let lanes = if duet_target.is_some() { 2 } else { 1 };

    let mut resolved = crate::spec::as_text(&values);
    let (requests, order) = match grpc::resolve_call(params, &host, &headers, &mut resolved)? {
        Some(call) => (call, Order::Sequence),
        None => resolve_requests(
            params,
            http2,
            &host,
            &headers,
            body.as_bytes(),
            &mut resolved,
        )?,
    };
    // Only when asked, so that the records of HTTP/1.1 runs stay as they were.
    if http2 {
        resolved.insert("http2".into(), "true".into());
    }
    if tls {
        resolved.insert("tls".into(), "true".into());
    }
    resolved.insert("target".into(), target.to_string());
    if let Some(b) = duet_target {
        resolved.insert("duet_target".into(), b.to_string());
        if duet_b_first {
            resolved.insert("duet_b_first".into(), "true".into());
        }
    }
    if !grpc {
        resolved.insert("body".into(), body);
    }
    resolved.insert("host".into(), host);
    resolved.insert("warmup".into(), format!("{}", warmup.as_secs_f64()));
    for (name, value) in headers {
        resolved.insert(format!("{HEADER_PREFIX}{name}"), value);
    }

    let config = HttpConfig {
        probe: PROBE,
        framing: match (grpc, http2) {
            (true, _) => Framing::Grpc,
            (false, true) => Framing::Http2,
            (false, false) => Framing::Http,
        },
        target,
        duet_target,
        duet_b_first,
        tls_host: tls.then(|| resolved["host"].clone()),
        requests: Arc::new(requests),
        order,
        rate: rate * lanes,
        connections: (connections * lanes) as usize,
        threads: (threads * lanes) as usize,
        warmup,
        timeout: Duration::from_millis(values["timeout_ms"]),
        max_lag: Duration::from_millis(values["max_lag_ms"]),
    };
    Ok(load_spec(config, resolved))
}

/// Each thread needs a connection of its own.
pub(crate) fn check_connections(
    probe: &'static str,
    threads: u64,
    connections: u64,
) -> Result<(), ParamError> {
    if connections < threads {
        return Err(ParamError::BadValue {
            probe,
            key: "connections".into(),
            value: connections.to_string(),
            why: format!(
                "each of threads={threads} needs a connection of its own: give at least \
                 {threads}, or fewer threads"
            ),
        });
    }
    Ok(())
}

/// The spec of a load probe (`http`, `tcp`) from its checked config: its metric sets by the
/// loop's kind, and a factory that makes each thread's workload.
pub(crate) fn load_spec(config: HttpConfig, resolved: BTreeMap<String, String>) -> ProbeSpec {
    let (probe, threads, rate) = (config.probe, config.threads, config.rate);
    ProbeSpec {
        name: probe,
        threads,
        resolved_params: resolved,
        metric_sets: metric_sets(rate > 0, config.duet_target.is_some()),
        // Every metric set's samples are taken at the same time: each over the elapsed time.
        basis: RateBasis::Elapsed,
        work: WorkKind::Network,
        factory: Arc::new(move |thread| {
            if let Some(bounds) = crate::spec::bounds_in_force()
                && config.warmup >= bounds.duration
            {
                return Err(format!(
                    "{probe}: warmup={} s is not shorter than the trial's {} s: nothing would be \
                     measured; lower warmup",
                    config.warmup.as_secs_f64(),
                    bounds.duration.as_secs_f64()
                ));
            }
            Ok(Box::new(HttpWorkload::new(&config, thread)?))
        }),
    }
}

/// The requests to send, and in which order: the one of `path=` and `method=`, or a file's
/// (`requests=` with its `requests_text`). Adds what the record keeps to `resolved`: `path`
/// and `method`, or `requests` (the file's name as given, never its text), `requests_order`,
/// and for random order `requests_seed`.
fn resolve_requests(
    params: &BTreeMap<String, String>,
    http2: bool,
    host: &str,
    headers: &[(String, String)],
    body: &[u8],
    resolved: &mut BTreeMap<String, String>,
) -> Result<(RequestSet, Order), ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe: PROBE,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let Some(file) = requests::request_file(PROBE, params)? else {
        let path = params.get("path").cloned().unwrap_or_else(|| "/".into());
        request::check_path(&path).map_err(|why| bad("path", &path, why))?;
        let method_text = params.get("method").map_or("GET", String::as_str);
        let method =
            request::Method::parse(method_text).map_err(|why| bad("method", method_text, why))?;
        resolved.insert("path".into(), path.clone());
        resolved.insert("method".into(), method.as_str().into());
        let set = RequestSet::one(http2, method, &path, host, headers, body)
            .map_err(|why| bad("http2", "true", why))?;
        return Ok((set, Order::Sequence));
    };
    if let Some(key) = ["path", "method"]
        .into_iter()
        .find(|k| params.contains_key(*k))
    {
        return Err(bad(
            key,
            &params[key],
            "requests= gives each request's path and method: give one or the other".into(),
        ));
    }
    let parsed = quietbench_vocab::requests::parse_requests(file.text)
        .map_err(|why| bad("requests", file.name, why))?;
    let set = RequestSet::format(http2, &parsed, host, headers, body)
        .map_err(|why| bad("requests", file.name, why))?;
    file.record(resolved);
    Ok((set, file.order))
}

/// A warm-up in seconds: a decimal number from 0 to [`MAX_WARMUP_SECS`].
pub(crate) fn parse_warmup(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected seconds, e.g. 0.5, from 0 to {MAX_WARMUP_SECS}"))?;
    if !(0.0..=MAX_WARMUP_SECS).contains(&secs) {
        return Err(format!("must be from 0 to {MAX_WARMUP_SECS} seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}
