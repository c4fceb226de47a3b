//! `grpc=PACKAGE.SERVICE/METHOD`: unary gRPC calls, each the same request, over HTTP/2 (the
//! loop's `http2=true`, one call in flight per connection, `connections` of them).
//!
//! A call is a POST to `/PACKAGE.SERVICE/METHOD` with `content-type: application/grpc` and
//! `te: trailers`, whose body is the message in gRPC's framing: a byte saying it is not
//! compressed, its length in four bytes, then the message (the gRPC over HTTP/2 protocol,
//! "Length-Prefixed-Message"). The controller encoded the message from the user's file and sends
//! it in hex ([`GRPC_MESSAGE`]), so the agent holds no protobuf code and no descriptor. The call
//! is formatted once, like any request; the reader reads `grpc-status` from the block that ends
//! the response ([`super::h2`]), and a call is recorded only when it is 0 (OK): any other code
//! is counted in its own counter ([`metrics::GRPC_ERRORS`]).

use std::collections::BTreeMap;

use quietbench_vocab::grpc::{
    GRPC, GRPC_DESCRIPTOR, GRPC_MESSAGE, GRPC_REQUEST, MAX_GRPC_MESSAGE_BYTES, from_hex,
    split_method,
};
#[cfg(doc)]
use quietbench_vocab::metrics;

use super::request::Method;
use super::requests::RequestSet;
use super::{PROBE, REQUESTS_TEXT};
use crate::ParamError;

/// The parameters a call replaces or sets itself, and why each is refused beside `grpc=`.
const REPLACED: &[(&str, &str)] = &[
    ("path", "the path is /PACKAGE.SERVICE/METHOD"),
    ("method", "every call is a POST"),
    ("body", "the body is grpc_request='s message"),
    (
        "requests",
        "every call sends the one message of grpc_request=",
    ),
    (
        REQUESTS_TEXT,
        "every call sends the one message of grpc_request=",
    ),
    (
        "requests_order",
        "every call sends the one message of grpc_request=",
    ),
    (
        "requests_seed",
        "every call sends the one message of grpc_request=",
    ),
];

/// The call of `grpc=`, formatted once, or None without `grpc=`. Adds to `resolved` what the
/// record keeps: the method, `path`, `method` (POST) and the files' names as given (never the
/// message).
pub(super) fn resolve_call(
    params: &BTreeMap<String, String>,
    host: &str,
    headers: &[(String, String)],
    resolved: &mut BTreeMap<String, String>,
) -> Result<Option<RequestSet>, ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe: PROBE,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let Some(method) = params.get(GRPC) else {
        if let Some(key) = [GRPC_REQUEST, GRPC_DESCRIPTOR, GRPC_MESSAGE]
            .into_iter()
            .find(|k| params.contains_key(*k))
        {
            return Err(bad(
                key,
                &params[key],
                "goes with grpc=PACKAGE.SERVICE/METHOD, the method to call".into(),
            ));
        }
        return Ok(None);
    };
    let method = method.trim();
    split_method(method).map_err(|why| bad(GRPC, method, why))?;
    if let Some((key, why)) = REPLACED.iter().find(|(k, _)| params.contains_key(*k)) {
        return Err(bad(key, &params[*key], format!("not with grpc=: {why}")));
    }
    if params.get("http2").is_some_and(|v| v.trim() != "true") {
        return Err(bad(
            "http2",
            &params["http2"],
            "gRPC runs over HTTP/2: leave http2= out with grpc=".into(),
        ));
    }
    if let Some((name, _)) = headers.iter().find(|(n, _)| {
        ["content-type", "te"]
            .iter()
            .any(|o| o.eq_ignore_ascii_case(n))
    }) {
        return Err(bad(
            &format!("header.{name}"),
            "",
            "a gRPC call sets content-type and te itself".into(),
        ));
    }
    let Some(hex) = params.get(GRPC_MESSAGE) else {
        return Err(bad(
            GRPC,
            method,
            format!(
                "give the request with {GRPC_REQUEST}=FILE (JSON or binary protobuf) and \
                 {GRPC_DESCRIPTOR}=FILE; quietbench encodes it and sends it in {GRPC_MESSAGE}"
            ),
        ));
    };
    let message = from_hex(hex).map_err(|why| bad(GRPC_MESSAGE, "(hex)", why))?;
    if message.len() > MAX_GRPC_MESSAGE_BYTES {
        return Err(bad(
            GRPC_MESSAGE,
            &format!("({} bytes)", message.len()),
            format!("at most {MAX_GRPC_MESSAGE_BYTES} bytes (one HTTP/2 DATA frame)"),
        ));
    }
    let path = format!("/{method}");
    let mut all_headers = headers.to_vec();
    all_headers.push(("content-type".into(), "application/grpc".into()));
    all_headers.push(("te".into(), "trailers".into()));
    let body = framed(&message);
    let set = RequestSet::one(true, Method::Post, &path, host, &all_headers, &body)
        .map_err(|why| bad(GRPC, method, why))?;
    resolved.insert(GRPC.into(), method.into());
    resolved.insert("path".into(), path);
    resolved.insert("method".into(), Method::Post.as_str().into());
    for key in [GRPC_REQUEST, GRPC_DESCRIPTOR] {
        if let Some(name) = params.get(key) {
            resolved.insert(key.into(), name.clone());
        }
    }
    Ok(Some(set))
}

/// A message in gRPC's framing: not compressed (0), its length (big-endian), the message.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(5 + message.len());
    body.push(0);
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(pairs: &[(&str, &str)]) -> Result<crate::ProbeSpec, String> {
        let mut params: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        params.insert("target".into(), "127.0.0.1:9".into());
        super::super::resolve(&params).map_err(|e| e.to_string())
    }

    #[test]
    fn a_call_is_a_post_over_http2_whose_record_keeps_no_message() {
        let spec = resolve(&[
            (GRPC, "qbtest.v1.Bench/Echo"),
            (GRPC_MESSAGE, "0a026869"),
            (GRPC_REQUEST, "req.json"),
            ("header.authorization", "Bearer x"),
        ])
        .unwrap();
        let r = &spec.resolved_params;
        assert_eq!(r["path"], "/qbtest.v1.Bench/Echo");
        assert_eq!(r["method"], "POST");
        assert_eq!(r["http2"], "true");
        assert_eq!(r[GRPC_REQUEST], "req.json");
        assert!(
            !r.contains_key(GRPC_MESSAGE) && !r.contains_key("body"),
            "{r:?}"
        );
    }

    #[test]
    fn what_a_call_sets_itself_is_refused_beside_it() {
        let call = [(GRPC, "a.B/C"), (GRPC_MESSAGE, "")];
        for (extra, expected) in [
            (("path", "/x"), "the path is /PACKAGE.SERVICE/METHOD"),
            (("method", "GET"), "every call is a POST"),
            (("body", "x"), "grpc_request='s message"),
            (("requests", "f"), "one message of grpc_request="),
            (("http2", "false"), "leave http2= out"),
            (
                ("header.content-type", "x"),
                "sets content-type and te itself",
            ),
        ] {
            let mut pairs = call.to_vec();
            pairs.push(extra);
            let why = resolve(&pairs).unwrap_err();
            assert!(why.contains(expected), "{extra:?}: {why}");
        }
        let why = resolve(&[(GRPC, "a.B/C")]).unwrap_err();
        assert!(why.contains("grpc_request=FILE"), "{why}");
        let why = resolve(&[(GRPC, "a.B"), (GRPC_MESSAGE, "")]).unwrap_err();
        assert!(why.contains("PACKAGE.SERVICE/METHOD"), "{why}");
        let why = resolve(&[(GRPC, "a.B/C"), (GRPC_MESSAGE, "0g")]).unwrap_err();
        assert!(why.contains("not hex"), "{why}");
        let big = "00".repeat(MAX_GRPC_MESSAGE_BYTES + 1);
        let why = resolve(&[(GRPC, "a.B/C"), (GRPC_MESSAGE, &big)]).unwrap_err();
        assert!(why.contains("at most 16379 bytes"), "{why}");
        let why = resolve(&[(GRPC_REQUEST, "f.json")]).unwrap_err();
        assert!(why.contains("goes with grpc="), "{why}");
    }

    #[test]
    fn a_message_is_framed_with_its_length() {
        assert_eq!(framed(b"\x0a\x02hi"), b"\x00\x00\x00\x00\x04\x0a\x02hi");
        assert_eq!(framed(b""), b"\x00\x00\x00\x00\x00");
    }
}
