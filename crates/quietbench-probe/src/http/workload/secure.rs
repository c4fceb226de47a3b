//! The load loop's TLS part (`tls=true`): each connection's handshake after its TCP connect,
//! and its requests and responses through [`TlsConn`] instead of the socket. Everything else
//! (the schedule, timeouts, errors, HTTP/1.1 or HTTP/2 framing) is the loop's as it is.

use std::time::Instant;

use super::{Answer, Conn, Failure, HttpWorkload, State, TlsConn, token};
use crate::http::framing::Reader;
use crate::http::response::Malformed;
use crate::http::sys::{BROKEN, READABLE, WRITABLE};
use crate::http::tls::{Handshake, Received};

/// Hands decrypted bytes to the response reader through its buffer: true when the last of
/// them completed the response.
fn feed(reader: &mut Reader, mut bytes: &[u8]) -> Result<bool, Malformed> {
    let mut complete = false;
    while !bytes.is_empty() {
        let spare = reader.spare();
        let n = spare.len().min(bytes.len());
        if n == 0 {
            return Err(Malformed::HeadTooLarge);
        }
        spare[..n].copy_from_slice(&bytes[..n]);
        complete = reader.advance(n)?;
        bytes = &bytes[n..];
    }
    Ok(complete)
}

impl HttpWorkload {
    /// `i`'s TCP connect is done: its TLS begins.
    pub(super) fn start_handshake(&mut self, i: usize, now: Instant) {
        let Some(client) = self.tls.as_ref() else {
            return;
        };
        match TlsConn::new(client) {
            Ok(tls) => {
                let c = &mut self.conns[i];
                c.tls = Some(Box::new(tls));
                c.state = State::Handshaking;
                self.continue_handshake(i, WRITABLE, now);
            }
            Err(e) => {
                self.tls_failure.get_or_insert_with(|| e.to_string());
                self.connect_failed(i, now);
            }
        }
    }

    /// Takes `i`'s handshake on; a failure is a failed connect (counted, retried), and its
    /// reason is kept.
    pub(super) fn continue_handshake(&mut self, i: usize, flags: u32, now: Instant) {
        let alpn_h2 = matches!(self.conns[i].reader, Reader::Http2(_));
        let c = &mut self.conns[i];
        let (Some(stream), Some(tls)) = (c.stream.as_ref(), c.tls.as_mut()) else {
            return;
        };
        let step = if flags & BROKEN != 0 && flags & READABLE == 0 {
            Err(std::io::Error::other(
                "the connection broke in the TLS handshake",
            ))
        } else {
            tls.handshake(stream)
        };
        let step = step.and_then(|h| {
            // The server must have agreed to HTTP/2: the bytes of one are not the other's.
            if h == Handshake::Ready && alpn_h2 && tls.alpn() != Some(b"h2".as_slice()) {
                return Err(std::io::Error::other(
                    "TLS: the server did not agree to HTTP/2 (ALPN h2); give http2=false",
                ));
            }
            Ok(h)
        });
        let interest = match step {
            Ok(Handshake::Ready) => READABLE,
            Ok(Handshake::WantRead) => READABLE,
            Ok(Handshake::WantWrite) => READABLE | WRITABLE,
            Err(e) => {
                self.tls_failure.get_or_insert_with(|| e.to_string());
                return self.connect_failed(i, now);
            }
        };
        if self
            .epoll
            .modify(stream, interest, token(i, c.generation))
            .is_err()
        {
            return self.connect_failed(i, now);
        }
        c.watching_writes = interest & WRITABLE != 0;
        if step.is_ok_and(|h| h == Handshake::Ready) {
            c.state = State::Idle;
            c.idle_since = now;
            let unread = tls.buffered();
            self.idle.push_back(i);
            // What the server sent with its last handshake message is in our buffer already:
            // the socket will not say so again.
            if unread {
                self.idle_readable_tls(i, now);
            }
        }
    }

    /// Writes what is left of `i`'s sealed request.
    pub(super) fn write_more_tls(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let (Some(stream), Some(tls)) = (c.stream.as_ref(), c.tls.as_mut()) else {
            return;
        };
        let (done, interest) = match tls.flush(stream) {
            Ok(true) => (true, READABLE),
            Ok(false) => (false, READABLE | WRITABLE),
            Err(_) => return self.fail_request(i, now, Failure::Io),
        };
        if done {
            c.state = State::Awaiting;
        }
        let watch = interest & WRITABLE != 0;
        if c.watching_writes != watch {
            c.watching_writes = watch;
            if self
                .epoll
                .modify(stream, interest, token(i, c.generation))
                .is_err()
            {
                self.fail_request(i, now, Failure::Io);
            }
        }
    }

    /// Reads and decrypts what has arrived of `i`'s response.
    pub(super) fn read_response_tls(&mut self, i: usize) -> Option<Answer> {
        let Conn {
            stream,
            reader,
            tls,
            ..
        } = &mut self.conns[i];
        let (Some(stream), Some(tls)) = (stream.as_ref(), tls.as_mut()) else {
            return None;
        };
        let outcome = match tls.read(stream, |bytes| feed(reader, bytes)) {
            Ok(Received::Done(complete)) => Ok(complete),
            // The end of the stream ends a response that runs until it (HTTP/1.1 only).
            Ok(Received::Closed) => reader.eof(),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(true) => self.complete(i),
            Ok(false) => {
                if self.conns[i].state == State::Awaiting && !self.write_control_tls(i) {
                    self.fail_request(i, Instant::now(), Failure::Io);
                }
                None
            }
            Err(_) => {
                self.fail_request(i, Instant::now(), Failure::Io);
                None
            }
        }
    }

    /// An idle TLS connection is readable: post-handshake messages (session tickets) and, on
    /// HTTP/2, the connection's frames are taken in and it stays open; anything else (a close,
    /// an HTTP/1.1 answer nobody asked for) reopens it as the plain loop does.
    pub(super) fn idle_readable_tls(&mut self, i: usize, now: Instant) {
        let Conn {
            stream,
            reader,
            tls,
            ..
        } = &mut self.conns[i];
        let (Some(stream), Some(tls)) = (stream.as_ref(), tls.as_mut()) else {
            return;
        };
        let outcome = tls.read(stream, |bytes| match reader {
            Reader::Http2(_) => feed(reader, bytes),
            _ => Err(Malformed::TrailingBytes),
        });
        let read = matches!(outcome, Ok(Received::Done(_)));
        // A GOAWAY between requests is the server's graceful close: reopened at once.
        let graceful = read && reader.close();
        if graceful {
            self.close(i, now, false);
        } else if !read || !self.write_control_tls(i) {
            self.close(i, now, true);
        }
    }

    /// Sends what `i` owes the server while no request is being written on it: HTTP/2's
    /// acknowledgements, sealed, and TLS's own messages; false when the connection broke.
    pub(super) fn write_control_tls(&mut self, i: usize) -> bool {
        let Conn {
            stream,
            reader,
            tls,
            ..
        } = &mut self.conns[i];
        let (Some(stream), Some(tls)) = (stream.as_ref(), tls.as_mut()) else {
            return true;
        };
        if let Reader::Http2(r) = reader {
            let owed = r.control().len();
            if owed > 0 {
                if tls.seal(r.control()).is_err() {
                    return false;
                }
                r.control_written(owed);
            }
        }
        // What does not go now goes with the next request's flush, in order.
        tls.flush(stream).is_ok()
    }
}
