//! What the load loop asks of a response, whatever the protocol: when it is complete, and how
//! it ended. `http` reads HTTP/1.1 responses ([`ResponseReader`]); `tcp` reads raw ones framed
//! by a terminator or a length ([`RawReader`]). The rest of the loop (connections, schedule,
//! timeouts, errors, warm-up) is the same for both.
//!
//! An enum rather than a trait object: each connection owns its reader inline, a call is a
//! match the compiler sees through, and nothing is boxed or allocated per request.

use super::response::{BUFFER_BYTES, Malformed, ResponseReader};
use crate::tcp::framing::{RawFraming, RawReader};

/// How a probe's responses are framed; every connection's reader is made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// HTTP/1.1: status line, headers, a body framed by its headers.
    Http,
    /// Raw bytes (`tcp`): up to a terminator, or a fixed length.
    Raw(RawFraming),
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
}

/// One connection's response reader.
pub(crate) enum Reader {
    Http(ResponseReader),
    Raw(RawReader),
}

impl Reader {
    pub(crate) fn new(framing: Framing) -> Self {
        match framing {
            // Told at each send whether its request is a HEAD.
            Framing::Http => Self::Http(ResponseReader::new(false)),
            Framing::Raw(raw) => Self::Raw(RawReader::new(raw, BUFFER_BYTES)),
        }
    }

    /// Ready for the next response, to a HEAD request or not (HTTP's concern alone).
    #[inline]
    pub(crate) fn reset_for(&mut self, head_request: bool) {
        match self {
            Self::Http(r) => r.reset_for(head_request),
            Self::Raw(r) => r.reset(),
        }
    }

    /// Where the next read goes.
    #[inline]
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        match self {
            Self::Http(r) => r.spare(),
            Self::Raw(r) => r.spare(),
        }
    }

    /// Takes in `n` bytes just read into [`Self::spare`]; true when the response is complete.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) -> Result<bool, Malformed> {
        match self {
            Self::Http(r) => r.advance(n),
            Self::Raw(r) => r.advance(n),
        }
    }

    /// The stream ended: true when that completes the response.
    pub(crate) fn eof(&mut self) -> Result<bool, Malformed> {
        match self {
            Self::Http(r) => r.eof(),
            Self::Raw(r) => r.eof(),
        }
    }

    /// How the complete response ended.
    pub(crate) fn verdict(&self) -> Verdict {
        match self {
            Self::Http(r) => match r.status() {
                200..=399 => Verdict::Answered,
                400..=499 => Verdict::ClientError,
                500..=599 => Verdict::ServerError,
                _ => Verdict::Unexpected,
            },
            Self::Raw(_) => Verdict::Answered,
        }
    }

    /// The server closes the connection after this response (HTTP says so; raw never does).
    pub(crate) fn close(&self) -> bool {
        match self {
            Self::Http(r) => r.close(),
            Self::Raw(_) => false,
        }
    }
}
