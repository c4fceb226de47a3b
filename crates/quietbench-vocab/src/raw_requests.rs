//! `tcp`'s requests: the escapes its parameters write bytes with (`request=`,
//! `response_terminator=`), and its request files (`requests=FILE`), one raw request per line in
//! those escapes, for a server whose requests differ (a key-value store's keys) instead of the
//! one request of `request=`.
//!
//! As with `http`'s files ([`crate::requests`]), both ends read the format: the controller reads
//! the file on its machine and checks it once per run, before any host is reached, so a bad
//! line stops the run with its number; it sends the text in
//! [`REQUESTS_TEXT`](crate::requests::REQUESTS_TEXT), and the `tcp` probe parses it again (an
//! agent trusts no caller) and copies every request once into one buffer. The rules live here,
//! once, so that a file the controller passes is one the probe takes.
//!
//! # The format
//!
//! UTF-8 text, one request per line, each line the bytes of one request written as `request=`
//! writes them ([`parse_escaped`]): `\n`, `\r`, `\t`, `\0`, `\\` and `\xNN` for the bytes a
//! line cannot hold. The line's own end (LF or CRLF) is not part of the request, so a request
//! that ends in a newline says so: `PING\n`, `GET user:42\r\n`. Blank lines (nothing but
//! spaces and tabs) and lines whose first non-blank character is `#` are skipped; spaces and
//! tabs elsewhere are the request's own, kept as written (a request that starts with `#` writes
//! it `\x23`). A control character anywhere (but a tab, or the CR of a CRLF) refuses the file:
//! write it as an escape. Each request decodes to at most [`MAX_RAW_REQUEST_BYTES`]; a file has
//! 1 to [`MAX_REQUESTS`](crate::requests::MAX_REQUESTS) requests and at most
//! [`MAX_REQUESTS_TEXT_BYTES`](crate::requests::MAX_REQUESTS_TEXT_BYTES) of text, which bounds
//! them all together too (an escape never decodes to more bytes than it is written in). Every
//! refusal names the line (from 1).

use crate::requests::{for_each_request_line, shown};

/// The longest raw request, decoded: `request=`'s bound, and each line's of a file (as
/// `http`'s body, 64 KiB).
pub const MAX_RAW_REQUEST_BYTES: usize = 64 * 1024;

/// Decodes a parameter's bytes: the text as UTF-8, with `\n`, `\r`, `\t`, `\\`, `\0` and
/// `\xNN` (two hexadecimal digits) for the bytes a command line cannot carry. Any other
/// backslash is refused, saying where, so that a typo is not sent as written.
pub fn parse_escaped(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let at = i - 1;
        let Some(&e) = bytes.get(i) else {
            return Err(format!(
                "ends in a lone \\ (at byte {at}): write \\\\ for a backslash"
            ));
        };
        i += 1;
        out.push(match e {
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'0' => 0,
            b'\\' => b'\\',
            b'x' => {
                let hex = bytes.get(i..i + 2).and_then(|h| {
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                });
                let Some(value) = hex.filter(|_| bytes[i..i + 2].iter().all(u8::is_ascii_hexdigit))
                else {
                    return Err(format!(
                        "\\x at byte {at} needs two hexadecimal digits, e.g. \\x0a"
                    ));
                };
                i += 2;
                value
            }
            _ => {
                let shown = text[at..].chars().take(2).collect::<String>();
                return Err(format!(
                    "unknown escape {shown} at byte {at}: use \\n, \\r, \\t, \\0, \\\\ or \\xNN"
                ));
            }
        });
    }
    Ok(out)
}

/// Parses a raw request file's text (see the module's doc) into each request's bytes, in the
/// file's order; an error says what is wrong and names the line.
pub fn parse_raw_requests(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut requests = Vec::new();
    for_each_request_line(
        text,
        "its bytes with request='s escapes, e.g. GET user:42\\r\\n",
        |line| {
            let bytes = parse_escaped(line).map_err(|why| format!("'{}': {why}", shown(line)))?;
            if bytes.len() > MAX_RAW_REQUEST_BYTES {
                return Err(format!(
                    "'{}': {} bytes decoded, at most {MAX_RAW_REQUEST_BYTES}",
                    shown(line),
                    bytes.len()
                ));
            }
            requests.push(bytes);
            Ok(())
        },
    )?;
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::{MAX_REQUESTS, MAX_REQUESTS_TEXT_BYTES};

    #[test]
    fn a_file_parses_to_each_lines_bytes_its_line_end_left_out() {
        let text = "# keys of Monday\nGET user:42\\r\\n\r\n\n  \t\nSET k v\\n\n\
                    \tindented\\ttab\\x00\\xff \n   # indented comment\n\
                    caf\u{e9}\\\\\\n\r\nPING";
        let requests = parse_raw_requests(text).unwrap();
        let want: [&[u8]; 5] = [
            b"GET user:42\r\n",
            b"SET k v\n",
            b"\tindented\ttab\x00\xff ",
            "caf\u{e9}\\\n".as_bytes(),
            b"PING",
        ];
        assert_eq!(requests, want);
        // A request of exactly the most bytes is taken, written with escapes or not.
        let longest = "a".repeat(MAX_RAW_REQUEST_BYTES - 1) + "\\n";
        assert_eq!(
            parse_raw_requests(&longest).unwrap()[0].len(),
            MAX_RAW_REQUEST_BYTES
        );
        assert_eq!(
            parse_raw_requests("\\x23 not a comment").unwrap()[0][0],
            b'#'
        );
    }

    #[test]
    fn every_bad_file_is_refused_naming_its_line() {
        let long = format!("PING\\n\n{}\\n\n", "a".repeat(MAX_RAW_REQUEST_BYTES));
        let cases: &[(&str, &str)] = &[
            ("", "no requests"),
            ("# only\r\n\n \t \n", "no requests: every line is blank"),
            ("", "e.g. GET user:42\\r\\n"),
            (
                "PING\\n\n# fine\nGET \\q\\n\n",
                "line 3: 'GET \\q\\n': unknown escape \\q at byte 4",
            ),
            (
                "A\\n\nB\\x4\n",
                "line 2: 'B\\x4': \\x at byte 1 needs two hexadecimal",
            ),
            ("A\\n\\", "line 1: 'A\\n\\': ends in a lone \\ (at byte 3)"),
            ("A\\n\nB\rC\\n\n", "line 2: control character 0x0d"),
            ("A\\n\n\nB\x00\n", "line 3: control character 0x00"),
            (&long, "line 2: 'aaaa"),
            (&long, "65537 bytes decoded, at most 65536"),
        ];
        for (text, expected) in cases {
            let err = parse_raw_requests(text).unwrap_err();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let many = "PING\\n\n".repeat(MAX_REQUESTS + 1);
        let err = parse_raw_requests(&many).unwrap_err();
        assert!(
            err.starts_with(&format!("line {}: more than 100000", MAX_REQUESTS + 1)),
            "{err}"
        );
        assert_eq!(
            parse_raw_requests(&"PING\\n\r\n".repeat(MAX_REQUESTS))
                .unwrap()
                .len(),
            MAX_REQUESTS
        );
        let large = "a".repeat(MAX_REQUESTS_TEXT_BYTES + 1);
        let err = parse_raw_requests(&large).unwrap_err();
        assert!(err.contains("at most 1048576"), "{err}");
    }

    #[test]
    fn escapes_give_the_bytes_and_bad_ones_are_refused_saying_where() {
        assert_eq!(parse_escaped("PING\\n").unwrap(), b"PING\n");
        assert_eq!(
            parse_escaped("a\\r\\n\\t\\0\\\\\\x7F\\xfe").unwrap(),
            b"a\r\n\t\0\\\x7f\xfe"
        );
        assert_eq!(parse_escaped("é").unwrap(), "é".as_bytes());
        let cases = [
            ("PING\\", "lone \\ (at byte 4)"),
            ("a\\q", "unknown escape \\q at byte 1"),
            ("\\x4", "\\x at byte 0 needs two hexadecimal digits"),
            ("\\xg0", "two hexadecimal digits"),
            ("\\x+1", "two hexadecimal digits"),
            ("\\é", "unknown escape \\é"),
        ];
        for (text, want) in cases {
            let err = parse_escaped(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
