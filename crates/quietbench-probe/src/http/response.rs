//! Reading one HTTP/1.1 response at a time from a connection, in a fixed buffer of its own:
//! the status line and headers are parsed where they landed, the body is counted and dropped
//! (framed by Content-Length, chunked, or the end of the stream). Nothing allocates after the
//! buffer is made.
//!
//! The reader is fed whatever each read returned, so every state survives a split anywhere,
//! even inside `\r\n` (the property tests feed each response cut at every point).

/// Each connection's buffer. The whole status line and headers must fit (8 KiB, the limit most
/// servers put on a request's head); the body passes through it in pieces.
pub(crate) const BUFFER_BYTES: usize = 8 * 1024;

/// The response could not be read as HTTP/1.1 (counted as an I/O error, the connection closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// No end of the headers within the buffer.
    HeadTooLarge,
    /// Not `HTTP/1.x NNN ...`.
    StatusLine,
    /// A header line without a name and a colon, or folded.
    Header,
    /// A Content-Length that is not a number, or two that differ.
    ContentLength,
    /// A chunk's size or its line endings.
    Chunk,
    /// 101 Switching Protocols: the probe asked for no upgrade.
    Upgrade,
    /// Bytes after the end of the response, with none requested.
    TrailingBytes,
    /// The stream ended before the response did.
    Eof,
    /// A raw response (`tcp`) passed its bound without its terminator.
    TooLarge,
    /// HTTP/2: what the server sent that the probe cannot take, and why.
    Http2(&'static str),
    /// TLS (`tls=true`): a record that could not be read or a request that could not be sent.
    Tls(&'static str),
}

/// How the body's end is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: a HEAD request's response, 204, 304.
    None,
    /// Content-Length bytes.
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// What the status line and headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub status: u16,
    pub framing: Framing,
    /// The server closes the connection after this response.
    pub close: bool,
}

/// Where a chunked body is, between reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk's hexadecimal size.
    Size {
        value: u64,
        digits: u8,
    },
    /// In a chunk extension, after the size.
    Extension {
        value: u64,
    },
    /// After the size line's `\r`.
    SizeLf {
        value: u64,
    },
    /// In a chunk's data: this many bytes left.
    Data(u64),
    /// After a chunk's data: its `\r\n`.
    DataCr,
    DataLf,
    /// In the trailer section, after the last chunk: ends with an empty line.
    Trailer {
        line_empty: bool,
    },
    TrailerLf {
        line_empty: bool,
    },
}

const CHUNK_START: Chunk = Chunk::Size {
    value: 0,
    digits: 0,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// One connection's response reader.
pub(crate) struct ResponseReader {
    buf: Box<[u8]>,
    /// Head bytes gathered so far.
    filled: usize,
    state: State,
    head_request: bool,
    status: u16,
    close: bool,
}

impl ResponseReader {
    /// A reader for the responses to `head_request`s (HEAD: no body) or not.
    pub(crate) fn new(head_request: bool) -> Self {
        Self {
            buf: vec![0; BUFFER_BYTES].into_boxed_slice(),
            filled: 0,
            state: State::Head,
            head_request,
            status: 0,
            close: false,
        }
    }

    /// Ready for the next response, to a HEAD request (no body) or not: a request file mixes
    /// them.
    pub(crate) fn reset_for(&mut self, head_request: bool) {
        self.head_request = head_request;
        self.reset();
    }

    /// Ready for the next response.
    pub(crate) fn reset(&mut self) {
        self.filled = 0;
        self.state = State::Head;
        self.status = 0;
        self.close = false;
    }

    /// Where the next read goes: after the head bytes so far, or (in the body) anywhere.
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        match self.state {
            State::Head => &mut self.buf[self.filled..],
            _ => &mut self.buf[..],
        }
    }

    /// No byte of a response has arrived yet.
    #[cfg(test)]
    pub(crate) fn is_untouched(&self) -> bool {
        self.state == State::Head && self.filled == 0
    }

    /// The final response's status.
    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The server closes the connection after this response.
    pub(crate) fn close(&self) -> bool {
        self.close
    }

    /// Takes in `n` bytes just read into [`Self::spare`]; true when the response is complete.
    pub(crate) fn advance(&mut self, n: usize) -> Result<bool, Malformed> {
        if self.state != State::Head {
            return self.body(0, n);
        }
        // The end of the head may straddle the previous read.
        let mut from = self.filled.saturating_sub(3);
        self.filled += n;
        loop {
            let Some(end) = find_head_end(&self.buf[from..self.filled]).map(|e| e + from) else {
                if self.filled == self.buf.len() {
                    return Err(Malformed::HeadTooLarge);
                }
                return Ok(false);
            };
            let head = parse_head(&self.buf[..end], self.head_request)?;
            if (100..200).contains(&head.status) {
                // An interim response (100 Continue, 103 Early Hints): the final one follows.
                self.buf.copy_within(end..self.filled, 0);
                self.filled -= end;
                from = 0;
                continue;
            }
            self.status = head.status;
            self.close = head.close;
            self.state = match head.framing {
                Framing::None | Framing::Length(0) => State::Done,
                Framing::Length(n) => State::Length(n),
                Framing::Chunked => State::Chunked(CHUNK_START),
                Framing::UntilClose => State::UntilClose,
            };
            let filled = std::mem::replace(&mut self.filled, 0);
            return self.body(end, filled);
        }
    }

    /// The stream ended: true when that completes the response (framed by the close).
    pub(crate) fn eof(&mut self) -> Result<bool, Malformed> {
        match self.state {
            State::UntilClose => {
                self.state = State::Done;
                Ok(true)
            }
            State::Done => Ok(true),
            _ => Err(Malformed::Eof),
        }
    }

    /// Takes in the body bytes `buf[from..to]`.
    fn body(&mut self, from: usize, to: usize) -> Result<bool, Malformed> {
        let bytes = &self.buf[from..to];
        let used = match &mut self.state {
            State::Head => unreachable!("the head is parsed before the body"),
            State::Length(left) => {
                let take = (*left).min(bytes.len() as u64);
                *left -= take;
                if *left == 0 {
                    self.state = State::Done;
                }
                take as usize
            }
            State::Chunked(chunk) => {
                let (used, done) = chunked(chunk, bytes)?;
                if done {
                    self.state = State::Done;
                }
                used
            }
            State::UntilClose => bytes.len(),
            State::Done => 0,
        };
        if used < bytes.len() {
            // One request in flight: a server that sends more than one response's worth
            // answers something nobody asked.
            return Err(Malformed::TrailingBytes);
        }
        Ok(self.state == State::Done)
    }
}

/// The index just past the head's terminating blank line, if it is in `bytes`.
fn find_head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
}

/// Parses a status line and headers (ending in the blank line).
pub(crate) fn parse_head(head: &[u8], head_request: bool) -> Result<Head, Malformed> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().ok_or(Malformed::StatusLine)?;
    let rest = status_line
        .strip_prefix(b"HTTP/1.")
        .ok_or(Malformed::StatusLine)?;
    let (minor, code) = match rest {
        [minor @ b'0'..=b'9', b' ', a, b, c, after @ ..]
            if after.first().is_none_or(|&s| s == b' ') =>
        {
            (*minor, [*a, *b, *c])
        }
        _ => return Err(Malformed::StatusLine),
    };
    if !code.iter().all(u8::is_ascii_digit) {
        return Err(Malformed::StatusLine);
    }
    let status = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    if status == 101 {
        return Err(Malformed::Upgrade);
    }
    // HTTP/1.0 closes unless asked to keep alive; 1.1 keeps alive unless told to close.
    let mut close = minor == b'0';
    let mut length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut chunked = false;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            return Err(Malformed::Header); // obsolete line folding
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Malformed::Header)?;
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
            return Err(Malformed::Header);
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            // "5, 5" is allowed (a list of the same length); anything else is not.
            for item in value.split(|&b| b == b',') {
                let n = parse_decimal(item.trim_ascii()).ok_or(Malformed::ContentLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(Malformed::ContentLength);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
            // Only the last coding frames the message (RFC 9112 6.3).
            if let Some(last) = value.split(|&b| b == b',').next_back() {
                chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && minor == b'0' {
                    close = false;
                }
            }
        }
    }
    let no_body = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    let framing = if no_body {
        Framing::None
    } else if transfer_encoding {
        // Transfer-Encoding overrides Content-Length; a last coding other than chunked is
        // framed by the close.
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(Head {
        status,
        framing,
        close: close || framing == Framing::UntilClose,
    })
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// Runs a chunked body's state over `bytes`: the bytes used and whether the body ended.
fn chunked(state: &mut Chunk, bytes: &[u8]) -> Result<(usize, bool), Malformed> {
    let mut i = 0;
    while i < bytes.len() {
        if let Chunk::Data(left) = state {
            let take = (*left).min((bytes.len() - i) as u64);
            *left -= take;
            i += take as usize;
            if *left == 0 {
                *state = Chunk::DataCr;
            }
            continue;
        }
        let b = bytes[i];
        i += 1;
        *state = match *state {
            Chunk::Size { value, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    if digits >= 15 {
                        return Err(Malformed::Chunk); // over 2^60 bytes: not a size
                    }
                    let d = (b as char).to_digit(16).unwrap_or(0);
                    Chunk::Size {
                        value: value * 16 + u64::from(d),
                        digits: digits + 1,
                    }
                }
                b';' | b' ' | b'\t' if digits > 0 => Chunk::Extension { value },
                b'\r' if digits > 0 => Chunk::SizeLf { value },
                b'\n' if digits > 0 => size_line_end(value),
                _ => return Err(Malformed::Chunk),
            },
            Chunk::Extension { value } => match b {
                b'\r' => Chunk::SizeLf { value },
                b'\n' => size_line_end(value),
                _ => Chunk::Extension { value },
            },
            Chunk::SizeLf { value } => match b {
                b'\n' => size_line_end(value),
                _ => return Err(Malformed::Chunk),
            },
            Chunk::Data(_) => unreachable!("data is skipped above"),
            Chunk::DataCr => match b {
                b'\r' => Chunk::DataLf,
                b'\n' => CHUNK_START,
                _ => return Err(Malformed::Chunk),
            },
            Chunk::DataLf => match b {
                b'\n' => CHUNK_START,
                _ => return Err(Malformed::Chunk),
            },
            Chunk::Trailer { line_empty } | Chunk::TrailerLf { line_empty } if b == b'\n' => {
                if line_empty {
                    return Ok((i, true));
                }
                Chunk::Trailer { line_empty: true }
            }
            Chunk::Trailer { line_empty } if b == b'\r' => Chunk::TrailerLf { line_empty },
            Chunk::Trailer { .. } | Chunk::TrailerLf { .. } => Chunk::Trailer { line_empty: false },
        };
    }
    Ok((i, false))
}

/// After a size line: the chunk's data, or (size 0) the trailer section.
fn size_line_end(value: u64) -> Chunk {
    if value == 0 {
        Chunk::Trailer { line_empty: true }
    } else {
        Chunk::Data(value)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Feeds `bytes` in pieces of the given sizes (cycled); the response's completion, if any,
    /// and the number of bytes fed when it completed.
    fn feed(
        reader: &mut ResponseReader,
        bytes: &[u8],
        pieces: &[usize],
    ) -> Result<Option<usize>, Malformed> {
        let mut at = 0;
        let mut sizes = pieces.iter().copied().cycle();
        while at < bytes.len() {
            let spare = reader.spare();
            let n = sizes
                .next()
                .unwrap_or(bytes.len())
                .max(1)
                .min(bytes.len() - at)
                .min(spare.len());
            spare[..n].copy_from_slice(&bytes[at..at + n]);
            at += n;
            if reader.advance(n)? {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    fn read_whole(
        bytes: &[u8],
        head_request: bool,
    ) -> Result<(u16, bool, Option<usize>), Malformed> {
        let mut reader = ResponseReader::new(head_request);
        let done = feed(&mut reader, bytes, &[bytes.len()])?;
        Ok((reader.status(), reader.close(), done))
    }

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
        5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";

    #[test]
    fn reads_a_length_framed_response_and_keeps_the_connection() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";
        assert_eq!(read_whole(r, false), Ok((200, false, Some(r.len()))));
        let r = b"HTTP/1.1 404 Not Found\r\ncontent-length:0\r\nConnection: close\r\n\r\n";
        assert_eq!(read_whole(r, false), Ok((404, true, Some(r.len()))));
    }

    #[test]
    fn reads_a_chunked_body_with_extensions_and_trailers() {
        assert_eq!(
            read_whole(CHUNKED, false),
            Ok((200, false, Some(CHUNKED.len())))
        );
        let bare = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(read_whole(bare, false), Ok((200, false, Some(bare.len()))));
    }

    #[test]
    fn head_responses_204_and_304_have_no_body() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
        assert_eq!(read_whole(r, true), Ok((200, false, Some(r.len()))));
        assert_eq!(read_whole(r, false), Ok((200, false, None)));
        let r = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n";
        assert_eq!(read_whole(r, false), Ok((304, false, Some(r.len()))));
    }

    #[test]
    fn a_body_without_length_ends_with_the_stream() {
        let mut reader = ResponseReader::new(false);
        let r = b"HTTP/1.0 200 OK\r\n\r\nsome body";
        assert_eq!(feed(&mut reader, r, &[7]), Ok(None));
        assert!(reader.close());
        assert_eq!(reader.eof(), Ok(true));
        // HTTP/1.0 with keep-alive and a length keeps the connection.
        let r = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx";
        assert_eq!(read_whole(r, false), Ok((200, false, Some(r.len()))));
    }

    #[test]
    fn interim_responses_are_skipped() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(read_whole(r, false), Ok((201, false, Some(r.len()))));
    }

    #[test]
    fn malformed_responses_say_how() {
        let cases: &[(&[u8], Malformed)] = &[
            (b"HTTP/2 200 OK\r\n\r\n", Malformed::StatusLine),
            (b"HTTP/1.1 2x0 OK\r\n\r\n", Malformed::StatusLine),
            (b"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", Malformed::Header),
            (
                b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
                Malformed::Header,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Malformed::ContentLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                Malformed::ContentLength,
            ),
            (
                b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
                Malformed::Upgrade,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy",
                Malformed::TrailingBytes,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                Malformed::Chunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
                Malformed::Chunk,
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                read_whole(bytes, false).map(|_| ()),
                Err(*want),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        huge.resize(BUFFER_BYTES + 10, b'a');
        assert_eq!(
            read_whole(&huge, false).map(|_| ()),
            Err(Malformed::HeadTooLarge)
        );
        let mut reader = ResponseReader::new(false);
        assert_eq!(
            feed(
                &mut reader,
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab",
                &[64]
            ),
            Ok(None)
        );
        assert_eq!(reader.eof(), Err(Malformed::Eof));
    }

    #[test]
    fn a_reader_is_reused_for_the_next_response() {
        let mut reader = ResponseReader::new(false);
        for r in [
            &b"HTTP/1.1 500 Oops\r\nContent-Length: 3\r\n\r\nerr"[..],
            CHUNKED,
        ] {
            assert!(reader.is_untouched());
            assert_eq!(feed(&mut reader, r, &[3]), Ok(Some(r.len())));
            reader.reset();
        }
    }

    proptest! {
        /// Every way of cutting a response into reads gives the same result as one read.
        #[test]
        fn any_split_reads_the_same(
            pieces in proptest::collection::vec(1usize..40, 1..8),
            which in 0usize..4,
        ) {
            let responses: [&[u8]; 4] = [
                CHUNKED,
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\nno",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            ];
            let bytes = responses[which];
            let mut reader = ResponseReader::new(false);
            let whole = read_whole(bytes, false).unwrap();
            prop_assert_eq!(feed(&mut reader, bytes, &pieces), Ok(whole.2));
            prop_assert_eq!((reader.status(), reader.close()), (whole.0, whole.1));
        }

        /// Arbitrary bytes never panic the reader.
        #[test]
        fn garbage_is_refused_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut reader = ResponseReader::new(false);
            let mut head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            head.extend_from_slice(&bytes);
            let _ = feed(&mut reader, &head, &[5]);
            let _ = read_whole(&bytes, false);
        }
    }
}
