//! HTTP/2 over cleartext TCP with prior knowledge (`http2=true`; RFC 9113 §3.3, h2load's and
//! oha's `--http2` against an `http://` URL): the connection starts with the client preface,
//! no Upgrade from HTTP/1.1 and no TLS.
//!
//! Written by hand rather than with the `h2` crate, for the reason the HTTP/1.1 loop is: `h2`
//! allocates a request and a header map per request and needs a runtime to poll it, and the
//! load loop must not allocate, lock or await per request. HTTP/2 framing is small, and a load
//! generator needs little of it:
//!
//! - **One stream in flight per connection**, as the HTTP/1.1 loop has one request (h2load's
//!   default `-m 1`): more concurrency is more connections. Stream ids count up by two; a
//!   connection whose ids run out is closed after its last response and reopened.
//! - **Requests are encoded once** ([`append_request`]): a HEADERS frame (and a DATA frame
//!   for a body) with stream id 0, whose ids [`Http2Reader::prepare`] fills in for each send.
//!   The header block uses only HPACK's static table and literals that are never indexed, so
//!   no encoder state exists to keep between requests.
//! - **Responses are read as a stream of frames** through a fixed buffer, every byte once,
//!   split anywhere. Our SETTINGS set the server's HPACK dynamic table to size 0, so a response
//!   header block can be skipped after its first field, which must be `:status` (pseudo-headers
//!   come first, RFC 9113 §8.3): only that field is decoded, Huffman-coded or not. A status
//!   sent by reference into a dynamic table the server was told not to have is an error.
//! - **Flow control is opened wide**: every stream's window is 2^31 − 1 (SETTINGS), the
//!   connection's is raised to it at the start and topped up with a WINDOW_UPDATE each time a
//!   gigabyte of DATA has arrived. Our own DATA (a body) is one frame of at most
//!   [`MAX_BODY_BYTES`], under the default window of 65 535 and frame size of 16 384, so the
//!   server's settings never stall a send.
//! - SETTINGS and PING are acknowledged; GOAWAY closes the connection after the response in
//!   flight, or fails it if the server says it will not be processed; RST_STREAM fails it;
//!   PUSH_PROMISE is refused (our SETTINGS disable push). Acknowledgements wait in a small
//!   buffer the loop writes out between requests, or at once while a response is awaited.

mod hpack;

use super::request::Method;
use super::response::{BUFFER_BYTES, Malformed};
use hpack::{
    AUTHORITY, CONTENT_LENGTH, METHOD_GET, METHOD_POST, PATH, PATH_ROOT, SCHEME_HTTP,
    block_grpc_status, block_status, put_int, put_named, put_str,
};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

/// Frame flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest frame either side may send without a SETTINGS raising it, and the most we take.
const MAX_FRAME_BYTES: usize = 16_384;
/// The largest window (RFC 9113 §6.9.1).
const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The connection's window at the start (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
/// DATA received before the connection's window is topped up again.
const REFILL_BYTES: u64 = 1 << 30;
/// The largest stream id.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// The largest request body with `http2=true`: one DATA frame, under the server's default
/// window and frame size.
pub(crate) const MAX_BODY_BYTES: usize = MAX_FRAME_BYTES;
/// Bytes of a frame's payload kept for a look: a HEADERS frame's padding length, priority and
/// first field (`:status`, at most about 20 bytes after a table size update) or, with `grpc=`,
/// the start of the block that ends a call, where `grpc-status` is (tonic sends it first, after
/// `:status` and `content-type` in a Trailers-Only response: about 30 bytes); PING's 8 bytes,
/// GOAWAY's last stream id.
const KEEP_BYTES: usize = 256;
/// Acknowledgements waiting to be written. A server that sends more PINGs than this holds
/// while we send nothing is misbehaving: the connection fails.
const CONTROL_BYTES: usize = 512;

/// Room a send needs beside its request: the connection's opening (64 bytes) and the
/// acknowledgements waiting.
pub(crate) const ROOM_BYTES: usize = 64 + CONTROL_BYTES;

/// The frames that open a connection: the preface, our SETTINGS (no HPACK dynamic table, no
/// push, the largest stream window) and the connection window raised to its largest.
fn opening(out: &mut Vec<u8>) {
    out.extend_from_slice(PREFACE);
    let settings: [(u16, u32); 3] = [(0x1, 0), (0x2, 0), (0x4, MAX_WINDOW)];
    frame_head(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
    window_update(out, MAX_WINDOW - DEFAULT_WINDOW);
}

fn frame_head(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(length as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

fn window_update(out: &mut Vec<u8>, increment: u32) {
    frame_head(out, 4, WINDOW_UPDATE, 0, 0);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Header names HTTP/2 forbids in a request (RFC 9113 §8.2.2), and why.
const CONNECTION_SPECIFIC: &[&str] = &["keep-alive", "proxy-connection", "upgrade", "te"];

/// Whether a user's header may go in an HTTP/2 request; the HTTP/1.1 rules
/// ([`super::request::check_header`]) are checked first.
pub(crate) fn check_header(name: &str) -> Result<(), String> {
    if CONNECTION_SPECIFIC
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
    {
        return Err(format!(
            "{name} is a connection-specific header, which HTTP/2 forbids (RFC 9113 8.2.2)"
        ));
    }
    Ok(())
}

/// Appends one request's frames to `out` with stream id 0 (filled in at each send): HEADERS
/// with `:method`, `:scheme` http, `:authority` (the Host header's value), `:path`, the
/// user's headers (names in lower case, as HTTP/2 requires), `content-length` where HTTP/1.1
/// would send one; then the body in one DATA frame, which ends the stream (or HEADERS does).
/// Refused when the header block does not fit in one frame or the body in one DATA frame.
pub(crate) fn append_request(
    out: &mut Vec<u8>,
    method: Method,
    path: &str,
    authority: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "with http2=true a body is at most {MAX_BODY_BYTES} bytes (one DATA frame within \
             the server's initial window); this one is {}",
            body.len()
        ));
    }
    let mut block = Vec::with_capacity(64 + path.len() + authority.len());
    match method {
        Method::Get => block.push(0x80 | METHOD_GET),
        Method::Post => block.push(0x80 | METHOD_POST),
        other => put_named(&mut block, 2, other.as_str().as_bytes()),
    }
    block.push(0x80 | SCHEME_HTTP);
    if path == "/" {
        block.push(0x80 | PATH_ROOT);
    } else {
        put_named(&mut block, PATH, path.as_bytes());
    }
    put_named(&mut block, AUTHORITY, authority.as_bytes());
    for (name, value) in headers {
        put_int(&mut block, 0x10, 4, 0);
        put_str(&mut block, name.to_ascii_lowercase().as_bytes());
        put_str(&mut block, value.as_bytes());
    }
    if !body.is_empty() || matches!(method, Method::Post | Method::Put) {
        put_named(
            &mut block,
            CONTENT_LENGTH,
            body.len().to_string().as_bytes(),
        );
    }
    if block.len() > MAX_FRAME_BYTES {
        return Err(format!(
            "with http2=true the request's headers must fit one {MAX_FRAME_BYTES}-byte frame; \
             they take {} bytes",
            block.len()
        ));
    }
    let end = if body.is_empty() { END_STREAM } else { 0 };
    frame_head(out, block.len(), HEADERS, END_HEADERS | end, 0);
    out.extend_from_slice(&block);
    if !body.is_empty() {
        frame_head(out, body.len(), DATA, END_STREAM, 0);
        out.extend_from_slice(body);
    }
    Ok(())
}

/// Sets the stream id of every frame in `frames` (a request from [`append_request`]).
fn set_stream(frames: &mut [u8], stream: u32) {
    let mut at = 0;
    while at + 9 <= frames.len() {
        let length = usize::from(frames[at]) << 16
            | usize::from(frames[at + 1]) << 8
            | usize::from(frames[at + 2]);
        frames[at + 5..at + 9].copy_from_slice(&stream.to_be_bytes());
        at += 9 + length;
    }
}

/// The reader on arbitrary bytes, for the fuzz target (crates/quietbench-fuzz): the first byte
/// sets the size of each read (1 to 256 bytes), the rest is fed as a server's bytes, a new
/// request is prepared after each complete response, and the first refusal ends it. Malformed
/// input must be refused, never panic.
pub(crate) fn fuzz(data: &[u8]) {
    let Some((&piece, server)) = data.split_first() else {
        return;
    };
    let mut request = Vec::new();
    if append_request(&mut request, Method::Get, "/", "fuzz", &[], b"").is_err() {
        return;
    }
    let mut reader = Http2Reader::new(piece & 1 == 1);
    let mut out = Vec::new();
    reader.prepare(&mut out, &request);
    for chunk in server.chunks(usize::from(piece) + 1) {
        let spare = reader.spare();
        let n = chunk.len().min(spare.len());
        spare[..n].copy_from_slice(&chunk[..n]);
        match reader.advance(n) {
            Ok(true) => {
                if reader.close() {
                    return;
                }
                reader.prepare(&mut out, &request);
            }
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

/// One connection's HTTP/2 state, and its reader of one response at a time.
pub(crate) struct Http2Reader {
    buffer: Box<[u8]>,
    /// The frame header being read, and how much of it has arrived.
    head: [u8; 9],
    head_len: usize,
    /// The frame whose payload is being read.
    in_payload: bool,
    kind: u8,
    flags: u8,
    stream: u32,
    length: usize,
    remaining: usize,
    keep: [u8; KEEP_BYTES],
    keep_len: usize,
    /// The stream whose header block continues in CONTINUATION frames (0: none), and whether
    /// that block ends our response's stream.
    continuing: u32,
    ending: bool,
    /// The stream of the request in flight (0: none), its status (0: not yet) and whether its
    /// response is complete.
    expected: u32,
    status: u16,
    done: bool,
    /// Calls are gRPC's (`grpc=`): a response with status 200 ends with a header block that
    /// carries `grpc-status`, read into `grpc_status` (None: not yet).
    grpc: bool,
    grpc_status: Option<u32>,
    /// The preface has been sent on this connection.
    opened: bool,
    next_stream: u32,
    /// The connection is to be closed after the response in flight (GOAWAY, or ids used up).
    closing: bool,
    /// DATA received since the connection's window was last topped up.
    unacknowledged: u64,
    /// Frames to write: acknowledgements and window updates.
    control: Vec<u8>,
}

impl Http2Reader {
    /// A reader of HTTP/2 responses, or (`grpc`) of gRPC calls' responses.
    pub(crate) fn new(grpc: bool) -> Self {
        Self::with(
            vec![0; BUFFER_BYTES].into_boxed_slice(),
            Vec::with_capacity(CONTROL_BYTES),
            grpc,
        )
    }

    /// A connection's state at its start, in the given buffers.
    fn with(buffer: Box<[u8]>, control: Vec<u8>, grpc: bool) -> Self {
        Self {
            buffer,
            head: [0; 9],
            head_len: 0,
            in_payload: false,
            kind: 0,
            flags: 0,
            stream: 0,
            length: 0,
            remaining: 0,
            keep: [0; KEEP_BYTES],
            keep_len: 0,
            continuing: 0,
            ending: false,
            expected: 0,
            status: 0,
            done: false,
            grpc,
            grpc_status: None,
            opened: false,
            next_stream: 1,
            closing: false,
            unacknowledged: 0,
            control,
        }
    }

    /// A new connection: nothing sent or read on it yet. The buffers are kept.
    pub(crate) fn connected(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        let mut control = std::mem::take(&mut self.control);
        control.clear();
        *self = Self::with(buffer, control, self.grpc);
    }

    /// Puts into `out` what the next send writes: the connection's opening if not yet sent,
    /// the acknowledgements waiting, and `request` (from [`append_request`]) on the next
    /// stream, whose response is then awaited.
    pub(crate) fn prepare(&mut self, out: &mut Vec<u8>, request: &[u8]) {
        out.clear();
        if !self.opened {
            opening(out);
            self.opened = true;
        }
        out.extend_from_slice(&self.control);
        self.control.clear();
        let start = out.len();
        out.extend_from_slice(request);
        set_stream(&mut out[start..], self.next_stream);
        self.expected = self.next_stream;
        self.status = 0;
        self.grpc_status = None;
        self.done = false;
        if self.next_stream > MAX_STREAM_ID - 2 {
            self.closing = true;
        } else {
            self.next_stream += 2;
        }
    }

    /// Acknowledgements waiting, written while a response is awaited (the request is out).
    /// Only once the preface has gone: before it, they go with the first request.
    pub(crate) fn control(&self) -> &[u8] {
        if self.opened { &self.control } else { &[] }
    }

    /// `n` bytes of [`Self::control`] were written.
    pub(crate) fn control_written(&mut self, n: usize) {
        self.control.drain(..n);
    }

    pub(crate) fn spare(&mut self) -> &mut [u8] {
        &mut self.buffer
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// With `grpc=`, the call's `grpc-status`; None otherwise, or when the HTTP status was not
    /// 200 (such a response is counted by that status).
    pub(crate) fn grpc_status(&self) -> Option<u32> {
        // Read only for such a call (`end_frame`), and cleared with each response.
        self.grpc_status
    }

    /// The connection is to be closed after this response.
    pub(crate) fn close(&self) -> bool {
        self.closing
    }

    /// The server closed the connection: never the end of a response in HTTP/2.
    pub(crate) fn eof(&mut self) -> Result<bool, Malformed> {
        Err(Malformed::Eof)
    }

    /// Takes in `n` bytes read into [`Self::spare`], every frame in them; true when they
    /// complete the awaited response (bytes after it are read as the connection's).
    pub(crate) fn advance(&mut self, n: usize) -> Result<bool, Malformed> {
        let mut at = 0;
        while at < n {
            if !self.in_payload {
                let take = (9 - self.head_len).min(n - at);
                self.head[self.head_len..self.head_len + take]
                    .copy_from_slice(&self.buffer[at..at + take]);
                self.head_len += take;
                at += take;
                if self.head_len == 9 {
                    self.head_len = 0;
                    self.start_frame()?;
                }
            } else {
                let take = self.remaining.min(n - at);
                // A body's bytes are counted, never read: only control and header frames are kept.
                let keep = if self.kind == DATA {
                    0
                } else {
                    (KEEP_BYTES - self.keep_len).min(take)
                };
                self.keep[self.keep_len..self.keep_len + keep]
                    .copy_from_slice(&self.buffer[at..at + keep]);
                self.keep_len += keep;
                self.remaining -= take;
                at += take;
                if self.remaining == 0 {
                    self.end_frame()?;
                }
            }
        }
        Ok(self.done && self.expected != 0)
    }

    fn start_frame(&mut self) -> Result<(), Malformed> {
        let h = self.head;
        self.length = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        self.kind = h[3];
        self.flags = h[4];
        self.stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
        if self.length > MAX_FRAME_BYTES {
            return Err(Malformed::Http2(
                "a frame larger than the 16384 bytes our SETTINGS allow",
            ));
        }
        if self.continuing != 0 && (self.kind != CONTINUATION || self.stream != self.continuing) {
            return Err(Malformed::Http2(
                "a header block interrupted by another frame",
            ));
        }
        self.remaining = self.length;
        self.keep_len = 0;
        self.in_payload = true;
        if self.remaining == 0 {
            self.end_frame()?;
        }
        Ok(())
    }

    /// Reads `grpc-status` from the kept start of a HEADERS frame that ends our call: its
    /// header block, less the padding length and priority before it and the padding after.
    fn read_grpc_status(&mut self) -> Result<(), Malformed> {
        let mut from = 0;
        let mut padding = 0;
        if self.flags & PADDED != 0 {
            padding = usize::from(*self.keep.first().unwrap_or(&0));
            from += 1;
        }
        if self.flags & PRIORITY != 0 {
            from += 5;
        }
        let end = self.length.saturating_sub(padding);
        let kept = self.keep_len.min(end);
        let block = self.keep[..kept].get(from..).unwrap_or_default();
        let whole = self.flags & END_HEADERS != 0 && kept == end;
        self.grpc_status = block_grpc_status(block, whole)?;
        if self.grpc_status.is_none() {
            return Err(Malformed::Http2(
                "a gRPC call ended without a grpc-status in the first 256 bytes of its trailers",
            ));
        }
        Ok(())
    }

    fn queue(&mut self, frame: &[u8]) -> Result<(), Malformed> {
        if self.control.len() + frame.len() > CONTROL_BYTES {
            return Err(Malformed::Http2(
                "the server's SETTINGS and PINGs pile up unacknowledged",
            ));
        }
        self.control.extend_from_slice(frame);
        Ok(())
    }

    fn end_frame(&mut self) -> Result<(), Malformed> {
        self.in_payload = false;
        let ours = self.stream == self.expected && self.expected != 0 && !self.done;
        match self.kind {
            DATA => {
                self.unacknowledged += self.length as u64;
                if self.unacknowledged >= REFILL_BYTES {
                    let mut frame = [0u8; 13];
                    frame[..9].copy_from_slice(&[0, 0, 4, WINDOW_UPDATE, 0, 0, 0, 0, 0]);
                    frame[9..].copy_from_slice(&(self.unacknowledged as u32).to_be_bytes());
                    self.queue(&frame)?;
                    self.unacknowledged = 0;
                }
                if ours && self.flags & END_STREAM != 0 {
                    if self.status < 200 {
                        return Err(Malformed::Http2("a response's body before its headers"));
                    }
                    if self.grpc && self.status == 200 {
                        return Err(Malformed::Http2(
                            "a gRPC call whose response ended without trailers (no grpc-status)",
                        ));
                    }
                    self.done = true;
                }
            }
            HEADERS => {
                if ours && self.status < 200 {
                    let mut from = 0;
                    if self.flags & PADDED != 0 {
                        from += 1;
                    }
                    if self.flags & PRIORITY != 0 {
                        from += 5;
                    }
                    let block = self.keep[..self.keep_len].get(from..).unwrap_or_default();
                    self.status = block_status(block)?;
                    if self.status < 200 && self.flags & END_STREAM != 0 {
                        return Err(Malformed::Http2(
                            "an informational (1xx) response that ends the stream",
                        ));
                    }
                }
                let ends = ours && self.flags & END_STREAM != 0;
                if ends && self.grpc && self.status == 200 {
                    self.read_grpc_status()?;
                }
                if self.flags & END_HEADERS == 0 {
                    self.continuing = self.stream;
                    self.ending = ends;
                } else if ends {
                    self.done = true;
                }
            }
            CONTINUATION => {
                if self.stream != self.continuing {
                    return Err(Malformed::Http2(
                        "a CONTINUATION frame after no header block",
                    ));
                }
                if self.flags & END_HEADERS != 0 {
                    self.continuing = 0;
                    if self.ending && self.stream == self.expected {
                        self.done = true;
                    }
                    self.ending = false;
                }
            }
            RST_STREAM if ours => {
                return Err(Malformed::Http2("the server reset the request's stream"));
            }
            SETTINGS if self.flags & ACK == 0 => {
                if !self.length.is_multiple_of(6) || self.stream != 0 {
                    return Err(Malformed::Http2("a SETTINGS frame of a wrong size"));
                }
                self.queue(&[0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0])?;
            }
            PING if self.flags & ACK == 0 => {
                if self.length != 8 {
                    return Err(Malformed::Http2("a PING frame of a wrong size"));
                }
                let mut frame = [0u8; 17];
                frame[..9].copy_from_slice(&[0, 0, 8, PING, ACK, 0, 0, 0, 0]);
                frame[9..].copy_from_slice(&self.keep[..8]);
                self.queue(&frame)?;
            }
            GOAWAY => {
                if self.length < 8 {
                    return Err(Malformed::Http2("a GOAWAY frame of a wrong size"));
                }
                self.closing = true;
                let last =
                    u32::from_be_bytes([self.keep[0], self.keep[1], self.keep[2], self.keep[3]])
                        & MAX_STREAM_ID;
                if self.expected > last && !self.done {
                    return Err(Malformed::Http2(
                        "the server went away before the request's stream",
                    ));
                }
            }
            PUSH_PROMISE => {
                return Err(Malformed::Http2(
                    "a server push, which our SETTINGS disable",
                ));
            }
            // PRIORITY, WINDOW_UPDATE, acknowledgements, frames of finished streams and frame
            // types we do not know (RFC 9113 §5.5): nothing to do.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
