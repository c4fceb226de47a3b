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
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body, framed as [`parse_answer`] says.
    pub body: Vec<u8>,
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
pub fn parse_answer(bytes: &[u8], at_eof: bool) -> Result<Option<Answer>, String> {
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
mod tests;
