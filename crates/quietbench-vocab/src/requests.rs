//! Request files: the requests an `http` trial replays, for a server whose requests differ
//! (the route-search team's queries), instead of the one request of `path=` and `method=`.
//!
//! Both ends read the format: the controller reads the file on its machine (`requests=FILE`)
//! and checks it once per run, before any host is reached, so a bad line stops the run with
//! its number; it sends the text in [`REQUESTS_TEXT`], and the `http` probe parses it again
//! (an agent trusts no caller) and formats every request once. The rules live here, once, so
//! the two checks cannot drift apart: a file the controller passes is one the probe takes.
//! (They were two copies while the controller reached the probe only over the wire.)
//! `tcp`'s files, a raw request per line, are [`crate::raw_requests`]: their lines differ, the
//! rules of the file around them (`for_each_request_line`, private to this crate) are these.
//!
//! # The format
//!
//! UTF-8 text, one request per line:
//!
//! - `PATH`: a GET of PATH, e.g. `/search?from=A&to=B`;
//! - `METHOD PATH`: METHOD one of GET, POST, PUT, HEAD, DELETE in any case (as `method=`),
//!   then spaces or tabs, then PATH;
//! - blank lines, and lines whose first non-blank character is `#`, are skipped; a line may
//!   end in CRLF.
//!
//! PATH is checked as `path=` is ([`check_path`]): it starts with `/`, is printable ASCII
//! without spaces (percent-encode a space as `%20`), at most [`MAX_PATH_BYTES`]. The trial's
//! `body`, `header.NAME` and `host` go with every request. A file has 1 to [`MAX_REQUESTS`]
//! requests and at most [`MAX_REQUESTS_TEXT_BYTES`] of text; a control character anywhere
//! (but a tab, or the CR of a CRLF) refuses it. Every refusal names the line (from 1).

/// The internal parameter carrying a request file's text to the load agent: the controller
/// reads the file on its machine and sends its text here, the one parameter the agent lets
/// past its 16 KiB bound on a value (up to [`MAX_REQUESTS_TEXT_BYTES`]). The record keeps
/// `requests=` as given, never this.
pub const REQUESTS_TEXT: &str = "requests_text";
/// The most requests of one file: a replayed sample of traffic, not a log to stream.
pub const MAX_REQUESTS: usize = 100_000;
/// The most bytes of a file's text. The agent lets [`REQUESTS_TEXT`] (and no other parameter)
/// past its 16 KiB bound up to this.
pub const MAX_REQUESTS_TEXT_BYTES: usize = 1 << 20;
/// The longest path, as most servers' request-line limit (8 KiB).
pub const MAX_PATH_BYTES: usize = 8 * 1024;

/// The methods the `http` probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// HEAD: its response has no body, whatever its headers say.
    Head,
    /// DELETE.
    Delete,
}

impl Method {
    /// A method by name, in any case (`get` is GET).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_uppercase().as_str() {
            "GET" => Ok(Self::Get),
            "POST" => Ok(Self::Post),
            "PUT" => Ok(Self::Put),
            "HEAD" => Ok(Self::Head),
            "DELETE" => Ok(Self::Delete),
            _ => Err("unknown method: use GET, POST, PUT, HEAD or DELETE".into()),
        }
    }

    /// The method's name as a request line carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Head => "HEAD",
            Self::Delete => "DELETE",
        }
    }
}

/// The request target (`path=`, or a file's PATH): origin form, from `/`, printable ASCII
/// without spaces, at most [`MAX_PATH_BYTES`].
pub fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("must start with '/', e.g. /index.html?x=1".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "too long: {} bytes, at most {MAX_PATH_BYTES}",
            path.len()
        ));
    }
    if let Some(c) = path.bytes().find(|b| !(0x21..=0x7e).contains(b)) {
        return Err(format!(
            "byte {c:#04x} is not allowed in a request target: percent-encode spaces and \
             non-ASCII characters"
        ));
    }
    Ok(())
}

/// One request of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRequest<'a> {
    /// The line's METHOD, GET when it gave only PATH.
    pub method: Method,
    /// The line's PATH, checked by [`check_path`].
    pub path: &'a str,
}

/// A line's text for a message: at most 60 characters.
pub(crate) fn shown(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The rules every request file shares, whatever its lines hold (`http`'s here, `tcp`'s in
/// [`crate::raw_requests`]): at most [`MAX_REQUESTS_TEXT_BYTES`] of text; lines split at LF, a
/// CR before it dropped; no control character but a tab; blank lines and `#` comments skipped;
/// 1 to [`MAX_REQUESTS`] requests. Calls `take` with each request's line (its end removed,
/// nothing trimmed) in the file's order, and prefixes its error with the line's number.
/// `a_line_is` ends the refusal of a file without requests, e.g. "PATH or METHOD PATH".
pub(crate) fn for_each_request_line<'a>(
    text: &'a str,
    a_line_is: &str,
    mut take: impl FnMut(&'a str) -> Result<(), String>,
) -> Result<(), String> {
    if text.len() > MAX_REQUESTS_TEXT_BYTES {
        return Err(format!(
            "{} bytes, at most {MAX_REQUESTS_TEXT_BYTES} (1 MiB): replay a sample of the \
             requests, or split them over variants",
            text.len()
        ));
    }
    let mut requests = 0usize;
    for (index, raw) in text.split('\n').enumerate() {
        let at = |why: String| format!("line {}: {why}", index + 1);
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(b) = line
            .bytes()
            .find(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            return Err(at(format!(
                "control character {b:#04x} is not allowed in a request file"
            )));
        }
        let trimmed = line.trim_matches([' ', '\t']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if requests == MAX_REQUESTS {
            return Err(at(format!(
                "more than {MAX_REQUESTS} requests: replay a sample of them"
            )));
        }
        take(line).map_err(at)?;
        requests += 1;
    }
    if requests == 0 {
        return Err(format!(
            "no requests: every line is blank or a # comment; give one request per line, \
             {a_line_is}"
        ));
    }
    Ok(())
}

/// Parses a request file's text (see the module's doc) into its requests, in the file's order;
/// an error says what is wrong and names the line.
pub fn parse_requests(text: &str) -> Result<Vec<FileRequest<'_>>, String> {
    let mut requests = Vec::new();
    for_each_request_line(text, "PATH or METHOD PATH", |line| {
        let line = line.trim_matches([' ', '\t']);
        let mut fields = line.split([' ', '\t']).filter(|f| !f.is_empty());
        let (method, path) = match (fields.next(), fields.next(), fields.next()) {
            (Some(path), None, _) => (Method::Get, path),
            (Some(method), Some(path), None) => (
                Method::parse(method).map_err(|why| format!("'{}': {why}", shown(method)))?,
                path,
            ),
            _ => {
                return Err(format!(
                    "'{}': expected PATH or METHOD PATH, e.g. /search?q=1 or POST /orders \
                     (percent-encode a space in a path as %20)",
                    shown(line)
                ));
            }
        };
        check_path(path).map_err(|why| format!("'{}' {why}", shown(path)))?;
        requests.push(FileRequest { method, path });
        Ok(())
    })?;
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_to_its_requests_in_order() {
        let text = "# routes of Monday\n/search?from=A&to=B\r\n\n  post\t/orders  \n\
                    HEAD /health\n   # indented comment\ndelete /orders/7\n\
                    Put\t\t/x%20y\r\n#/not-a-request\n\t\r\nGET /last";
        let requests = parse_requests(text).unwrap();
        let got: Vec<(&str, &str)> = requests
            .iter()
            .map(|r| (r.method.as_str(), r.path))
            .collect();
        assert_eq!(
            got,
            [
                ("GET", "/search?from=A&to=B"),
                ("POST", "/orders"),
                ("HEAD", "/health"),
                ("DELETE", "/orders/7"),
                ("PUT", "/x%20y"),
                ("GET", "/last"),
            ]
        );
        // A path of exactly the most bytes is taken.
        let longest = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        assert_eq!(parse_requests(&longest).unwrap()[0].path, longest);
    }

    #[test]
    fn every_bad_file_is_refused_naming_its_line() {
        let long = format!("/ok\n/{}\n", "a".repeat(MAX_PATH_BYTES));
        let cases: &[(&str, &str)] = &[
            ("", "no requests"),
            ("# only\n\n   \n", "no requests"),
            (
                "/a\nsearch?q=1\n",
                "line 2: 'search?q=1' must start with '/'",
            ),
            ("/a\n/b\nPATCH /c\n", "line 3: 'PATCH': unknown method"),
            (
                "GET /a b\n",
                "line 1: 'GET /a b': expected PATH or METHOD PATH",
            ),
            ("/ok\n/a\x01b\n", "line 2: control character 0x01"),
            ("/ok\n/a\rb\n", "line 2: control character 0x0d"),
            ("/ok\n/a\x7fb\n", "line 2: control character 0x7f"),
            ("# a\x00 comment\n/ok\n", "line 1: control character 0x00"),
            ("/ok\n\n/caf\u{e9}\n", "line 3: '/café' byte 0xc3"),
            ("GET search\n", "line 1: 'search' must start with '/'"),
            (&long, "line 2: '/aaaaa"),
            (&long, "' too long: 8193 bytes, at most 8192"),
        ];
        for (text, expected) in cases {
            let err = parse_requests(text).unwrap_err();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        // A long line is cut to 60 characters in the message.
        let err = parse_requests(&long).unwrap_err();
        assert!(err.contains(&format!("'/{}…'", "a".repeat(59))), "{err}");

        let many = "/x\n".repeat(MAX_REQUESTS + 1);
        let err = parse_requests(&many).unwrap_err();
        assert!(
            err.starts_with(&format!("line {}: more than 100000", MAX_REQUESTS + 1)),
            "{err}"
        );
        assert_eq!(
            parse_requests(&"/x\n".repeat(MAX_REQUESTS)).unwrap().len(),
            MAX_REQUESTS
        );
        let large = format!("/{}\n", "a".repeat(MAX_REQUESTS_TEXT_BYTES));
        let err = parse_requests(&large).unwrap_err();
        assert!(err.contains("at most 1048576"), "{err}");
    }

    #[test]
    fn methods_and_paths_as_path_and_method_take_them() {
        for (text, method) in [
            ("get", Method::Get),
            (" POST ", Method::Post),
            ("Put", Method::Put),
            ("head", Method::Head),
            ("DELETE", Method::Delete),
        ] {
            let parsed = Method::parse(text).unwrap();
            assert_eq!(parsed, method);
            assert_eq!(Method::parse(parsed.as_str()), Ok(parsed));
        }
        assert!(
            Method::parse("PATCH")
                .unwrap_err()
                .contains("unknown method")
        );
        assert!(check_path("/ok?x=1").is_ok());
        assert!(
            check_path("no-slash")
                .unwrap_err()
                .contains("start with '/'")
        );
        assert!(check_path("/a b").unwrap_err().contains("byte 0x20"));
        assert!(check_path(&format!("/{}", "a".repeat(MAX_PATH_BYTES))).is_err());
    }
}
