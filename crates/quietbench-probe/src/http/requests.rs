//! Request files on the probe's side: the requests a trial replays, for a server whose
//! requests differ (the route-search team's queries), instead of the one request of `path=`
//! and `method=`.
//!
//! The format, its bounds and its parser are the vocabulary's
//! ([`quietbench_vocab::requests`]), since the controller checks a file by the same rules
//! before a run. The file is on the controller's machine (`requests=FILE`): the controller
//! reads and checks it once per run and sends its text in `requests_text`, so no agent reads a
//! caller's files. The probe parses the text again (an agent trusts no caller), and what is its
//! own is here: it formats every request once into one buffer ([`RequestSet`]), under
//! [`MAX_FORMATTED_BYTES`], and a send only picks an index ([`Picker`]) in the trial's
//! [`Order`].

use std::collections::BTreeMap;

use quietbench_vocab::requests::{FileRequest, REQUESTS_TEXT};

use super::request::Method;
use crate::ParamError;
use crate::rng::Rng;

/// The most bytes of every request formatted, headers and body repeated in each: what one
/// trial's load agent holds. 100 000 requests carrying a 16 KiB body would be 1.6 GB.
pub const MAX_FORMATTED_BYTES: usize = 64 << 20;

/// Every request of a trial, formatted once into one buffer, with where each starts.
#[derive(Debug)]
pub struct RequestSet {
    bytes: Box<[u8]>,
    /// Request i is `bytes[starts[i]..starts[i + 1]]`: one entry more than requests.
    starts: Box<[usize]>,
    /// HEAD requests: their responses have no body, whatever their headers say.
    head: Box<[bool]>,
}

impl RequestSet {
    /// The one request of `path=` and `method=`, in HTTP/1.1 or (`http2`) HTTP/2 frames.
    pub(crate) fn one(
        http2: bool,
        method: Method,
        path: &str,
        host: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Self, String> {
        let mut bytes = Vec::new();
        append(&mut bytes, http2, method, path, host, headers, body)?;
        Ok(Self {
            starts: vec![0, bytes.len()].into_boxed_slice(),
            bytes: bytes.into_boxed_slice(),
            head: vec![method == Method::Head].into_boxed_slice(),
        })
    }

    /// One raw request (`tcp`): its bytes as given, sent whole each time.
    pub(crate) fn raw(bytes: &[u8]) -> Self {
        Self {
            bytes: bytes.into(),
            starts: vec![0, bytes.len()].into_boxed_slice(),
            head: vec![false].into_boxed_slice(),
        }
    }

    /// A file's raw requests (`tcp`), each sent whole as given: copied once into one buffer,
    /// so a send only picks an index.
    pub(crate) fn raw_many(requests: &[Vec<u8>]) -> Self {
        let mut bytes = Vec::with_capacity(requests.iter().map(Vec::len).sum());
        let mut starts = Vec::with_capacity(requests.len() + 1);
        starts.push(0);
        for request in requests {
            bytes.extend_from_slice(request);
            starts.push(bytes.len());
        }
        Self {
            bytes: bytes.into_boxed_slice(),
            starts: starts.into_boxed_slice(),
            head: vec![false; requests.len()].into_boxed_slice(),
        }
    }

    /// A file's requests, each with the shared host, headers and body; refused past
    /// [`MAX_FORMATTED_BYTES`].
    pub(crate) fn format(
        http2: bool,
        requests: &[FileRequest<'_>],
        host: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Self, String> {
        let mut bytes = Vec::new();
        let mut starts = Vec::with_capacity(requests.len() + 1);
        starts.push(0);
        for r in requests {
            append(&mut bytes, http2, r.method, r.path, host, headers, body)?;
            if bytes.len() > MAX_FORMATTED_BYTES {
                return Err(format!(
                    "its {} requests with the shared host, headers and body come to over {} MiB \
                     formatted: fewer requests, or a smaller body or headers",
                    requests.len(),
                    MAX_FORMATTED_BYTES >> 20
                ));
            }
            starts.push(bytes.len());
        }
        Ok(Self {
            bytes: bytes.into_boxed_slice(),
            starts: starts.into_boxed_slice(),
            head: requests.iter().map(|r| r.method == Method::Head).collect(),
        })
    }

    /// The longest request's bytes.
    pub(crate) fn longest(&self) -> usize {
        self.starts
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }

    /// How many requests.
    pub(crate) fn len(&self) -> usize {
        self.head.len()
    }

    /// Request `i`'s bytes.
    #[inline]
    pub(crate) fn bytes(&self, i: usize) -> &[u8] {
        &self.bytes[self.starts[i]..self.starts[i + 1]]
    }

    /// Whether request `i` is a HEAD.
    #[inline]
    pub(crate) fn is_head(&self, i: usize) -> bool {
        self.head[i]
    }
}

/// Appends one request in HTTP/1.1's bytes, or HTTP/2's frames (refused if they would not fit).
fn append(
    out: &mut Vec<u8>,
    http2: bool,
    method: Method,
    path: &str,
    host: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), String> {
    if http2 {
        super::h2::append_request(out, method, path, host, headers, body)
    } else {
        super::request::append_request(out, method, path, host, headers, body);
        Ok(())
    }
}

/// A request file among a load probe's parameters (`http`'s, `tcp`'s): its name as given, the
/// text the controller read from it, and the order to send its requests in.
pub(crate) struct RequestFile<'a> {
    pub name: &'a str,
    pub text: &'a str,
    pub order: Order,
}

impl RequestFile<'_> {
    /// What a trial's record keeps of the file: `requests` (the name, never the text),
    /// `requests_order`, and for random order `requests_seed`.
    pub(crate) fn record(&self, resolved: &mut BTreeMap<String, String>) {
        resolved.insert("requests".into(), self.name.to_string());
        resolved.insert("requests_order".into(), self.order.as_str().into());
        if let Order::Random { seed } = self.order {
            resolved.insert("requests_seed".into(), seed.to_string());
        }
    }
}

/// The request file `params` give, if any, checked as both probes check it: `requests=` comes
/// with its `requests_text` (the controller sets both: an agent reads no caller's files), and
/// `requests_order`/`requests_seed` only with a file. None: no file, the probe's one request.
pub(crate) fn request_file<'a>(
    probe: &'static str,
    params: &'a BTreeMap<String, String>,
) -> Result<Option<RequestFile<'a>>, ParamError> {
    let bad = |key: &str, value: &str, why: String| ParamError::BadValue {
        probe,
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let file = params.get("requests");
    let Some(text) = params.get(REQUESTS_TEXT) else {
        if let Some(name) = file {
            return Err(bad(
                "requests",
                name,
                "names a file on the controller's machine: the controller reads it and sends its \
                 text (an agent reads no caller's files); run it through quietbench run or \
                 compare"
                    .into(),
            ));
        }
        if let Some(key) = ["requests_order", "requests_seed"]
            .into_iter()
            .find(|k| params.contains_key(*k))
        {
            return Err(bad(
                key,
                &params[key],
                "orders the requests of a file: give requests=FILE too".into(),
            ));
        }
        return Ok(None);
    };
    let Some(name) = file else {
        return Err(bad(
            REQUESTS_TEXT,
            &format!("({} bytes)", text.len()),
            "comes with requests=FILE, the file it was read from (the controller sets both)".into(),
        ));
    };
    let seed_text = params.get("requests_seed").map_or("0", String::as_str);
    let seed = seed_text
        .trim()
        .parse::<u64>()
        .map_err(|_| bad("requests_seed", seed_text, "give a whole number".into()))?;
    let order_text = params
        .get("requests_order")
        .map_or("sequence", String::as_str);
    let order =
        Order::parse(order_text, seed).map_err(|why| bad("requests_order", order_text, why))?;
    Ok(Some(RequestFile { name, text, order }))
}

/// The order a file's requests are sent in (`requests_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The file's order, the threads together (each thread from its index, by a stride of
    /// the threads).
    Sequence,
    /// Uniform draws with replacement, each thread from its own stream of `seed`.
    Random {
        /// `requests_seed`: the controller gives the run's seed.
        seed: u64,
    },
}

impl Order {
    /// `sequence` or `random`, with the seed random order draws from.
    pub(crate) fn parse(text: &str, seed: u64) -> Result<Self, String> {
        match text.trim() {
            "sequence" => Ok(Self::Sequence),
            "random" => Ok(Self::Random { seed }),
            _ => Err("give sequence (the file's order) or random".into()),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Sequence => "sequence",
            Self::Random { .. } => "random",
        }
    }
}

/// Which request one thread sends next: arithmetic or one draw, nothing allocated.
#[derive(Debug, Clone)]
pub(crate) enum Picker {
    Sequence {
        next: usize,
        stride: usize,
        len: usize,
    },
    Random {
        rng: Rng,
        len: u64,
    },
}

impl Picker {
    /// Thread `thread` of `threads` over `len` requests (`len` > 0).
    ///
    /// In sequence, the thread's request k is line `(k * threads + thread) mod len`: the
    /// schedule's request k of thread t is the trial's request `k * threads + t` (its slot in
    /// the open loop's schedule), so the threads together send the file in its order, wrapping
    /// at its end. Each thread walks the whole file (every line when `threads` and `len` have
    /// no common divisor) with a stride of `threads`, rather than a slice of its own: a slice
    /// would send the file's first lines only from thread 0. In a closed loop there is no
    /// shared schedule, and the same rule still has each thread send its share in order.
    ///
    /// Random: each thread's own SplitMix64 stream from `seed` and its index, so a trial with
    /// the same seed and threads draws the same requests.
    pub(crate) fn new(order: Order, len: usize, threads: usize, thread: usize) -> Self {
        let len = len.max(1);
        match order {
            Order::Sequence => Self::Sequence {
                next: thread % len,
                stride: threads % len,
                len,
            },
            Order::Random { seed } => Self::Random {
                rng: Rng::new(quietbench_stats::rng::mix(
                    seed ^ quietbench_stats::rng::mix(thread as u64),
                )),
                len: len as u64,
            },
        }
    }

    /// The index of the next request to send.
    #[inline]
    pub(crate) fn next(&mut self) -> usize {
        match self {
            Self::Sequence { next, stride, len } => {
                let i = *next;
                *next += *stride;
                if *next >= *len {
                    *next -= *len;
                }
                i
            }
            Self::Random { rng, len } => rng.below(*len) as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use quietbench_vocab::requests::parse_requests;

    use super::*;

    #[test]
    fn requests_are_formatted_once_into_one_buffer() {
        let requests = parse_requests("/a\nHEAD /b\nPOST /c").unwrap();
        let headers = vec![("X-T".to_string(), "1".to_string())];
        let set = RequestSet::format(false, &requests, "h", &headers, b"").unwrap();
        assert_eq!(set.len(), 3);
        assert_eq!(
            set.bytes(0),
            b"GET /a HTTP/1.1\r\nHost: h\r\nX-T: 1\r\n\r\n"
        );
        assert_eq!(
            set.bytes(1),
            b"HEAD /b HTTP/1.1\r\nHost: h\r\nX-T: 1\r\n\r\n"
        );
        assert!(set.bytes(2).ends_with(b"Content-Length: 0\r\n\r\n"));
        assert_eq!(
            (set.is_head(0), set.is_head(1), set.is_head(2)),
            (false, true, false)
        );
        // A body repeated in each of many requests is bounded as a whole.
        let text = "/x\n".repeat(5000);
        let many = parse_requests(&text).unwrap();
        let body = vec![b'b'; 16 * 1024];
        let err = RequestSet::format(false, &many, "h", &[], &body).unwrap_err();
        assert!(err.contains("over 64 MiB"), "{err}");
    }

    #[test]
    fn threads_in_sequence_send_the_file_in_order_together() {
        // 3 threads over 7 lines: the trial's request g (thread g % 3's request g / 3) is line
        // g mod 7.
        let mut pickers: Vec<Picker> = (0..3)
            .map(|t| Picker::new(Order::Sequence, 7, 3, t))
            .collect();
        for g in 0..50 {
            assert_eq!(pickers[g % 3].next(), g % 7, "request {g}");
        }
        // One request: always it.
        let mut one = Picker::new(Order::Sequence, 1, 4, 3);
        assert!((0..5).all(|_| one.next() == 0));
    }

    #[test]
    fn random_order_replays_its_seed_and_reaches_every_line() {
        let draw = |seed, thread| {
            let mut p = Picker::new(Order::Random { seed }, 10, 2, thread);
            (0..200).map(|_| p.next()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7, 0), draw(7, 0));
        assert_ne!(draw(7, 0), draw(7, 1));
        assert_ne!(draw(7, 0), draw(8, 0));
        let seen: std::collections::BTreeSet<usize> = draw(7, 0).into_iter().collect();
        assert_eq!(seen.len(), 10, "{seen:?}");
        assert_eq!(
            Order::parse("random", 3).unwrap(),
            Order::Random { seed: 3 }
        );
        assert!(
            Order::parse("shuffled", 3)
                .unwrap_err()
                .contains("sequence")
        );
    }
}
