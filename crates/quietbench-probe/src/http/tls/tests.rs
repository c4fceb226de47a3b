//! TlsConn against rustls's own server (the buffered one, a different code path from ours),
//! over real loopback sockets: the handshake, ALPN, requests both ways, a session ticket taken
//! in while idle, and a server that does not speak TLS.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::*;

/// A rustls server on a thread: one connection, answering each `ping\n` with `pong\n`, with
/// ALPN `alpn`. Its port.
fn ping_server(alpn: &'static [u8]) -> u16 {
    server(alpn, b"", &rustls::version::TLS13)
}

/// As [`ping_server`], sending `greeting` first, as soon as the handshake is done (as an
/// HTTP/2 server sends its SETTINGS).
fn server(
    alpn: &'static [u8],
    greeting: &'static [u8],
    version: &'static rustls::SupportedProtocolVersion,
) -> u16 {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (socket, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(Arc::new(config)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, socket);
        if !greeting.is_empty() && tls.write_all(greeting).is_err() {
            return;
        }
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while let Ok(1) = tls.read(&mut byte) {
            line.push(byte[0]);
            if line.ends_with(b"ping\n") {
                line.clear();
                if tls.write_all(b"pong\n").is_err() {
                    return;
                }
            }
        }
    });
    port
}

fn connect(port: u16) -> TcpStream {
    let socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket.set_nonblocking(true).unwrap();
    socket
}

/// Drives the handshake to its end, waiting between steps (no event loop here).
fn handshake(tls: &mut TlsConn, socket: &TcpStream) -> io::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if tls.handshake(socket)? == Handshake::Ready {
            return Ok(());
        }
        assert!(Instant::now() < until, "the handshake did not end");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `ping\n` and reads until the sink has `pong\n`.
fn ping(tls: &mut TlsConn, socket: &TcpStream) {
    tls.seal(b"ping\n").unwrap();
    while !tls.flush(socket).unwrap() {}
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = tls.read(socket, |bytes| {
            got.extend_from_slice(bytes);
            Ok(got.ends_with(b"pong\n"))
        });
        match outcome.unwrap() {
            Received::Done(true) => break,
            Received::Done(false) => {}
            Received::Closed => panic!("closed"),
        }
        assert!(Instant::now() < until, "no answer; got {got:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, b"pong\n");
}

#[test]
fn a_handshake_alpn_and_requests_both_ways() {
    for alpn in [b"h2".as_slice(), b"http/1.1"] {
        let port = ping_server(alpn);
        let client = TlsClient::new(alpn, &format!("localhost:{port}"), 64).unwrap();
        let socket = connect(port);
        let mut tls = TlsConn::new(&client).unwrap();
        handshake(&mut tls, &socket).unwrap();
        assert_eq!(tls.alpn(), Some(alpn));
        // Many requests on one connection, with the server's session tickets (TLS 1.3 sends
        // them after the handshake) taken in by the reads between them.
        for _ in 0..50 {
            ping(&mut tls, &socket);
        }
    }
}

/// In TLS 1.2 the server's Finished comes last, and what it sends next (an HTTP/2 server's
/// SETTINGS) can arrive with it, inside the handshake's last read.
#[test]
fn a_server_that_speaks_first_is_heard() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        greeted(version);
    }
}

fn greeted(version: &'static rustls::SupportedProtocolVersion) {
    let port = server(b"h2", b"hello\n", version);
    let client = TlsClient::new(b"h2", "localhost", 64).unwrap();
    let socket = connect(port);
    let mut tls = TlsConn::new(&client).unwrap();
    handshake(&mut tls, &socket).unwrap();
    // The greeting may have come with the handshake's last flight (then it is buffered, and
    // no readiness would announce it) or after: either way a read hands it over.
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while !got.ends_with(b"hello\n") {
        let outcome = tls.read(&socket, |bytes| {
            got.extend_from_slice(bytes);
            Ok(false)
        });
        assert_eq!(outcome.unwrap(), Received::Done(false));
        assert!(Instant::now() < until, "no greeting; got {got:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!tls.buffered());
    ping(&mut tls, &socket);
}

#[test]
fn sni_is_sent_for_names_and_not_for_addresses() {
    for (host, name) in [
        ("example.test:8443", "example.test"),
        ("example.test", "example.test"),
        ("10.0.0.5:80", "10.0.0.5"),
        ("[fd00::5]:80", "fd00::5"),
        ("fd00::5", "fd00::5"),
        ("fd00::abcd", "fd00::abcd"),
    ] {
        let client = TlsClient::new(b"h2", host, 64).unwrap();
        assert_eq!(client.name.to_str(), name, "{host}");
    }
}

#[test]
fn a_server_that_does_not_speak_tls_fails_the_handshake_with_why() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        std::thread::sleep(Duration::from_secs(5));
    });
    let client = TlsClient::new(b"http/1.1", "localhost", 64).unwrap();
    let socket = connect(port);
    let mut tls = TlsConn::new(&client).unwrap();
    let err = handshake(&mut tls, &socket).unwrap_err();
    assert!(err.to_string().starts_with("TLS: "), "{err}");
}

#[test]
fn requests_larger_than_a_record_fit_the_buffer_they_were_sized_for() {
    let port = ping_server(b"http/1.1");
    let big = vec![b'x'; 100_000];
    let client = TlsClient::new(b"http/1.1", "localhost", big.len()).unwrap();
    let socket = connect(port);
    let mut tls = TlsConn::new(&client).unwrap();
    handshake(&mut tls, &socket).unwrap();
    tls.seal(&big).unwrap();
    assert!(tls.pending());
}
