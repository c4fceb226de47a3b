//! The peer protocol's bytes: the header a client sends first on every TCP connection, the
//! trailer a source ends its stream with, and the UDP round-trip datagram. Pure encode and
//! decode, so every malformed input is tested without a socket.
//!
//! All integers are little-endian. Every size is bounded here, once, so the server allocates at
//! most these per connection whatever a client sends.

/// First bytes of every connection: `QBNP`.
pub const MAGIC: [u8; 4] = *b"QBNP";
/// The protocol version this build speaks (2: headers and UDP requests carry the trial's
/// secret).
pub const VERSION: u8 = 2;
/// Bytes of [`Header`] on the wire: 24 of fields, then the 16-byte secret.
pub const HEADER_LEN: usize = 24 + SECRET_LEN;
/// Bytes of a [`Secret`].
pub const SECRET_LEN: usize = 16;

/// The per-trial secret the controller hands both agents of a network probe: the peer server
/// serves only connections and datagrams that carry it, so its ports, open for one trial, are
/// no traffic source or sink for anyone else who reaches them.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Secret(pub [u8; SECRET_LEN]);

impl std::fmt::Debug for Secret {
    // Never printed: a log line must not hand the secret to a reader of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// From 32 hex digits (how it travels in gRPC requests and probe parameters).
    pub fn from_hex(text: &str) -> Result<Secret, String> {
        let text = text.trim();
        if text.len() != 2 * SECRET_LEN || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "the peer secret must be {} hex digits",
                2 * SECRET_LEN
            ));
        }
        let mut out = [0u8; SECRET_LEN];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
                .map_err(|_| "the peer secret is not hex".to_string())?;
        }
        Ok(Secret(out))
    }

    /// As 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `bytes` are this secret, in time that does not depend on where they differ.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        if bytes.len() != SECRET_LEN {
            return false;
        }
        let diff = self
            .0
            .iter()
            .zip(bytes)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}
/// Largest echo request or response (net.rr), bytes.
pub const MAX_MESSAGE: u32 = 1 << 20;
/// Largest write or read per system call in a throughput flow, bytes (iperf3's limit too).
pub const MAX_WRITE: u32 = 1 << 20;
/// Largest socket buffer a client may ask the server to set, bytes.
pub const MAX_BUFFER: u32 = 256 << 20;
/// Largest pacing rate a client may ask for, Mbit/s.
pub const MAX_PACING_MBIT: u32 = 1_000_000;

/// What the server does on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read and discard: the client sends (net.throughput mode=send).
    Sink,
    /// Write forever: the client receives (mode=reverse), until the client half-closes; then a
    /// [`Trailer`] and end of stream.
    Source,
    /// Read exactly `request_bytes`, write `response_bytes`, repeat (net.rr over TCP).
    Echo,
}

impl Mode {
    fn code(self) -> u8 {
        match self {
            Mode::Sink => 1,
            Mode::Source => 2,
            Mode::Echo => 3,
        }
    }
}

/// The fixed header a client sends before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the server does.
    pub mode: Mode,
    /// Echo: bytes per request. Sink: the client's write size, which the sink reads with
    /// (0: the default, 128 KiB).
    pub request_bytes: u32,
    /// Echo: bytes per response. Source: the server's write size.
    pub response_bytes: u32,
    /// SO_SNDBUF/SO_RCVBUF for the server's socket; 0 leaves the kernel's autotuning.
    pub buffer_bytes: u32,
    /// SO_MAX_PACING_RATE for the server's socket (a source's sending), Mbit/s; 0: none.
    pub pacing_mbit: u32,
    /// The trial's secret; the server closes a connection whose secret is not its own.
    pub secret: Secret,
}

/// Why a header was refused (the connection is then closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not this protocol.
    #[error("not a quietbench peer connection (bad magic)")]
    Magic,
    /// Another version.
    #[error("peer protocol version {0} is not supported (this build speaks {VERSION})")]
    Version(u8),
    /// Unknown mode byte.
    #[error("unknown mode {0}")]
    Mode(u8),
    /// Reserved bytes set.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// The secret is not this trial's.
    #[error("the connection does not carry this trial's secret")]
    Secret,
    /// A size outside its bounds.
    #[error("{field} = {value} is outside 1..={max}")]
    Size {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u32,
        /// Its bound.
        max: u32,
    },
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn check(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), HeaderError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(HeaderError::Size { field, value, max })
    }
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.mode.code();
        out[8..12].copy_from_slice(&self.request_bytes.to_le_bytes());
        out[12..16].copy_from_slice(&self.response_bytes.to_le_bytes());
        out[16..20].copy_from_slice(&self.buffer_bytes.to_le_bytes());
        out[20..24].copy_from_slice(&self.pacing_mbit.to_le_bytes());
        out[24..HEADER_LEN].copy_from_slice(&self.secret.0);
        out
    }

    /// Checks and decodes a header: it carries `secret`, and the sizes a server then allocates
    /// are within the bounds.
    pub fn decode(bytes: &[u8; HEADER_LEN], secret: &Secret) -> Result<Header, HeaderError> {
        if bytes[0..4] != MAGIC {
            return Err(HeaderError::Magic);
        }
        if bytes[4] != VERSION {
            return Err(HeaderError::Version(bytes[4]));
        }
        let mode = match bytes[5] {
            1 => Mode::Sink,
            2 => Mode::Source,
            3 => Mode::Echo,
            other => return Err(HeaderError::Mode(other)),
        };
        if bytes[6..8] != [0, 0] {
            return Err(HeaderError::Reserved);
        }
        if !secret.matches(&bytes[24..HEADER_LEN]) {
            return Err(HeaderError::Secret);
        }
        let header = Header {
            mode,
            request_bytes: u32_at(bytes, 8),
            response_bytes: u32_at(bytes, 12),
            buffer_bytes: u32_at(bytes, 16),
            pacing_mbit: u32_at(bytes, 20),
            secret: *secret,
        };
        match mode {
            Mode::Sink => check("request_bytes", header.request_bytes, 0, MAX_WRITE)?,
            Mode::Source => check("response_bytes", header.response_bytes, 1, MAX_WRITE)?,
            Mode::Echo => {
                check("request_bytes", header.request_bytes, 1, MAX_MESSAGE)?;
                check("response_bytes", header.response_bytes, 1, MAX_MESSAGE)?;
            }
        }
        check("buffer_bytes", header.buffer_bytes, 0, MAX_BUFFER)?;
        check("pacing_mbit", header.pacing_mbit, 0, MAX_PACING_MBIT)?;
        Ok(header)
    }
}

/// Bytes of [`Trailer`] on the wire.
pub const TRAILER_LEN: usize = 16;
/// Last bytes of a source's stream: `QBTR`.
pub const TRAILER_MAGIC: [u8; 4] = *b"QBTR";

/// What a source says about its sending socket when the client half-closes: the sender's
/// TCP_INFO, since only the sender counts its retransmits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// tcpi_total_retrans of the server's socket.
    pub total_retrans: u32,
    /// tcpi_rtt of the server's socket, microseconds.
    pub rtt_us: u32,
}

impl Trailer {
    /// The trailer's bytes.
    pub fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut out = [0; TRAILER_LEN];
        out[0..4].copy_from_slice(&self.total_retrans.to_le_bytes());
        out[4..8].copy_from_slice(&self.rtt_us.to_le_bytes());
        out[12..16].copy_from_slice(&TRAILER_MAGIC);
        out
    }

    /// The trailer in the last bytes of a stream, if they are one.
    pub fn decode(tail: &[u8; TRAILER_LEN]) -> Option<Trailer> {
        (tail[12..16] == TRAILER_MAGIC && tail[8..12] == [0; 4]).then(|| Trailer {
            total_retrans: u32_at(tail, 0),
            rtt_us: u32_at(tail, 4),
        })
    }
}

/// The last [`TRAILER_LEN`] bytes of a stream, kept while draining it.
#[derive(Debug, Clone, Default)]
pub struct Tail {
    bytes: [u8; TRAILER_LEN],
}

impl Tail {
    /// Appends what was just read.
    pub fn push(&mut self, read: &[u8]) {
        if read.len() >= TRAILER_LEN {
            self.bytes
                .copy_from_slice(&read[read.len() - TRAILER_LEN..]);
        } else {
            self.bytes.copy_within(read.len().., 0);
            self.bytes[TRAILER_LEN - read.len()..].copy_from_slice(read);
        }
    }

    /// The last bytes seen.
    pub fn bytes(&self) -> &[u8; TRAILER_LEN] {
        &self.bytes
    }
}

/// First bytes of every UDP round-trip datagram: `QBNU`.
pub const UDP_MAGIC: [u8; 4] = *b"QBNU";
/// Smallest UDP request: magic, sequence, response size, reserved, then the trial's secret.
pub const UDP_MIN: u32 = 16 + SECRET_LEN as u32;
/// Smallest UDP response: magic, sequence (echoed), and room for the rest of the header.
pub const UDP_RESPONSE_MIN: u32 = 16;
/// Largest UDP payload over IPv4.
pub const UDP_MAX: u32 = 65_507;

/// Writes a UDP request's header into the first [`UDP_MIN`] bytes of `datagram`.
pub fn encode_udp_request(datagram: &mut [u8], seq: u32, response_bytes: u32, secret: &Secret) {
    datagram[0..4].copy_from_slice(&UDP_MAGIC);
    datagram[4..8].copy_from_slice(&seq.to_le_bytes());
    datagram[8..12].copy_from_slice(&response_bytes.to_le_bytes());
    datagram[12..16].fill(0);
    datagram[16..UDP_MIN as usize].copy_from_slice(&secret.0);
}

/// The server's reading of a UDP request: the response's size, or None (the datagram is
/// dropped) when it is not one of ours, lacks this trial's `secret`, or asks for too much.
pub fn udp_response_len(datagram: &[u8], secret: &Secret) -> Option<usize> {
    if datagram.len() < UDP_MIN as usize
        || datagram[0..4] != UDP_MAGIC
        || !secret.matches(&datagram[16..UDP_MIN as usize])
    {
        return None;
    }
    let response = u32_at(datagram, 8);
    (UDP_RESPONSE_MIN..=UDP_MAX)
        .contains(&response)
        .then_some(response as usize)
}

/// The sequence number of a UDP response, when it is one of ours.
pub fn udp_response_seq(datagram: &[u8]) -> Option<u32> {
    (datagram.len() >= 8 && datagram[0..4] == UDP_MAGIC).then(|| u32_at(datagram, 4))
}

#[cfg(test)]
mod tests;
