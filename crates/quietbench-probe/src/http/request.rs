//! The request: its parts checked one by one, then formatted once into the bytes it sends
//! (each request of a request file the same way).

use std::net::SocketAddr;

// The method and the path are checked by the request-file format's own rules, which the
// controller checks a file with too: `path=` and `method=` take what a file's line takes.
pub(crate) use quietbench_vocab::requests::{Method, check_path};

/// The largest body: the agent takes parameter values up to 16 KiB; this bounds the probe on
/// its own.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;

/// The server's address: an IP address and a port, never a name. The controller fills it in
/// with an address it knows; resolving a name here would make each agent ask its own DNS, and
/// a load agent could then load a different server than the one the controller started.
pub(crate) fn parse_target(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(
            "required: IP:PORT of the server under load, e.g. 10.0.0.5:8080 or \
                    [fd00::5]:8080; the controller sets it"
                .into(),
        );
    }
    let addr: SocketAddr = text.parse().map_err(|_| {
        "expected IP:PORT, e.g. 10.0.0.5:8080 or [fd00::5]:8080: an IP address and a port; \
         host names are not resolved (give the host= parameter for the Host header)"
            .to_string()
    })?;
    if addr.port() == 0 {
        return Err("the port must not be 0".into());
    }
    if addr.ip().is_unspecified() {
        return Err("0.0.0.0 and :: are not addresses a server can be reached at".into());
    }
    Ok(addr)
}

/// Header names the probe writes itself, and why.
const RESERVED: &[(&str, &str)] = &[
    ("host", "set the Host header with host="),
    ("content-length", "the probe sets it from body="),
    (
        "transfer-encoding",
        "the probe sends body= with a Content-Length",
    ),
    (
        "connection",
        "the probe keeps its connections alive, one request in flight on each",
    ),
];

/// A token (RFC 9110 5.6.2): the characters a header name may have.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header the user gave as `header.NAME=VALUE`.
pub(crate) fn check_header(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a header needs a name: header.NAME=VALUE, e.g. header.Accept=*/*".into());
    }
    if let Some(b) = name.bytes().find(|&b| !is_tchar(b)) {
        return Err(format!(
            "'{}' is not allowed in a header name",
            char::from(b).escape_default()
        ));
    }
    if let Some((_, why)) = RESERVED.iter().find(|(r, _)| r.eq_ignore_ascii_case(name)) {
        return Err(format!("{name} is not given as a header: {why}"));
    }
    check_header_value(value)
}

/// A header value: visible characters, spaces and tabs; no line breaks.
pub(crate) fn check_header_value(value: &str) -> Result<(), String> {
    if let Some(b) = value
        .bytes()
        .find(|&b| b != b'\t' && (b < 0x20 || b == 0x7f))
    {
        return Err(format!(
            "control character {b:#04x} (a line break?) is not allowed in a header value"
        ));
    }
    Ok(())
}

/// Appends a request's bytes to `out`. A body, or a method that carries one (POST, PUT), gets
/// a Content-Length; no Connection header, since HTTP/1.1 connections stay open by default.
pub(crate) fn append_request(
    out: &mut Vec<u8>,
    method: Method,
    path: &str,
    host: &str,
    headers: &[(String, String)],
    body: &[u8],
) {
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {host}\r\n", method.as_str());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || matches!(method, Method::Post | Method::Put) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_request(
        method: Method,
        path: &str,
        host: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Vec<u8> {
        let mut bytes = b"(before)".to_vec();
        append_request(&mut bytes, method, path, host, headers, body);
        bytes.split_off(b"(before)".len())
    }

    #[test]
    fn formats_the_request_once_with_its_length() {
        let headers = vec![("X-Test".to_string(), "1".to_string())];
        let get = format_request(Method::Get, "/a?b=c", "example.test", &headers, b"");
        assert_eq!(
            get,
            b"GET /a?b=c HTTP/1.1\r\nHost: example.test\r\nX-Test: 1\r\n\r\n"
        );
        let post = format_request(Method::Post, "/", "h", &[], b"hello");
        assert_eq!(
            post,
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
        );
        let put = format_request(Method::Put, "/", "h", &[], b"");
        assert!(put.ends_with(b"Content-Length: 0\r\n\r\n"));
    }

    #[test]
    fn targets_are_addresses_not_names() {
        assert_eq!(
            parse_target(" 127.0.0.1:8080 ").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(parse_target("[::1]:80").is_ok());
        for bad in [
            "",
            "localhost:80",
            "127.0.0.1",
            "127.0.0.1:0",
            "0.0.0.0:80",
            "1.2.3.4:99999",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
        assert!(
            parse_target("example.com:80")
                .unwrap_err()
                .contains("not resolved")
        );
    }

    #[test]
    fn headers_cannot_break_the_request() {
        assert!(check_header("X-A", "b c").is_ok());
        assert!(check_header("", "x").unwrap_err().contains("needs a name"));
        assert!(check_header("X A", "x").is_err());
        assert!(check_header("X-A", "a\r\nEvil: 1").is_err());
        assert!(check_header("HOST", "x").unwrap_err().contains("host="));
        assert!(check_header("Content-Length", "3").is_err());
    }
}
