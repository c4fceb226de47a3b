//! Raw TCP on the wire: the bytes a parameter writes with escapes (`request=`,
//! `response_terminator=`, a request file's lines: [`parse_escaped`], the vocabulary's, by
//! which the controller checks a request file too), and reading one response at a time,
//! framed by a terminator or by a fixed length, in a fixed buffer of its own. Nothing
//! allocates after the buffer is made.
//!
//! The terminator is matched as the bytes arrive (Knuth–Morris–Pratt over the terminator, its
//! table built once), so a terminator split across reads is found, and nothing of the
//! response is kept: a response passes through the buffer in pieces, counted, and only a
//! count bounds it ([`MAX_RESPONSE_BYTES`]). Keeping the last bytes of each read to search
//! again would copy them per read; searching the whole response would keep it.

pub use quietbench_vocab::raw_requests::parse_escaped;

use crate::http::response::Malformed;

/// The longest terminator: a line ending, a blank line, a protocol's end marker.
pub const MAX_TERMINATOR_BYTES: usize = 64;
/// The longest response framed by a terminator: a server that sends this much without it
/// is answering in a different protocol (or never ends), an I/O error, not a hang.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// The longest response of `response_bytes=`.
pub const MAX_FIXED_RESPONSE_BYTES: u64 = 1 << 30;

/// A response terminator and its matching table, both fixed arrays: a copy per connection
/// allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Terminator {
    bytes: [u8; MAX_TERMINATOR_BYTES],
    len: usize,
    /// `fallback[i]`: the longest proper prefix of `bytes[..=i]` that is also its suffix.
    fallback: [u8; MAX_TERMINATOR_BYTES],
}

impl std::fmt::Debug for Terminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Terminator({:?})",
            self.bytes[..self.len].escape_ascii().to_string()
        )
    }
}

impl Terminator {
    /// 1 to [`MAX_TERMINATOR_BYTES`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        if bytes.is_empty() {
            return Err("must not be empty: give e.g. \\n, or response_bytes=N".into());
        }
        if bytes.len() > MAX_TERMINATOR_BYTES {
            return Err(format!("at most {MAX_TERMINATOR_BYTES} bytes"));
        }
        let mut t = Self {
            bytes: [0; MAX_TERMINATOR_BYTES],
            len: bytes.len(),
            fallback: [0; MAX_TERMINATOR_BYTES],
        };
        t.bytes[..bytes.len()].copy_from_slice(bytes);
        let mut k = 0usize;
        for (i, &b) in bytes.iter().enumerate().skip(1) {
            while k > 0 && b != bytes[k] {
                k = usize::from(t.fallback[k - 1]);
            }
            if b == bytes[k] {
                k += 1;
            }
            t.fallback[i] = k as u8;
        }
        Ok(t)
    }

    /// The matched prefix's length after byte `b`, from `matched`.
    #[inline]
    fn step(&self, mut matched: usize, b: u8) -> usize {
        if matched == self.len {
            matched = usize::from(self.fallback[matched - 1]);
        }
        while matched > 0 && self.bytes[matched] != b {
            matched = usize::from(self.fallback[matched - 1]);
        }
        if self.bytes[matched] == b {
            matched + 1
        } else {
            0
        }
    }
}

/// How a raw response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawFraming {
    /// At the first occurrence of these bytes (within [`MAX_RESPONSE_BYTES`]).
    Terminator(Terminator),
    /// After exactly this many bytes.
    Length(u64),
}

/// Where one response is, between reads: pure, so a test can feed it any split.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scan {
    framing: RawFraming,
    /// Bytes of the response so far.
    seen: u64,
    /// Terminator bytes matched at the end of what was seen.
    matched: usize,
}

impl Scan {
    pub(crate) fn new(framing: RawFraming) -> Self {
        Self {
            framing,
            seen: 0,
            matched: 0,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.seen = 0;
        self.matched = 0;
    }

    /// Takes in the next bytes of the response: `Some(n)` when it ends after the first `n` of
    /// them, None when it goes on; an error past the bound.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, Malformed> {
        match self.framing {
            RawFraming::Length(total) => {
                let take = (total - self.seen).min(bytes.len() as u64);
                self.seen += take;
                Ok((self.seen == total).then_some(take as usize))
            }
            RawFraming::Terminator(t) => {
                let mut end = None;
                for (i, &b) in bytes.iter().enumerate() {
                    self.matched = t.step(self.matched, b);
                    if self.matched == t.len {
                        end = Some(i + 1);
                        break;
                    }
                }
                self.seen += end.unwrap_or(bytes.len()) as u64;
                if self.seen > MAX_RESPONSE_BYTES {
                    return Err(Malformed::TooLarge);
                }
                Ok(end)
            }
        }
    }
}

/// One connection's raw response reader.
pub(crate) struct RawReader {
    buf: Box<[u8]>,
    scan: Scan,
    done: bool,
}

impl RawReader {
    pub(crate) fn new(framing: RawFraming, buffer_bytes: usize) -> Self {
        Self {
            buf: vec![0; buffer_bytes].into_boxed_slice(),
            scan: Scan::new(framing),
            done: false,
        }
    }

    /// Ready for the next response.
    pub(crate) fn reset(&mut self) {
        self.scan.reset();
        self.done = false;
    }

    /// Where the next read goes: the whole buffer (nothing is kept).
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[..]
    }

    /// Takes in `n` bytes just read into [`Self::spare`]; true when the response is complete.
    /// Bytes past its end are refused: one request is in flight, so they answer nothing asked.
    pub(crate) fn advance(&mut self, n: usize) -> Result<bool, Malformed> {
        if self.done {
            return Err(Malformed::TrailingBytes);
        }
        match self.scan.feed(&self.buf[..n])? {
            Some(used) if used < n => Err(Malformed::TrailingBytes),
            Some(_) => {
                self.done = true;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The stream ended: an error unless the response was complete.
    pub(crate) fn eof(&mut self) -> Result<bool, Malformed> {
        if self.done {
            Ok(true)
        } else {
            Err(Malformed::Eof)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn terminator(text: &str) -> RawFraming {
        RawFraming::Terminator(Terminator::new(&parse_escaped(text).unwrap()).unwrap())
    }

    /// Feeds `bytes` to a reader in pieces of the given sizes (cycled): the completion, if
    /// any, and the bytes fed when it completed.
    fn feed(
        reader: &mut RawReader,
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

    /// The escapes' own cases are the vocabulary's (quietbench_vocab::raw_requests).
    #[test]
    fn a_terminator_is_one_to_64_bytes() {
        assert!(Terminator::new(b"").unwrap_err().contains("empty"));
        assert!(Terminator::new(&[b'x'; 65]).unwrap_err().contains("64"));
        assert!(Terminator::new(&[b'x'; 64]).is_ok());
    }

    #[test]
    fn a_terminator_split_across_reads_is_found() {
        let mut reader = RawReader::new(terminator("\\r\\n\\r\\n"), 64);
        let response = b"OK 12\r\nline\r\n\r\n";
        for pieces in [&[1usize][..], &[6, 1, 1, 1], &[14, 1], &[15, 1]] {
            reader.reset();
            assert_eq!(
                feed(&mut reader, response, pieces),
                Ok(Some(response.len())),
                "{pieces:?}"
            );
            assert_eq!(reader.eof(), Ok(true));
        }
        // A partial match that fails must not hide the real end ("\r\n\r" then "\r\n\r\n").
        reader.reset();
        let tricky = b"a\r\n\r\r\n\r\n";
        assert_eq!(feed(&mut reader, tricky, &[4, 1]), Ok(Some(tricky.len())));
        let mut reader = RawReader::new(terminator("abab"), 16);
        assert_eq!(feed(&mut reader, b"abaabab", &[3]), Ok(Some(7)));
    }

    #[test]
    fn two_responses_in_one_read_are_each_found_and_refused_unasked() {
        let mut scan = Scan::new(terminator("\\n"));
        let bytes = b"+PONG\r\n+PONG\r\n";
        assert_eq!(scan.feed(bytes), Ok(Some(7)));
        scan.reset();
        assert_eq!(scan.feed(&bytes[7..]), Ok(Some(7)));
        // The reader has one request in flight: a second answer in the same read is not one.
        let mut reader = RawReader::new(terminator("\\n"), 64);
        assert_eq!(
            feed(&mut reader, bytes, &[64]),
            Err(Malformed::TrailingBytes)
        );
        let mut fixed = Scan::new(RawFraming::Length(3));
        assert_eq!(fixed.feed(b"abcdef"), Ok(Some(3)));
        fixed.reset();
        assert_eq!(fixed.feed(b"def"), Ok(Some(3)));
    }

    #[test]
    fn a_fixed_length_response_ends_at_its_length_whatever_it_holds() {
        let mut reader = RawReader::new(RawFraming::Length(10), 4);
        assert_eq!(
            feed(&mut reader, b"\n\n\n\n\n\n\n\n\n\n", &[3]),
            Ok(Some(10))
        );
        reader.reset();
        assert_eq!(feed(&mut reader, b"12345", &[5]), Ok(None));
        assert_eq!(reader.eof(), Err(Malformed::Eof));
        reader.reset();
        assert_eq!(
            feed(&mut reader, b"0123456789X", &[4]),
            Err(Malformed::TrailingBytes)
        );
    }

    #[test]
    fn a_response_past_the_bound_without_its_terminator_is_an_error_not_a_hang() {
        let mut reader = RawReader::new(terminator("\\n"), 8 * 1024);
        let big = vec![b'a'; MAX_RESPONSE_BYTES as usize + 1];
        assert_eq!(
            feed(&mut reader, &big, &[8 * 1024]),
            Err(Malformed::TooLarge)
        );
        // Just at the bound, the terminator included, it is a response.
        reader.reset();
        let mut exact = vec![b'a'; MAX_RESPONSE_BYTES as usize - 1];
        exact.push(b'\n');
        assert_eq!(
            feed(&mut reader, &exact, &[8 * 1024]),
            Ok(Some(exact.len()))
        );
    }

    proptest! {
        /// Every way of cutting a response into reads finds its end at the same byte.
        #[test]
        fn any_split_reads_the_same(
            pieces in proptest::collection::vec(1usize..9, 1..6),
            body in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'x')], 0..30),
        ) {
            let mut response = body;
            response.extend_from_slice(b"\r\n\r\n");
            let end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let mut scan = Scan::new(terminator("\\r\\n\\r\\n"));
            prop_assert_eq!(scan.feed(&response), Ok(Some(end)));
            let mut reader = RawReader::new(terminator("\\r\\n\\r\\n"), 8);
            let got = feed(&mut reader, &response[..end], &pieces);
            prop_assert_eq!(got, Ok(Some(end)));
        }

        /// Any text is decoded (never longer than written) or refused saying where, never a
        /// panic.
        #[test]
        fn escapes_never_panic(text in "(\\\\|x|n|[0-9a-g]|\\PC){0,20}") {
            match parse_escaped(&text) {
                Ok(bytes) => prop_assert!(bytes.len() <= text.len()),
                Err(why) => prop_assert!(why.contains("at byte"), "{}", why),
            }
        }
    }
}
