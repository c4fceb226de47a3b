//! The test server's `--tls` mode (tests/src/bin/testserver.rs) on its own, before any probe
//! speaks to it: HTTP/1.1 over TLS (`--tls`, checked with rustls's blocking client on a std
//! TcpStream) and HTTP/2 over TLS (`--tls --h2`, checked with tokio-rustls under the h2 crate's
//! client): the negotiated ALPN, status, body, the `x-work` header, keep-alive, close_notify at
//! a close, the refusal of a client offering only the other protocol, the certificate's names,
//! SIGTERM. No openssl or curl: the clients are rustls on aws-lc-rs, as the probe's is.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
    StreamOwned,
};

/// The test server, built with these tests.
const TESTSERVER: &str = env!("CARGO_BIN_EXE_testserver");
/// A bound on every wait: generous, nothing here measures the machine's speed.
const LIMIT: Duration = Duration::from_secs(60);

/// A test server started with `--port 0`: the port it says it listens on. Killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(TESTSERVER)
            .args(["--port", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the test server");
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|addr| addr.parse::<std::net::SocketAddr>().ok())
            .unwrap_or_else(|| panic!("the test server's first line: {line:?}"))
            .port();
        Server { child, port }
    }

    /// SIGTERM, then its exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Accepts any certificate (the server's is self-signed), keeping the last one it was shown;
/// checks the handshake's signatures.
#[derive(Debug, Default)]
struct AcceptAny {
    seen: Mutex<Option<CertificateDer<'static>>>,
}

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.clone().into_owned());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, &algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, &algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client offering `alpn` (none when empty) that accepts any certificate through `verifier`.
fn client_config(alpn: &[&[u8]], verifier: Arc<AcceptAny>) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A blocking TLS connection to 127.0.0.1:`port` (SNI `localhost`), its handshake done.
fn connect_http1(
    port: u16,
    config: Arc<ClientConfig>,
) -> std::io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(LIMIT))?;
    tcp.set_write_timeout(Some(LIMIT))?;
    let conn = ClientConnection::new(config, ServerName::try_from("localhost").unwrap())
        .map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// One HTTP/1.1 answer: its status line, headers (names lowercased) and body.
struct Answer1 {
    status_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer1 {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one answer (its body by Content-Length; none to a HEAD).
fn read_answer(reader: &mut impl BufRead, head_request: bool) -> Answer1 {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header line");
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut answer = Answer1 {
        status_line: status_line.trim_end().to_string(),
        headers,
        body: Vec::new(),
    };
    let length: usize = answer
        .header("content-length")
        .expect("Content-Length")
        .parse()
        .unwrap();
    if !head_request {
        answer.body = vec![0; length];
        reader.read_exact(&mut answer.body).unwrap();
    }
    answer
}

/// What the server's body is: "Hello, world\n" repeated to `n` bytes.
fn expected_body(n: usize) -> Vec<u8> {
    b"Hello, world\n".iter().copied().cycle().take(n).collect()
}

fn is_work(value: &str) -> bool {
    value.len() == 16 && u64::from_str_radix(value, 16).is_ok()
}

#[test]
fn tls_serves_http1_with_keep_alive_and_closes_with_close_notify() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paths.log");
    let server = Server::start(&[
        "--tls",
        "--work",
        "1000",
        "--body-bytes",
        "100000",
        "--paths-log",
        log.to_str().unwrap(),
    ]);
    let verifier = Arc::new(AcceptAny::default());
    let tls = connect_http1(server.port, client_config(&[b"http/1.1"], verifier.clone())).unwrap();
    assert_eq!(tls.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut tls = BufReader::new(tls);

    tls.get_mut()
        .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let get = read_answer(&mut tls, false);
    assert_eq!(get.status_line, "HTTP/1.1 200 OK");
    assert_eq!(get.header("content-length"), Some("100000"));
    assert!(get.body == expected_body(100_000), "the body repeats BODY");
    let work = get.header("x-work").unwrap().to_string();
    assert!(is_work(&work), "x-work: {work:?}");

    // The same connection: a HEAD, a POST with a body, then one that asks to close.
    tls.get_mut()
        .write_all(b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let head = read_answer(&mut tls, true);
    assert_eq!(head.status_line, "HTTP/1.1 200 OK");
    assert_eq!(head.header("x-work"), Some(work.as_str()));
    tls.get_mut()
        .write_all(b"POST /y?z=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    assert_eq!(read_answer(&mut tls, false).body.len(), 100_000);
    tls.get_mut()
        .write_all(b"GET /z HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let last = read_answer(&mut tls, false);
    assert_eq!(last.header("connection"), Some("close"));
    assert_eq!(last.body.len(), 100_000);
    // The server's close_notify: a clean end of stream, not an unexpected EOF.
    let mut rest = Vec::new();
    tls.read_to_end(&mut rest)
        .expect("the server closes with close_notify");
    assert!(rest.is_empty(), "nothing after the last answer: {rest:?}");

    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        ["GET /x", "HEAD /x", "POST /y?z=1", "GET /z"]
    );

    // The certificate the server showed is for "localhost" and 127.0.0.1: a verifying client
    // that trusts it (and nothing else) accepts the server by either name.
    let cert = verifier
        .seen
        .lock()
        .unwrap()
        .clone()
        .expect("a certificate");
    let mut roots = RootCertStore::empty();
    roots.add(cert).unwrap();
    for name in ["localhost", "127.0.0.1"] {
        let config = Arc::new(
            ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
        );
        let tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        tcp.set_read_timeout(Some(LIMIT)).unwrap();
        let conn = ClientConnection::new(config, ServerName::try_from(name).unwrap()).unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .unwrap_or_else(|e| panic!("the certificate is valid for {name}: {e}"));
        }
        // No ALPN offered: served as HTTP/1.1.
        assert_eq!(tls.conn.alpn_protocol(), None);
        tls.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let answer = read_answer(&mut BufReader::new(&mut tls), false);
        assert_eq!(answer.status_line, "HTTP/1.1 200 OK");
    }
    assert!(server.terminate().success(), "SIGTERM exits 0 in --tls too");
}

#[test]
fn tls_answers_with_the_status_it_is_given() {
    let server = Server::start(&["--tls", "--status", "503", "--body-bytes", "0"]);
    let config = client_config(&[b"http/1.1"], Arc::default());
    let mut tls = BufReader::new(connect_http1(server.port, config).unwrap());
    for _ in 0..3 {
        tls.get_mut()
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let answer = read_answer(&mut tls, false);
        assert_eq!(answer.status_line, "HTTP/1.1 503 Service Unavailable");
        assert_eq!(answer.header("content-length"), Some("0"));
        assert!(answer.header("x-work").is_some_and(is_work));
    }
}

/// An HTTP/2 connection over TLS (ALPN `alpn`) to 127.0.0.1:`port`, with the protocol the
/// server chose.
async fn connect_h2(
    port: u16,
    alpn: &[&[u8]],
) -> std::io::Result<(h2::client::SendRequest<Bytes>, Option<Vec<u8>>)> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let connector = tokio_rustls::TlsConnector::from(client_config(alpn, Arc::default()));
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let chosen = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let (client, connection) = h2::client::handshake(tls)
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, chosen))
}

/// `method path` on `client`'s connection: the status, headers and whole body.
async fn request_h2(
    client: &h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
) -> (u16, http::HeaderMap, Vec<u8>) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let (parts, mut stream) = response.await.unwrap().into_parts();
    let mut body = Vec::new();
    while let Some(data) = stream.data().await {
        let data = data.unwrap();
        body.extend_from_slice(&data);
        // Given back, or a body past the first window (64 KiB) would never come.
        stream.flow_control().release_capacity(data.len()).unwrap();
    }
    (parts.status.as_u16(), parts.headers, body)
}

#[tokio::test]
async fn tls_h2_serves_http2_over_alpn_h2() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paths.log");
    let server = Server::start(&[
        "--tls",
        "--h2",
        "--work",
        "1000",
        "--body-bytes",
        "100000",
        "--paths-log",
        log.to_str().unwrap(),
    ]);
    let port = server.port;
    tokio::time::timeout(LIMIT, async {
        let (client, chosen) = connect_h2(port, &[b"h2"]).await.unwrap();
        assert_eq!(chosen.as_deref(), Some(&b"h2"[..]));
        let (status, headers, body) = request_h2(&client, "GET", "/x").await;
        assert_eq!(status, 200);
        assert_eq!(body.len(), 100_000);
        assert!(body == expected_body(100_000), "the body repeats BODY");
        assert_eq!(headers["content-length"], "100000");
        assert!(is_work(headers["x-work"].to_str().unwrap()));

        let (status, _, body) = request_h2(&client, "HEAD", "/x").await;
        assert_eq!((status, body.len()), (200, 0), "HEAD gets no body");

        // Streams in flight together on the one connection: each answered whole.
        let streams: Vec<_> = (0..4)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move { request_h2(&client, "GET", &format!("/m{i}")).await })
            })
            .collect();
        for stream in streams {
            let (status, _, body) = stream.await.unwrap();
            assert_eq!((status, body.len()), (200, 100_000));
        }
    })
    .await
    .expect("the h2 exchanges over TLS finish in time");
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines[..2], ["GET /x", "HEAD /x"]);
    assert_eq!(lines.len(), 6);
    assert!(
        server.terminate().success(),
        "SIGTERM exits 0 in --tls --h2"
    );
}

#[tokio::test]
async fn each_tls_mode_refuses_a_client_offering_only_the_other_protocol() {
    let h2 = Server::start(&["--tls", "--h2"]);
    let http1 = Server::start(&["--tls"]);
    tokio::time::timeout(LIMIT, async {
        let refused = connect_h2(h2.port, &[b"http/1.1"]).await;
        assert!(
            refused.is_err(),
            "--tls --h2 served a client offering only http/1.1"
        );
        let refused = tokio::task::spawn_blocking(move || {
            connect_http1(http1.port, client_config(&[b"h2"], Arc::default())).map(|_| ())
        })
        .await
        .unwrap();
        assert!(refused.is_err(), "--tls served a client offering only h2");
    })
    .await
    .expect("the refusals come in time");
}

#[test]
fn tls_and_raw_are_refused_together() {
    let out = Command::new(TESTSERVER)
        .args(["--port", "0", "--tls", "--raw"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
