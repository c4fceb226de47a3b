//! `tcp`: a load generator for a user's server that speaks its own request/response protocol
//! over TCP (a line protocol, Redis's inline commands, a binary RPC with fixed-size answers).
//! A *load agent* runs it; the server runs on another host, and the controller fills in its
//! address (`target`), exactly as for `http`.
//!
//! It is `http`'s load loop (crate::http::workload: one pinned epoll loop per thread, open loop
//! at a constant rate timed from each request's intended send, closed loop at `rate=0`, send
//! lag and void trials, warm-up, errors by kind) with raw framing instead of HTTP's: every
//! request is the bytes of `request=` (escapes `\n`, `\r`, `\t`, `\0`, `\\`, `\xNN`; default
//! `PING\n`, which a line server and Redis both answer), or one of a request file's
//! (`requests=FILE`: a request per line in the same escapes, the format
//! [`quietbench_vocab::raw_requests`], whose text the controller sends in `requests_text`),
//! copied once into one buffer and picked in `requests_order` as `http`'s are; a response ends
//! at the first `response_terminator=` (default `\n`), or after exactly `response_bytes=N`
//! bytes.
//! One request is in flight per connection, so bytes past a response's end answer nothing
//! asked: an I/O error, as is a response past 1 MiB without its terminator (never a hang) and a
//! stream that ends mid-response. A request not answered within `timeout_ms` is a timeout.
//!
//! The metrics are `http`'s, where they mean the same: `request_latency`, `service_time`,
//! `send_lag`, `requests_per_sec`, the `errors_*` counters but `errors_4xx` and `errors_5xx`
//! (a raw response has no status: every complete response is a sample).

pub mod framing;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use framing::{MAX_FIXED_RESPONSE_BYTES, RawFraming, Terminator, parse_escaped};

use quietbench_vocab::raw_requests::{MAX_RAW_REQUEST_BYTES, parse_raw_requests};

use crate::http::{self, Framing, HttpConfig, Order, REQUESTS_TEXT, RequestSet};
use crate::spec::resolve_integers;
use crate::{ParamError, ProbeSpec};

/// The probe's name.
pub const PROBE: &str = "tcp";

/// The request when none is given: a line, which a line server answers with a line, and
/// Redis with `+PONG\r\n`.
pub const DEFAULT_REQUEST: &str = "PING\\n";
/// The response terminator when none is given.
pub const DEFAULT_TERMINATOR: &str = "\\n";
/// The largest request, decoded, of `request=` or a file's line (as `http`'s body, 64 KiB).
pub const MAX_REQUEST_BYTES: usize = MAX_RAW_REQUEST_BYTES;

/// A text parameter: name, default (None: required or optional), meaning.
type TextParam = (&'static str, Option<&'static str>, &'static str);

const TEXT_PARAMS: &[TextParam] = &[
    (
        "target",
        None,
        "IP:PORT of the server under load (set by the controller)",
    ),
    (
        "request",
        Some(DEFAULT_REQUEST),
        "the bytes of every request, with escapes \\n \\r \\t \\0 \\\\ \\xNN; at most 64 KiB",
    ),
    (
        "requests",
        None,
        "a file of requests to replay instead of request=, on the controller's machine (read \
         once per run): one per line, its bytes with request='s escapes (the line's end is not \
         sent: end it with \\n if the request needs one); blank lines and # comments skipped; \
         at most 100000 requests and 1 MiB",
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
        "response_terminator",
        Some(DEFAULT_TERMINATOR),
        "a response ends at the first of these bytes (escapes as request=; 1 to 64 bytes, \
         e.g. \\r\\n\\r\\n); a response past 1 MiB without it is an I/O error",
    ),
    (
        "response_bytes",
        None,
        "instead of response_terminator: every response is exactly this many bytes (1 to \
         1073741824)",
    ),
    (
        "warmup",
        Some("0"),
        "seconds at the start of each trial whose requests are sent but not recorded",
    ),
];

/// Resolves the `tcp` probe's parameters: `target` (required, IP:PORT), `request` (`PING\n`)
/// or a request file (`requests`, its name, for the record, with `requests_text`, its text,
/// `requests_order` (sequence) and `requests_seed` (0)), `response_terminator` (`\n`) or
/// `response_bytes` (none), `warmup` (0 s), and `http`'s `rate` (1000), `connections` (16),
/// `threads` (1), `timeout_ms` (2000), `max_lag_ms` (10).
pub fn resolve(params: &BTreeMap<String, String>) -> Result<ProbeSpec, ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe: PROBE,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let is_int = |key: &str| http::INT_PARAMS.iter().any(|p| p.name == key);
    if let Some(key) = params
        .keys()
        .find(|k| !is_int(k) && !TEXT_PARAMS.iter().any(|(n, ..)| *n == k.as_str()))
    {
        let known: Vec<&str> = TEXT_PARAMS
            .iter()
            .map(|(n, ..)| *n)
            .chain(http::INT_PARAMS.iter().map(|p| p.name))
            .collect();
        if ["path", "method", "body", "host"].contains(&key.as_str()) || key.starts_with("header.")
        {
            return Err(bad(
                key,
                &params[key],
                "that is http's parameter: tcp sends the bytes of request= (with escapes, \
                 e.g. request='GET /x\\n'), or of each line of a file, requests=FILE"
                    .into(),
            ));
        }
        return Err(ParamError::UnknownParam {
            probe: PROBE,
            key: key.clone(),
            known: known.join(", "),
        });
    }
    let ints: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| is_int(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let values = resolve_integers(PROBE, http::INT_PARAMS, &ints)?;
    let text = |key: &str| -> String {
        params.get(key).cloned().unwrap_or_else(|| {
            TEXT_PARAMS
                .iter()
                .find(|(n, ..)| *n == key)
                .and_then(|(_, d, _)| *d)
                .unwrap_or_default()
                .to_string()
        })
    };

    let target_text = text("target");
    let target = http::request::parse_target(&target_text)
        .map_err(|why| bad("target", &target_text, why))?;
    let warmup_text = text("warmup");
    let warmup =
        http::parse_warmup(&warmup_text).map_err(|why| bad("warmup", &warmup_text, why))?;
    let threads = values["threads"];
    let connections = values["connections"];
    http::check_connections(PROBE, threads, connections)?;

    let mut resolved = crate::spec::as_text(&values);
    let framing = match (
        params.get("response_bytes"),
        params.get("response_terminator"),
    ) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "response_bytes",
                &params["response_bytes"],
                "a response ends at a terminator or after a length: give response_bytes= or \
                 response_terminator=, not both"
                    .into(),
            ));
        }
        (Some(n), None) => {
            let length = n
                .trim()
                .replace('_', "")
                .parse::<u64>()
                .ok()
                .filter(|l| (1..=MAX_FIXED_RESPONSE_BYTES).contains(l))
                .ok_or_else(|| {
                    bad(
                        "response_bytes",
                        n,
                        format!(
                            "give a whole number of bytes from 1 to {MAX_FIXED_RESPONSE_BYTES}"
                        ),
                    )
                })?;
            resolved.insert("response_bytes".into(), length.to_string());
            RawFraming::Length(length)
        }
        (None, _) => {
            let given = text("response_terminator");
            let terminator = parse_escaped(&given)
                .and_then(|bytes| Terminator::new(&bytes))
                .map_err(|why| bad("response_terminator", &given, why))?;
            resolved.insert("response_terminator".into(), given);
            RawFraming::Terminator(terminator)
        }
    };
    let (requests, order) = resolve_requests(params, &mut resolved)?;
    resolved.insert("target".into(), target.to_string());
    resolved.insert("warmup".into(), format!("{}", warmup.as_secs_f64()));

    let config = HttpConfig {
        probe: PROBE,
        framing: Framing::Raw(framing),
        target,
        duet_target: None,
        duet_b_first: false,
        tls_host: None,
        requests: Arc::new(requests),
        order,
        rate: values["rate"],
        connections: connections as usize,
        threads: threads as usize,
        warmup,
        timeout: Duration::from_millis(values["timeout_ms"]),
        max_lag: Duration::from_millis(values["max_lag_ms"]),
    };
    Ok(http::load_spec(config, resolved))
}

/// The requests to send, and in which order: the one of `request=`, or a file's (`requests=`
/// with its `requests_text`, parsed again here: an agent trusts no caller), every one copied
/// once into the set. Adds what the record keeps to `resolved`: `request`, or `requests` (the
/// file's name as given, never its text), `requests_order`, and for random order
/// `requests_seed`.
fn resolve_requests(
    params: &BTreeMap<String, String>,
    resolved: &mut BTreeMap<String, String>,
) -> Result<(RequestSet, Order), ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe: PROBE,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let file = params.get("requests");
    if let (Some(request), Some(_)) = (params.get("request"), file) {
        return Err(bad(
            "request",
            request,
            "requests= gives the bytes of each request, one per line: give request= or \
             requests=, not both"
                .into(),
        ));
    }
    let Some(file) = http::requests::request_file(PROBE, params)? else {
        let request_text = params
            .get("request")
            .map_or(DEFAULT_REQUEST, String::as_str);
        let request =
            parse_escaped(request_text).map_err(|why| bad("request", request_text, why))?;
        if request.is_empty() {
            return Err(bad(
                "request",
                request_text,
                "must not be empty: give the bytes to send, e.g. PING\\n".into(),
            ));
        }
        if request.len() > MAX_REQUEST_BYTES {
            return Err(bad(
                "request",
                &format!("({} bytes)", request.len()),
                format!("at most {MAX_REQUEST_BYTES} bytes"),
            ));
        }
        resolved.insert("request".into(), request_text.to_string());
        return Ok((RequestSet::raw(&request), Order::Sequence));
    };
    let parsed = parse_raw_requests(file.text).map_err(|why| bad("requests", file.name, why))?;
    file.record(resolved);
    Ok((RequestSet::raw_many(&parsed), file.order))
}
