//! EC2 instance identity from the instance metadata service (IMDSv2).
//!
//! Results are split by instance type, AZ and placement, which only IMDS knows. The client is a
//! small HTTP/1.1 client over `std::net::TcpStream` rather than an HTTP crate: it makes a
//! handful of requests to one link-local address, and every byte and every wait of it must be
//! bounded (the agent asks at start-up, and a machine off EC2 must not hang on it).
//!
//! Nothing is sent anywhere unless local evidence says this is EC2 (see [`looks_like_ec2`]) or
//! the endpoint is a loopback address (tests): off EC2, 169.254.169.254 may be someone else's
//! service, and some networks forbid sending it anything.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::HostRoot;
use crate::kernel::{HypervisorEvidence, read_hypervisor_evidence};

/// Where and how long to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImdsConfig {
    /// The IMDS address: 169.254.169.254:80 on EC2.
    pub endpoint: SocketAddr,
    /// The limit for each request, from connecting to the last byte of the answer.
    pub timeout: Duration,
}

impl Default for ImdsConfig {
    /// 169.254.169.254:80 with 300 ms per request: IMDS answers in about a millisecond, so a
    /// slow answer means there is no IMDS, and start-up should not wait on it.
    fn default() -> Self {
        Self {
            endpoint: SocketAddr::from(([169, 254, 169, 254], 80)),
            timeout: Duration::from_millis(300),
        }
    }
}

/// What IMDS says about this instance. A field IMDS does not have (404) is `None`: most
/// instances have no placement group, host id or partition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct InstanceIdentity {
    /// `instance-id`, e.g. `i-0123456789abcdef0`.
    pub instance_id: Option<String>,
    /// `instance-type`, e.g. `c7i.large`.
    pub instance_type: Option<String>,
    /// `placement/availability-zone`, e.g. `eu-west-1a` (names differ between accounts).
    pub availability_zone: Option<String>,
    /// `placement/availability-zone-id`, e.g. `euw1-az1` (the same in every account).
    pub availability_zone_id: Option<String>,
    /// `ami-id`.
    pub ami_id: Option<String>,
    /// `placement/group-name`: the placement group.
    pub placement_group: Option<String>,
    /// `placement/host-id`: the Dedicated Host.
    pub host_id: Option<String>,
    /// `placement/partition-number`, in a partition placement group.
    pub partition_number: Option<String>,
}

/// Asking IMDS failed.
#[derive(Debug, thiserror::Error)]
pub enum ImdsError {
    /// No TCP connection.
    #[error("cannot connect to IMDS at {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No complete answer within the time-out.
    #[error("IMDS at {endpoint} did not answer {what} within {timeout:?}")]
    Timeout {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The request, e.g. `GET /latest/meta-data/instance-id`.
        what: String,
        /// The time-out.
        timeout: Duration,
    },
    /// The connection failed part-way.
    #[error("IMDS at {endpoint}: {what} failed: {source}")]
    Io {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The request.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The answer is not HTTP as IMDS speaks it.
    #[error("IMDS at {endpoint} sent a malformed answer to {what}: {detail}")]
    Malformed {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The request.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// The answer exceeded the size limit.
    #[error("IMDS at {endpoint} sent more than {limit} bytes for {what}; IMDS answers are tiny")]
    TooLarge {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The request.
        what: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// An HTTP status other than 200 (and 404 for an optional field).
    #[error("IMDS at {endpoint} answered HTTP {status} to {what}{}", status_hint(*status))]
    Status {
        /// The endpoint.
        endpoint: SocketAddr,
        /// The request.
        what: String,
        /// The HTTP status.
        status: u16,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 => " (the session token was missing, invalid or expired)",
        403 => {
            " (IMDS is disabled for this instance: enable it with `aws ec2 modify-instance-metadata-options --http-endpoint enabled`)"
        }
        400 => " (the token request was refused; is the hop limit too low for a container?)",
        _ => "",
    }
}

/// The largest answer accepted. IMDS values are a few dozen bytes; 64 KiB bounds memory if
/// something else answers on the address.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Token lifetime asked for: the maximum, six hours. Only a handful of requests use it.
const TOKEN_TTL_SECONDS: &str = "21600";

/// Where one IMDS field is stored.
type Slot = fn(&mut InstanceIdentity) -> &mut Option<String>;

/// The fields asked for, with where each goes.
const FIELDS: [(&str, Slot); 8] = [
    ("instance-id", |i| &mut i.instance_id),
    ("instance-type", |i| &mut i.instance_type),
    ("placement/availability-zone", |i| &mut i.availability_zone),
    ("placement/availability-zone-id", |i| {
        &mut i.availability_zone_id
    }),
    ("ami-id", |i| &mut i.ami_id),
    ("placement/group-name", |i| &mut i.placement_group),
    ("placement/host-id", |i| &mut i.host_id),
    ("placement/partition-number", |i| &mut i.partition_number),
];

/// Asks IMDS for the instance identity with IMDSv2: a session token from
/// `PUT /latest/api/token`, then one `GET` per field. Each request is bounded by
/// `cfg.timeout`. This always talks to `cfg.endpoint`; callers that must not touch the network
/// off EC2 use [`read_instance_identity`].
pub fn query_imds(cfg: &ImdsConfig) -> Result<InstanceIdentity, ImdsError> {
    let token_req = Request {
        method: "PUT",
        path: "/latest/api/token",
        header: ("X-aws-ec2-metadata-token-ttl-seconds", TOKEN_TTL_SECONDS),
    };
    let answer = send(cfg, &token_req)?;
    if answer.status != 200 {
        return Err(token_req.status_error(cfg, answer.status));
    }
    let token = String::from_utf8(answer.body)
        .ok()
        .map(|t| t.trim().to_string())
        // The token goes back in a header: refuse anything that could break the request.
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| token_req.malformed(cfg, "the token is empty or not printable ASCII"))?;

    let mut identity = InstanceIdentity::default();
    for (field, slot) in FIELDS {
        let path = format!("/latest/meta-data/{field}");
        let req = Request {
            method: "GET",
            path: &path,
            header: ("X-aws-ec2-metadata-token", &token),
        };
        let answer = send(cfg, &req)?;
        *slot(&mut identity) = match answer.status {
            200 => Some(
                String::from_utf8(answer.body)
                    .map_err(|_| req.malformed(cfg, "the value is not UTF-8"))?
                    .trim()
                    .to_string(),
            ),
            404 => None,
            status => return Err(req.status_error(cfg, status)),
        };
    }
    Ok(identity)
}

/// Whether local evidence says this machine is an EC2 instance, without any network I/O:
/// DMI naming Amazon EC2 (Nitro), an `i-…` board asset tag (Nitro puts the instance id there),
/// a Xen uuid or DMI product uuid starting with `ec2`, or an Amazon Xen BIOS.
pub fn looks_like_ec2(root: &HostRoot) -> bool {
    let evidence = read_hypervisor_evidence(root, &mut Vec::new());
    // product_uuid is readable by root only; an unprivileged agent relies on the rest.
    let uuid = [
        "/sys/class/dmi/id/product_uuid",
        "/sys/devices/virtual/dmi/id/product_uuid",
    ]
    .iter()
    .find_map(|p| root.read(p).ok());
    is_ec2_evidence(&evidence, uuid.as_deref())
}

/// The decision of [`looks_like_ec2`], on evidence already read.
pub fn is_ec2_evidence(e: &HypervisorEvidence, dmi_product_uuid: Option<&str>) -> bool {
    let starts_ec2 = |s: &str| s.trim().to_ascii_lowercase().starts_with("ec2");
    let instance_tag = e.dmi_board_asset_tag.as_deref().is_some_and(|t| {
        t.trim()
            .strip_prefix("i-")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    e.dmi_mentions("Amazon EC2")
        || instance_tag
        || e.sys_hypervisor_uuid.as_deref().is_some_and(starts_ec2)
        || dmi_product_uuid.is_some_and(starts_ec2)
        || e.dmi_bios_version
            .as_deref()
            .is_some_and(|v| v.to_ascii_lowercase().contains("amazon"))
}

/// The instance identity, or `Ok(None)` without any network I/O when this does not look like
/// EC2 and the endpoint is not a loopback address.
pub fn read_instance_identity(
    root: &HostRoot,
    cfg: &ImdsConfig,
) -> Result<Option<InstanceIdentity>, ImdsError> {
    if !cfg.endpoint.ip().is_loopback() && !looks_like_ec2(root) {
        return Ok(None);
    }
    query_imds(cfg).map(Some)
}

struct Request<'a> {
    method: &'a str,
    path: &'a str,
    header: (&'a str, &'a str),
}

impl Request<'_> {
    fn what(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    fn malformed(&self, cfg: &ImdsConfig, detail: impl Into<String>) -> ImdsError {
        ImdsError::Malformed {
            endpoint: cfg.endpoint,
            what: self.what(),
            detail: detail.into(),
        }
    }

    fn status_error(&self, cfg: &ImdsConfig, status: u16) -> ImdsError {
        ImdsError::Status {
            endpoint: cfg.endpoint,
            what: self.what(),
            status,
        }
    }
}

/// A parsed HTTP answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// One request on its own connection (`Connection: close`), bounded by `cfg.timeout` in all.
fn send(cfg: &ImdsConfig, req: &Request) -> Result<Answer, ImdsError> {
    let deadline = Instant::now() + cfg.timeout;
    let timeout = || ImdsError::Timeout {
        endpoint: cfg.endpoint,
        what: req.what(),
        timeout: cfg.timeout,
    };
    let io = |source: std::io::Error| {
        if matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            timeout()
        } else {
            ImdsError::Io {
                endpoint: cfg.endpoint,
                what: req.what(),
                source,
            }
        }
    };
    // Socket time-outs must be non-zero; a spent deadline is a time-out of our own.
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(timeout)
    };
    let mut stream = TcpStream::connect_timeout(&cfg.endpoint, remaining()?).map_err(|source| {
        if source.kind() == ErrorKind::TimedOut {
            timeout()
        } else {
            ImdsError::Connect {
                endpoint: cfg.endpoint,
                source,
            }
        }
    })?;
    let text = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: quietbench\r\n{}: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        req.method, req.path, cfg.endpoint, req.header.0, req.header.1
    );
    stream.set_write_timeout(Some(remaining()?)).map_err(io)?;
    stream.write_all(text.as_bytes()).map_err(io)?;

    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        stream.set_read_timeout(Some(remaining()?)).map_err(io)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => return Err(io(err)),
        };
        let at_eof = n == 0;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE_BYTES {
            return Err(ImdsError::TooLarge {
                endpoint: cfg.endpoint,
                what: req.what(),
                limit: MAX_RESPONSE_BYTES,
            });
        }
        match parse_answer(&buf, at_eof) {
            Ok(Some(answer)) => return Ok(answer),
            Ok(None) if !at_eof => {}
            Ok(None) => return Err(req.malformed(cfg, "the connection closed mid-answer")),
            Err(detail) => return Err(req.malformed(cfg, detail)),
        }
    }
}

/// Parses an HTTP/1.x answer. `Ok(None)`: incomplete so far. The body is framed by
/// Content-Length or, without one, by the connection closing (we ask for `Connection: close`).
/// Chunked encoding is refused: IMDS always sends Content-Length, so chunks mean a stranger.
fn parse_answer(bytes: &[u8], at_eof: bool) -> Result<Option<Answer>, String> {
    let Some(head_len) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        if !bytes.is_empty() && !b"HTTP/".starts_with(&bytes[..bytes.len().min(5)]) {
            return Err(format!(
                "it does not start with HTTP/: {:?}",
                preview(bytes)
            ));
        }
        return if at_eof {
            Err(format!("no end of headers in {} bytes", bytes.len()))
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&bytes[..head_len])
        .map_err(|_| "the headers are not text".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.")
        || code.len() != 3
        || !code.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!(
            "bad status line {:?}",
            preview(status_line.as_bytes())
        ));
    }
    let status: u16 = code.parse().map_err(|_| format!("bad status {code:?}"))?;
    let mut content_length: Option<usize> = None;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {:?}", preview(line.as_bytes())))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let len: usize = value
                .parse()
                .map_err(|_| format!("bad Content-Length {value:?}"))?;
            if content_length.is_some_and(|l| l != len) {
                return Err("two different Content-Length headers".to_string());
            }
            content_length = Some(len);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!("Transfer-Encoding {value:?} is not supported"));
        }
    }
    let body = &bytes[head_len + 4..];
    match content_length {
        Some(len) if len > MAX_RESPONSE_BYTES => Err(format!(
            "Content-Length {len} is over the {MAX_RESPONSE_BYTES}-byte limit"
        )),
        Some(len) if body.len() >= len => Ok(Some(Answer {
            status,
            body: body[..len].to_vec(),
        })),
        Some(len) if at_eof => Err(format!(
            "the connection closed after {} of {len} body bytes",
            body.len()
        )),
        Some(_) => Ok(None),
        None if at_eof => Ok(Some(Answer {
            status,
            body: body.to_vec(),
        })),
        None => Ok(None),
    }
}

/// The start of some bytes, for error messages.
fn preview(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::dev_vm;
    use std::io::BufRead;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What the test server saw of one request.
    struct Seen {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// A server on 127.0.0.1 that answers each connection with `answer(request)`; it runs
    /// until the test process exits.
    fn serve(answer: impl Fn(&Seen) -> Vec<u8> + Send + 'static) -> SocketAddr {
        serve_with(None, answer)
    }

    /// Like [`serve`], writing the answer one byte per `byte_delay` when given.
    fn serve_with(
        byte_delay: Option<Duration>,
        answer: impl Fn(&Seen) -> Vec<u8> + Send + 'static,
    ) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::Builder::new()
            .name("imds-test-server".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                    let mut first = String::new();
                    if reader.read_line(&mut first).is_err() {
                        continue;
                    }
                    let mut words = first.split_whitespace();
                    let method = words.next().unwrap_or_default().to_string();
                    let path = words.next().unwrap_or_default().to_string();
                    let mut headers = Vec::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some((n, v)) = line.split_once(':') {
                            headers.push((n.to_string(), v.trim().to_string()));
                        }
                    }
                    let seen = Seen {
                        method,
                        path,
                        headers,
                    };
                    let bytes = answer(&seen);
                    match byte_delay {
                        None => {
                            let _ = stream.write_all(&bytes);
                        }
                        Some(delay) => {
                            for b in bytes {
                                std::thread::sleep(delay);
                                if stream.write_all(&[b]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                }
            })
            .unwrap();
        addr
    }

    fn http(status: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: EC2ws\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    const TOKEN: &str = "AQAEAFyR3nxTestTokenOfIMDSv2==";

    /// Answers as IMDSv2 is documented to: a token for a PUT with a TTL header (400 without),
    /// 401 for a GET without the token, 404 for what the instance does not have.
    fn imdsv2(seen: &Seen) -> Vec<u8> {
        const NOT_FOUND: &str =
            "<?xml version=\"1.0\"?><html><body><h1>404 - Not Found</h1></body></html>";
        match (seen.method.as_str(), seen.path.as_str()) {
            ("PUT", "/latest/api/token") => {
                match seen.header("X-aws-ec2-metadata-token-ttl-seconds") {
                    Some("21600") => http("200 OK", TOKEN),
                    _ => http("400 Bad Request", ""),
                }
            }
            ("GET", _) if seen.header("X-aws-ec2-metadata-token") != Some(TOKEN) => {
                http("401 Unauthorized", "")
            }
            ("GET", "/latest/meta-data/instance-id") => http("200 OK", "i-0a1b2c3d4e5f67890"),
            ("GET", "/latest/meta-data/instance-type") => http("200 OK", "c7i.large"),
            ("GET", "/latest/meta-data/ami-id") => http("200 OK", "ami-0abcdef1234567890"),
            ("GET", "/latest/meta-data/placement/availability-zone") => {
                http("200 OK", "eu-west-1b")
            }
            ("GET", "/latest/meta-data/placement/availability-zone-id") => {
                http("200 OK", "euw1-az3")
            }
            _ => http("404 Not Found", NOT_FOUND),
        }
    }

    fn cfg(endpoint: SocketAddr, ms: u64) -> ImdsConfig {
        ImdsConfig {
            endpoint,
            timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn reads_the_identity_with_a_token_and_absent_fields_as_none() {
        let addr = serve(imdsv2);
        let id = query_imds(&cfg(addr, 2000)).unwrap();
        assert_eq!(
            id,
            InstanceIdentity {
                instance_id: Some("i-0a1b2c3d4e5f67890".into()),
                instance_type: Some("c7i.large".into()),
                availability_zone: Some("eu-west-1b".into()),
                availability_zone_id: Some("euw1-az3".into()),
                ami_id: Some("ami-0abcdef1234567890".into()),
                placement_group: None,
                host_id: None,
                partition_number: None,
            }
        );
    }

    #[test]
    fn without_the_token_the_server_says_401_and_the_error_says_why() {
        let addr = serve(imdsv2);
        let c = cfg(addr, 2000);
        let req = Request {
            method: "GET",
            path: "/latest/meta-data/instance-id",
            header: ("X-Other", "1"),
        };
        assert_eq!(send(&c, &req).unwrap().status, 401);
        // A server that refuses every token.
        let addr = serve(|s| {
            if s.method == "PUT" {
                http("200 OK", "t")
            } else {
                http("401 Unauthorized", "")
            }
        });
        let err = query_imds(&cfg(addr, 2000)).unwrap_err();
        assert!(
            matches!(err, ImdsError::Status { status: 401, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("token"), "{err}");
    }

    #[test]
    fn a_server_that_never_answers_times_out_in_time() {
        // Connections complete in the backlog but nobody accepts or answers.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let timeout = Duration::from_millis(300);
        let start = Instant::now();
        let err = query_imds(&cfg(listener.local_addr().unwrap(), 300)).unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, ImdsError::Timeout { .. }), "{err}");
        assert!(took < 2 * timeout, "took {took:?}");
        drop(listener);
    }

    #[test]
    fn a_server_that_drips_bytes_still_times_out_in_time() {
        // A byte every 20 ms: each read succeeds, but the answer takes seconds in all.
        let addr = serve_with(Some(Duration::from_millis(20)), imdsv2);
        let start = Instant::now();
        let err = query_imds(&cfg(addr, 300)).unwrap_err();
        assert!(matches!(err, ImdsError::Timeout { .. }), "{err}");
        assert!(
            start.elapsed() < Duration::from_millis(600),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let answers: [&[u8]; 6] = [
            b"\x00\xffgarbage\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
        ];
        for answer in answers {
            let addr = serve(move |_| answer.to_vec());
            let err = query_imds(&cfg(addr, 2000)).unwrap_err();
            assert!(
                matches!(err, ImdsError::Malformed { .. }),
                "{answer:?}: {err}"
            );
            assert!(err.to_string().contains("PUT /latest/api/token"), "{err}");
        }
        let addr = serve(|_| Vec::new()); // closes at once
        assert!(matches!(
            query_imds(&cfg(addr, 2000)).unwrap_err(),
            ImdsError::Malformed { .. }
        ));
    }

    #[test]
    fn answers_are_bounded_in_size() {
        let addr = serve(|_| {
            let mut big = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            big.resize(200 * 1024, b'x');
            big
        });
        let err = query_imds(&cfg(addr, 2000)).unwrap_err();
        assert!(matches!(err, ImdsError::TooLarge { .. }), "{err}");
        let addr = serve(|_| http("200 OK", &"y".repeat(70 * 1024)));
        assert!(query_imds(&cfg(addr, 2000)).is_err());
    }

    #[test]
    fn a_body_framed_by_close_and_a_token_with_spaces() {
        // No Content-Length: the body runs to the close. A token with a space is refused.
        let addr = serve(|_| b"HTTP/1.0 200 OK\r\n\r\nbad token".to_vec());
        let err = query_imds(&cfg(addr, 2000)).unwrap_err();
        assert!(err.to_string().contains("token"), "{err}");
        assert_eq!(
            parse_answer(b"HTTP/1.1 404 Not Found\r\n\r\nx", true).unwrap(),
            Some(Answer {
                status: 404,
                body: b"x".to_vec()
            })
        );
        assert_eq!(parse_answer(b"HTT", false).unwrap(), None);
        assert_eq!(
            parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\na", false).unwrap(),
            None
        );
    }

    #[test]
    fn the_answer_parser_survives_arbitrary_bytes() {
        // Deterministic xorshift bytes around a real-looking answer, cut at every length.
        let real = http("200 OK", "i-0a1b2c3d4e5f67890");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for round in 0..2000 {
            let mut bytes = real.clone();
            for _ in 0..(round % 8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % bytes.len();
                bytes[at] = (x >> 32) as u8;
            }
            let cut = (x as usize >> 8) % (bytes.len() + 1);
            let _ = parse_answer(&bytes[..cut], round % 2 == 0);
        }
    }

    #[test]
    fn the_development_vm_is_not_ec2() {
        assert!(!looks_like_ec2(&dev_vm()));
    }

    #[test]
    fn off_ec2_nothing_is_sent() {
        // 0.0.0.0 is not loopback but connects to this host, so a request that should not have
        // been made lands here (and leaves no machine) instead of going out.
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let endpoint = SocketAddr::from(([0, 0, 0, 0], port));
        let got = read_instance_identity(&dev_vm(), &cfg(endpoint, 300)).unwrap();
        assert_eq!(got, None);
        assert!(listener.accept().is_err(), "a connection was made");
        // The default endpoint, too, is left alone.
        let got = read_instance_identity(&dev_vm(), &ImdsConfig::default()).unwrap();
        assert_eq!(got, None);
    }

    #[test]
    fn a_loopback_endpoint_is_asked_even_off_ec2() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let addr = serve(move |s| {
            counter.fetch_add(1, Ordering::SeqCst);
            imdsv2(s)
        });
        let got = read_instance_identity(&dev_vm(), &cfg(addr, 2000)).unwrap();
        assert_eq!(got.unwrap().instance_type.as_deref(), Some("c7i.large"));
        assert_eq!(calls.load(Ordering::SeqCst), 1 + FIELDS.len());
    }

    #[test]
    fn ec2_evidence() {
        let none = HypervisorEvidence::default();
        assert!(!is_ec2_evidence(&none, None));
        let nitro = HypervisorEvidence {
            dmi_sys_vendor: Some("Amazon EC2".into()),
            ..none.clone()
        };
        assert!(is_ec2_evidence(&nitro, None));
        let tag = HypervisorEvidence {
            dmi_board_asset_tag: Some("i-0a1b2c3d4e5f67890\n".into()),
            ..none.clone()
        };
        assert!(is_ec2_evidence(&tag, None));
        let xen = HypervisorEvidence {
            sys_hypervisor_uuid: Some("ec2e1916-9099-7caf-fd21-01234abcdef0".into()),
            ..none.clone()
        };
        assert!(is_ec2_evidence(&xen, None));
        assert!(is_ec2_evidence(
            &none,
            Some("EC2E1916-9099-7CAF-FD21-01234ABCDEF0")
        ));
        let other = HypervisorEvidence {
            dmi_sys_vendor: Some("QEMU".into()),
            dmi_board_asset_tag: Some("i-".into()),
            ..none
        };
        assert!(!is_ec2_evidence(&other, Some("4c4c4544-0000")));
    }
}
