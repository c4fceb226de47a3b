//! TLS under the load loop (`tls=true`): HTTP/1.1 over TLS, or with `http2=true` HTTP/2 over
//! TLS (ALPN `h2`), on rustls's *unbuffered* client, the API that encrypts and decrypts in
//! buffers the caller owns. Each connection has two fixed buffers made when it is; responses
//! are decrypted where they land, and nothing of the loop's allocates per request. One
//! allocation per request remains, inside rustls 0.23: its record layer encodes each record it
//! encrypts into a vector of its own before copying it into our buffer (`write_fragments`);
//! the buffered `ClientConnection` does that too, and queues the copies in more vectors.
//!
//! What the loop sees is three calls: [`TlsConn::handshake`] until it says the connection is
//! ready (done before the trial, as TCP's connect is, and again at each reconnect, where it is
//! part of what a client of the server pays), [`TlsConn::seal`] then [`TlsConn::flush`] to
//! send, and [`TlsConn::read`], which hands each decrypted piece to the response reader. The
//! server's post-handshake messages (TLS 1.3 session tickets, a key update) are taken in by
//! `read` whenever they come, and what they ask to be sent goes out with the next flush.
//!
//! **The server's certificate is not verified** (the handshake's signature is, with the key
//! the certificate carries): the server is the one this trial started, reached by its IP
//! address, and a benchmark's server has a self-signed certificate more often than not, as
//! h2load and wrk assume too. SNI is sent when `host=` is a DNS name.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::response::Malformed;

/// The largest TLS record on the wire: 16 KiB of plaintext, its content type, padding and tag
/// (RFC 8446 §5.2: at most 2^14 + 256 bytes of ciphertext) and the 5-byte header. Incoming
/// records are decrypted where they land, so the buffer must hold a whole one.
const INCOMING_BYTES: usize = (1 << 14) + 256 + 5;
/// Room for handshake messages beside a request's records (a ClientHello is well under it).
const HANDSHAKE_BYTES: usize = 4096;

/// The client's settings, made once per probe thread and shared by its connections.
pub(crate) struct TlsClient {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    /// The outgoing buffer's size: the longest request's records and handshake room.
    outgoing_bytes: usize,
}

impl TlsClient {
    /// A client offering `alpn` (`h2` or `http/1.1`), sending SNI for `host` when it is a DNS
    /// name, with room to send requests of up to `longest` bytes of plaintext at once.
    pub(crate) fn new(alpn: &[u8], host: &str, longest: usize) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = Arc::new(Unverified {
            algorithms: provider.signature_verification_algorithms,
        });
        let mut config = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        // A name for SNI when the Host is one; an IP address sends none, as browsers do.
        let bare = without_port(host);
        let name = ServerName::try_from(bare.to_string())
            .map_err(|e| format!("host={host} is not a name TLS can send: {e}"))?;
        let records = longest.div_ceil(1 << 14).max(1);
        Ok(Self {
            config: Arc::new(config),
            name,
            outgoing_bytes: longest + records * 64 + HANDSHAKE_BYTES,
        })
    }
}

/// The host of a Host header's value: without its port, an IPv6 address without brackets.
fn without_port(host: &str) -> &str {
    if let Some(inner) = host.strip_prefix('[') {
        return inner.split_once(']').map_or(inner, |(ip, _)| ip);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => name,
        _ => host,
    }
}

/// Accepts any certificate; checks the handshake's signatures with the provider's algorithms.
#[derive(Debug)]
struct Unverified {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Where a handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Waiting for the server's bytes.
    WantRead,
    /// Waiting to write ours.
    WantWrite,
    /// Done: requests may go.
    Ready,
}

/// What a [`TlsConn::read`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    /// Nothing more to read now; whether the sink said the response is complete.
    Done(bool),
    /// The server closed the connection (close_notify, or the TCP stream's end).
    Closed,
}

/// One connection's TLS state and buffers.
pub(crate) struct TlsConn {
    conn: UnbufferedClientConnection,
    incoming: Box<[u8]>,
    incoming_used: usize,
    outgoing: Box<[u8]>,
    /// Ciphertext in `outgoing[sent..used]` waits to be written.
    outgoing_used: usize,
    outgoing_sent: usize,
    peer_closed: bool,
}

/// A TLS failure, as the loop counts it (and says it, in a connect's case).
pub(crate) fn failed(e: impl std::fmt::Display) -> io::Error {
    let text = e.to_string();
    // What rustls says of an answer that is not TLS at all, in the user's terms.
    if text.contains("InvalidContentType") {
        return io::Error::other(format!(
            "TLS: the server's answer is not TLS ({text}): does it serve cleartext on that port? \
             (tls=false)"
        ));
    }
    if text.contains("NoApplicationProtocol") {
        return io::Error::other(format!(
            "TLS: the server did not agree to the protocol asked for by ALPN ({text}): h2 with \
             http2=true, else http/1.1; give the other http2="
        ));
    }
    io::Error::other(format!("TLS: {text}"))
}

impl TlsConn {
    /// A new connection's TLS, before its handshake.
    pub(crate) fn new(client: &TlsClient) -> io::Result<Self> {
        let conn = UnbufferedClientConnection::new(Arc::clone(&client.config), client.name.clone())
            .map_err(failed)?;
        Ok(Self {
            conn,
            incoming: vec![0; INCOMING_BYTES].into_boxed_slice(),
            incoming_used: 0,
            outgoing: vec![0; client.outgoing_bytes].into_boxed_slice(),
            outgoing_used: 0,
            outgoing_sent: 0,
            peer_closed: false,
        })
    }

    /// Takes the connection's TLS state as far as it goes: what must be sent is sent (as far
    /// as the socket takes it), what must be read is read.
    pub(crate) fn handshake(&mut self, socket: &TcpStream) -> io::Result<Handshake> {
        loop {
            if !self.flush(socket)? {
                return Ok(Handshake::WantWrite);
            }
            let UnbufferedStatus { discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[..self.incoming_used]);
            let mut need_read = false;
            let mut ready = false;
            match state.map_err(failed)? {
                ConnectionState::EncodeTlsData(mut encode) => {
                    let n = encode
                        .encode(&mut self.outgoing[self.outgoing_used..])
                        .map_err(failed)?;
                    self.outgoing_used += n;
                }
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::BlockedHandshake => need_read = true,
                ConnectionState::WriteTraffic(_) => ready = true,
                // The server spoke first, right after the handshake (HTTP/2's SETTINGS): done,
                // its records left for the next `read` ([`Self::buffered`]).
                ConnectionState::ReadTraffic(_) => ready = true,
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(failed("the server closed the connection in the handshake"));
                }
                _ => return Err(failed("an unexpected handshake state")),
            }
            self.discard(discard);
            if ready {
                return Ok(if self.flush(socket)? {
                    Handshake::Ready
                } else {
                    Handshake::WantWrite
                });
            }
            if need_read && !self.receive(socket)? {
                return Ok(Handshake::WantRead);
            }
        }
    }

    /// Encrypts `plaintext` after whatever waits to be sent; refused if it does not fit (it
    /// always does: the buffer was sized for the longest request).
    pub(crate) fn seal(&mut self, plaintext: &[u8]) -> Result<(), Malformed> {
        const WHY: Malformed = Malformed::Tls("a request could not be encrypted");
        if self.outgoing_sent == self.outgoing_used {
            self.outgoing_sent = 0;
            self.outgoing_used = 0;
        }
        loop {
            let UnbufferedStatus { discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[..self.incoming_used]);
            let sealed = match state.map_err(|_| WHY)? {
                ConnectionState::WriteTraffic(mut write) => {
                    let n = write
                        .encrypt(plaintext, &mut self.outgoing[self.outgoing_used..])
                        .map_err(|_| WHY)?;
                    self.outgoing_used += n;
                    true
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    let n = encode
                        .encode(&mut self.outgoing[self.outgoing_used..])
                        .map_err(|_| WHY)?;
                    self.outgoing_used += n;
                    false
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    false
                }
                _ => return Err(Malformed::Tls("the connection cannot send")),
            };
            self.discard(discard);
            if sealed {
                return Ok(());
            }
        }
    }

    /// Whether the server's bytes wait in our buffer, unread: after a handshake the server
    /// spoke right after, a [`Self::read`] is due whether or not the socket says so.
    pub(crate) fn buffered(&self) -> bool {
        self.incoming_used > 0
    }

    /// Whether ciphertext waits to be written.
    pub(crate) fn pending(&self) -> bool {
        self.outgoing_sent < self.outgoing_used
    }

    /// Writes what waits; true when all of it is written, false when the socket is full.
    pub(crate) fn flush(&mut self, mut socket: &TcpStream) -> io::Result<bool> {
        while self.pending() {
            match socket.write(&self.outgoing[self.outgoing_sent..self.outgoing_used]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.outgoing_sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.outgoing_sent = 0;
        self.outgoing_used = 0;
        Ok(true)
    }

    /// Reads what the server sent, decrypts it, and hands each piece of plaintext to `sink`,
    /// which says whether the response is complete. Post-handshake messages are taken in, and
    /// what they ask to be sent waits for [`Self::flush`].
    pub(crate) fn read(
        &mut self,
        socket: &TcpStream,
        mut sink: impl FnMut(&[u8]) -> Result<bool, Malformed>,
    ) -> Result<Received, Malformed> {
        let mut complete = false;
        loop {
            let UnbufferedStatus { mut discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[..self.incoming_used]);
            let mut need_read = false;
            match state.map_err(|_| Malformed::Tls("a record could not be read"))? {
                ConnectionState::ReadTraffic(mut records) => {
                    while let Some(record) = records.next_record() {
                        let record =
                            record.map_err(|_| Malformed::Tls("a record could not be read"))?;
                        discard += record.discard;
                        complete = sink(record.payload)?;
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    let n = encode
                        .encode(&mut self.outgoing[self.outgoing_used..])
                        .map_err(|_| Malformed::Tls("a handshake message could not be sent"))?;
                    self.outgoing_used += n;
                }
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::PeerClosed | ConnectionState::Closed => self.peer_closed = true,
                // Every record there is has been taken in: read more.
                ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => {
                    need_read = true;
                }
                _ => return Err(Malformed::Tls("an unexpected state")),
            }
            self.discard(discard);
            if self.peer_closed {
                return Ok(Received::Closed);
            }
            if need_read {
                match self.receive(socket) {
                    Ok(true) => {}
                    Ok(false) => return Ok(Received::Done(complete)),
                    Err(_) => return Ok(Received::Closed),
                }
            }
        }
    }

    /// Reads ciphertext after what is held; false when there is none now. The stream's end
    /// (or a full buffer, which a record never fills) is an error.
    fn receive(&mut self, mut socket: &TcpStream) -> io::Result<bool> {
        loop {
            match socket.read(&mut self.incoming[self.incoming_used..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.incoming_used += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn discard(&mut self, n: usize) {
        if n > 0 {
            self.incoming.copy_within(n..self.incoming_used, 0);
            self.incoming_used -= n;
        }
    }

    /// The protocol the server chose by ALPN, once the handshake is done.
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }
}

#[cfg(test)]
mod tests;
