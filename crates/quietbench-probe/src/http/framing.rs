//! What the load loop asks of a response, whatever the protocol: when it is complete, and how
//! it ended. `http` reads HTTP/1.1 responses ([`ResponseReader`]) or HTTP/2 frames
//! ([`Http2Reader`], which also holds the connection's HTTP/2 state); `tcp` reads raw ones
//! framed by a terminator or a length ([`RawReader`]). The rest of the loop (connections, schedule,
//! timeouts, errors, warm-up) is the same for all.
//!
//! An enum rather than a trait object: each connection owns its reader inline, a call is a
//! match the compiler sees through, and nothing is boxed or allocated per request.

use super::h2::Http2Reader;
use super::response::{BUFFER_BYTES, Malformed, ResponseReader};
use crate::tcp::framing::{RawFraming, RawReader};

/// How a probe's responses are framed; every connection's reader is made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// HTTP/1.1: status line, headers, a body framed by its headers.
    Http,
    /// HTTP/2 over cleartext, with prior knowledge (`http2=true`).
    Http2,
    /// gRPC's unary calls over HTTP/2 (`grpc=`): a call's outcome is its `grpc-status`.
    Grpc,
    /// Raw bytes (`tcp`): up to a terminator, or a fixed length.
    Raw(RawFraming),
}

impl Framing {
    /// The protocol offered by TLS's ALPN.
    pub(crate) fn alpn(self) -> &'static [u8] {
        match self {
            Self::Http2 | Self::Grpc => b"h2",
            _ => b"http/1.1",
        }
    }
}

/// How a complete response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A response to record: HTTP 2xx/3xx, or any raw response.
    Answered,
    /// HTTP 4xx.
    ClientError,
    /// HTTP 5xx.
    ServerError,
    /// A status no request should get: counted as an I/O error.
    Unexpected,
    /// A gRPC call whose `grpc-status` was this code, 1 to 16 (a larger one is read as 2,
    /// UNKNOWN, as gRPC's clients do).
    Grpc(u8),
}

/// One connection's response reader.
pub(crate) enum Reader {
    Http(ResponseReader),
    Http2(Http2Reader),
    Raw(RawReader),
}

impl Reader {
    pub(crate) fn new(framing: Framing) -> Self {
        match framing {
            // Told at each send whether its request is a HEAD.
            Framing::Http => Self::Http(ResponseReader::new(false)),
            Framing::Http2 => Self::Http2(Http2Reader::new(false)),
            Framing::Grpc => Self::Http2(Http2Reader::new(true)),
            Framing::Raw(raw) => Self::Raw(RawReader::new(raw, BUFFER_BYTES)),
        }
    }

    /// A new connection (HTTP/2 starts its state over).
    pub(crate) fn connected(&mut self) {
        if let Self::Http2(r) = self {
            r.connected();
        }
    }

    /// Ready for the next response, to a HEAD request or not (HTTP/1.1's concern alone: HTTP/2
    /// is readied by [`Http2Reader::prepare`], which also writes the request).
    #[inline]
    pub(crate) fn reset_for(&mut self, head_request: bool) {
        match self {
            Self::Http(r) => r.reset_for(head_request),
            Self::Http2(_) => {}
            Self::Raw(r) => r.reset(),
        }
    }

    /// Where the next read goes.
    #[inline]
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        match self {
            Self::Http(r) => r.spare(),
            Self::Http2(r) => r.spare(),
            Self::Raw(r) => r.spare(),
        }
    }

    /// Takes in `n` bytes just read into [`Self::spare`]; true when the response is complete.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) -> Result<bool, Malformed> {
        match self {
            Self::Http(r) => r.advance(n),
            Self::Http2(r) => r.advance(n),
            Self::Raw(r) => r.advance(n),
        }
    }

    /// The stream ended: true when that completes the response.
    pub(crate) fn eof(&mut self) -> Result<bool, Malformed> {
        match self {
            Self::Http(r) => r.eof(),
            Self::Http2(r) => r.eof(),
            Self::Raw(r) => r.eof(),
        }
    }

    /// How the complete response ended.
    pub(crate) fn verdict(&self) -> Verdict {
        let status = match self {
            Self::Http(r) => r.status(),
            Self::Http2(r) => match r.grpc_status() {
                Some(0) => return Verdict::Answered,
                Some(code @ 1..=16) => return Verdict::Grpc(code as u8),
                Some(_) => return Verdict::Grpc(2),
                None => r.status(),
            },
            Self::Raw(_) => return Verdict::Answered,
        };
        match status {
            200..=399 => Verdict::Answered,
            400..=499 => Verdict::ClientError,
            500..=599 => Verdict::ServerError,
            _ => Verdict::Unexpected,
        }
    }

    /// The connection closes after this response (HTTP/1.1's server says so; HTTP/2's sent
    /// GOAWAY, or its stream ids ran out; raw never does).
    pub(crate) fn close(&self) -> bool {
        match self {
            Self::Http(r) => r.close(),
            Self::Http2(r) => r.close(),
            Self::Raw(_) => false,
        }
    }
}
