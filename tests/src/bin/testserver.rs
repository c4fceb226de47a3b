//! testserver: a small HTTP/1.1 keep-alive server with a known cost per request, the user's
//! server of the end-to-end tests of the `http` probe (tests/server_lifecycle.rs): it runs
//! under an agent's StartServer as a user's server would, and it can be told to be slow to
//! listen, to exit early, or to answer with a given status, so that every branch of the
//! agent's readiness and stop can be reached.
//!
//! One thread per connection (std only: the tests measure the agent, not this server). Each
//! request runs `--work` iterations of a fixed integer loop, whose result goes out in the
//! `X-Work` header so that the loop cannot be optimised away, and sleeps `--delay-us`;
//! `--slots N` serves at most N requests at once (capacity N / delay, whatever the CPU).
//! `--paths-log FILE` appends each request's method and target to FILE, a line each, so a
//! test can see which requests arrived (tests/http_requests.rs).
//! `--raw` speaks a line protocol instead, for the `tcp` probe (tests/tcp_server.rs): each
//! request is a line, each answer the fixed-length line `+OK <the work's result in 16 hex
//! digits>\n` (21 bytes), after the same work and delay.
//! `--h2` speaks HTTP/2 over cleartext TCP with prior knowledge instead (the client sends the
//! HTTP/2 preface at once: no TLS, no Upgrade), for the `http` probe's `http2=true`: every
//! stream is answered as an HTTP/1.1 request is (the same work, delay, status, body, header
//! and log line; HEAD gets no body; a request's body is read and dropped). Each connection's
//! thread runs a current-thread tokio runtime, whose streams take turns on that thread: the
//! work and the delay (std's sleep, which keeps its microseconds where tokio's timer rounds up
//! to a millisecond) block it, so a connection's requests are served one at a time, as a
//! keep-alive HTTP/1.1 connection's are, however many streams the client opens on it.
//! `--tls` speaks TLS, for the `http` probe's `tls=true`: at start the server makes a
//! self-signed certificate for "localhost" and the `--bind` address (rcgen; rustls on aws-lc-rs,
//! the binary's one provider). Alone it serves HTTP/1.1 over TLS (ALPN `http/1.1`; a client
//! that offers no ALPN is served too), with the same request handling, a std thread per
//! connection; with `--h2` it serves HTTP/2 over TLS (ALPN `h2` only), tokio-rustls under the
//! same h2 server. A client offering only the other protocol fails the handshake.
//! SIGTERM ends it with status 0; "listening on ADDR" on stderr says it is ready.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use tokio::io::{AsyncRead, AsyncWrite};

#[derive(Debug, Parser)]
#[command(
    name = "testserver",
    about = "An HTTP/1.1 keep-alive server (or with --raw a line server, with --h2 an HTTP/2 \
             cleartext server, with --tls either HTTP over TLS with a self-signed certificate) \
             with a known per-request cost, for the end-to-end tests of the http probe; exits \
             0 at SIGTERM"
)]
struct Args {
    /// The TCP port to listen on
    #[arg(long, value_name = "N")]
    port: u16,
    /// The address to listen on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Iterations of a fixed CPU-bound loop per request: a known cost
    #[arg(long, value_name = "N", default_value_t = 0)]
    work: u64,
    /// Microseconds to sleep per request
    #[arg(long, value_name = "N", default_value_t = 0)]
    delay_us: u64,
    /// Serve at most N requests at once, whatever the connections: the others wait for a
    /// slot. With --delay-us D the server's capacity is N / D, a known figure that no CPU's
    /// speed moves (the capacity search's tests)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    slots: Option<u64>,
    /// The status code of every answer
    #[arg(long, value_name = "CODE", default_value_t = 200,
          value_parser = clap::value_parser!(u16).range(100..=999))]
    status: u16,
    /// Bytes of every answer's body
    #[arg(long, value_name = "N", default_value_t = 13,
          value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    body_bytes: u64,
    /// Listen only after this many milliseconds (a server slow to become ready)
    #[arg(long, value_name = "N", default_value_t = 0)]
    ready_after_ms: u64,
    /// Exit with status 3 after this many milliseconds, saying so on stderr (an early exit)
    #[arg(long, value_name = "N")]
    exit_after_ms: Option<u64>,
    /// Append each request's method and target ("GET /a?b=1") to this file, a line each
    /// (with --raw: each request line)
    #[arg(long, value_name = "FILE")]
    paths_log: Option<std::path::PathBuf>,
    /// Speak a line protocol, not HTTP: read a line, do the work and the delay, answer
    /// "+OK <16 hex digits>\n"
    #[arg(long)]
    raw: bool,
    /// Speak HTTP/2 over cleartext TCP with prior knowledge (h2c: no TLS, no Upgrade; with
    /// --tls over TLS, ALPN h2), each stream answered as an HTTP/1.1 request is
    #[arg(long, conflicts_with = "raw")]
    h2: bool,
    /// Speak TLS with a self-signed certificate for "localhost" and the --bind address, made at
    /// start (no CA: a client skips verification or trusts the certificate it is shown):
    /// HTTP/1.1 over TLS (ALPN http/1.1), or with --h2 HTTP/2 over TLS (ALPN h2)
    #[arg(long, conflicts_with = "raw")]
    tls: bool,
}

/// The longest request line or header accepted.
const MAX_LINE_BYTES: usize = 8 * 1024;
/// Headers of one request.
const MAX_HEADERS: usize = 100;
/// The largest request body accepted.
const MAX_BODY_BYTES: u64 = 64 << 20;
/// What the body repeats.
const BODY: &[u8] = b"Hello, world\n";
/// The status `--exit-after-ms` exits with.
const EARLY_EXIT_STATUS: i32 = 3;
/// `--h2`: the most body bytes asked of the flow-control window at a time, so that a large
/// `--body-bytes` is sent as the client reads it, never buffered whole.
const H2_CHUNK_BYTES: usize = 64 * 1024;

/// The fixed per-request loop: `n` rounds of xorshift64, which no compiler folds into a
/// formula, so its cost grows with `n`.
fn work(n: u64) -> u64 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..std::hint::black_box(n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// The slots `--slots` gives: how many requests are being served now, and a wake-up for the
/// ones waiting.
static BUSY: (Mutex<u64>, std::sync::Condvar) = (Mutex::new(0), std::sync::Condvar::new());

/// One request's work and delay, in one of `--slots` slots when given; returns the work's
/// result.
fn serve_one(args: &Args) -> u64 {
    let Some(slots) = args.slots else {
        return work_and_delay(args);
    };
    let (busy, freed) = &BUSY;
    {
        let mut now = busy.lock().unwrap_or_else(|p| p.into_inner());
        while *now >= slots {
            now = freed.wait(now).unwrap_or_else(|p| p.into_inner());
        }
        *now += 1;
    }
    let result = work_and_delay(args);
    *busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
    freed.notify_one();
    result
}

fn work_and_delay(args: &Args) -> u64 {
    let result = work(args.work);
    if args.delay_us > 0 {
        thread::sleep(Duration::from_micros(args.delay_us));
    }
    result
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// One request's head, as far as this server cares.
#[derive(Debug, Default, PartialEq, Eq)]
struct Head {
    /// The request line's method and target.
    method: String,
    target: String,
    content_length: u64,
    /// The client asked to close (or spoke HTTP/1.0 without keep-alive).
    close: bool,
    chunked: bool,
}

/// Why a connection ends without another request.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The peer closed (or broke) the connection.
    Gone,
    /// A malformed or too large request: answered with this status, then closed.
    Answer(u16),
}

/// A line without its CRLF; `Gone` at the end of the stream.
fn read_line(reader: &mut impl BufRead) -> Result<String, Refusal> {
    let mut line = Vec::new();
    let n = reader
        .by_ref()
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|_| Refusal::Gone)?;
    if n == 0 {
        return Err(Refusal::Gone);
    }
    if !line.ends_with(b"\n") {
        return Err(if line.len() > MAX_LINE_BYTES {
            Refusal::Answer(431)
        } else {
            Refusal::Gone
        });
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| Refusal::Answer(400))
}

/// Reads a request's head (its line and headers).
fn read_head(reader: &mut impl BufRead) -> Result<Head, Refusal> {
    let request_line = read_line(reader)?;
    let mut words = request_line.split_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(Refusal::Answer(400));
    };
    let mut head = Head {
        method: method.to_string(),
        target: target.to_string(),
        close: version == "HTTP/1.0",
        ..Head::default()
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Refusal::Answer(400));
    }
    for _ in 0..=MAX_HEADERS {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Ok(head);
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Refusal::Answer(400));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                head.content_length = value.parse().map_err(|_| Refusal::Answer(400))?;
            }
            "transfer-encoding" => head.chunked = true,
            "connection" => {
                for token in value.split(',').map(|t| t.trim().to_ascii_lowercase()) {
                    match token.as_str() {
                        "close" => head.close = true,
                        "keep-alive" => head.close = false,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Err(Refusal::Answer(431))
}

/// Writes one answer: `status`, `body_bytes` of body (none to a HEAD), and the work's result.
fn answer(
    out: &mut impl Write,
    status: u16,
    body_bytes: u64,
    work_result: u64,
    close: bool,
    head_request: bool,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {body_bytes}\r\nContent-Type: text/plain\r\n\
         X-Work: {work_result:016x}\r\n",
        reason(status)
    );
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    // A HEAD's answer says the body's length and sends none (RFC 9110 9.3.2): a client reads
    // no body after it, and bytes sent anyway would be read as the next answer.
    let mut left = if head_request { 0 } else { body_bytes };
    while left > 0 {
        let chunk = left.min(BODY.len() as u64) as usize;
        out.write_all(&BODY[..chunk])?;
        left -= chunk as u64;
    }
    out.flush()
}

/// A stream whose writes are buffered (flushed at each answer's end) and whose reads go to it
/// directly: under `serve`'s one BufReader, one stream (a TcpStream, or TLS over one) carries
/// both directions.
struct WriteBuffered<S: Write>(std::io::BufWriter<S>);

impl<S: Read + Write> Read for WriteBuffered<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.get_mut().read(buf)
    }
}

impl<S: Write> Write for WriteBuffered<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Serves one connection until it closes or asks to; logs each request's line to `log`.
fn serve(stream: impl Read + Write, args: &Args, log: Option<&Mutex<std::fs::File>>) {
    let mut reader = BufReader::new(WriteBuffered(std::io::BufWriter::new(stream)));
    loop {
        let head = match read_head(&mut reader) {
            Ok(head) => head,
            Err(Refusal::Gone) => return,
            Err(Refusal::Answer(status)) => {
                let _ = answer(reader.get_mut(), status, 0, 0, true, false);
                return;
            }
        };
        if let Some(log) = log {
            // One write of the whole line under the lock: lines of concurrent connections
            // never interleave.
            let line = format!("{} {}\n", head.method, head.target);
            let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
            if file.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
        if head.chunked {
            let _ = answer(reader.get_mut(), 501, 0, 0, true, false);
            return;
        }
        if head.content_length > MAX_BODY_BYTES {
            let _ = answer(reader.get_mut(), 413, 0, 0, true, false);
            return;
        }
        let copied = std::io::copy(
            &mut reader.by_ref().take(head.content_length),
            &mut std::io::sink(),
        );
        if !matches!(copied, Ok(n) if n == head.content_length) {
            return;
        }
        let result = serve_one(args);
        if answer(
            reader.get_mut(),
            args.status,
            args.body_bytes,
            result,
            head.close,
            head.method == "HEAD",
        )
        .is_err()
            || head.close
        {
            return;
        }
    }
}

/// `--tls`'s ALPN protocols: `h2` alone with `--h2`, else `http/1.1` alone.
fn tls_alpn(h2: bool) -> Vec<Vec<u8>> {
    vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }]
}

/// `--tls`: the server's settings, with a new self-signed certificate for "localhost" and
/// `bind`, on the aws-lc-rs provider (named, not the process default: no other may be linked).
fn tls_config(bind: IpAddr, h2: bool) -> anyhow::Result<Arc<ServerConfig>> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(["localhost".to_string(), bind.to_string()])
            .context("cannot make the self-signed certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .context("cannot use the self-signed certificate")?;
    config.alpn_protocols = tls_alpn(h2);
    Ok(Arc::new(config))
}

/// `--tls` without `--h2`: serves one connection as `serve` does, over TLS (the handshake is
/// done at the first read), then says close_notify if the handshake was done.
fn serve_tls(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    args: &Args,
    log: Option<&Mutex<std::fs::File>>,
) {
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut tls = StreamOwned::new(conn, stream);
    serve(&mut tls, args, log);
    if !tls.conn.is_handshaking() {
        tls.conn.send_close_notify();
    }
    // What is queued (close_notify, or the alert of a failed handshake) goes out; no reading.
    while tls.conn.wants_write() && matches!(tls.conn.write_tls(&mut tls.sock), Ok(n) if n > 0) {}
}

/// `--raw`'s answer: fixed length (21 bytes), carrying the work's result.
fn raw_answer(work_result: u64) -> String {
    format!("+OK {work_result:016x}\n")
}

/// `--raw`: serves one connection's lines until it closes; a line too long or not UTF-8
/// closes it.
fn serve_raw(stream: TcpStream, args: &Args, log: Option<&Mutex<std::fs::File>>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Ok(line) = read_line(&mut reader) {
        if let Some(log) = log {
            let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
            if file.write_all(format!("{line}\n").as_bytes()).is_err() {
                return;
            }
        }
        let result = serve_one(args);
        if writer.write_all(raw_answer(result).as_bytes()).is_err() {
            return;
        }
    }
}

/// `--h2`'s body source: BODY repeated past `H2_CHUNK_BYTES`, built once; each DATA write is
/// a slice of it (shared, not copied).
fn h2_body_pattern() -> &'static Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    PATTERN.get_or_init(|| Bytes::from(BODY.repeat(H2_CHUNK_BYTES / BODY.len() + 2)))
}

/// Bytes `offset..offset + len` of a body of BODY repeated (what `answer` writes), `len` at
/// most `H2_CHUNK_BYTES`.
fn h2_body_chunk(pattern: &Bytes, offset: u64, len: usize) -> Bytes {
    let start = (offset % BODY.len() as u64) as usize;
    pattern.slice(start..start + len)
}

/// `--h2`'s response head: what `answer` says, as HTTP/2 headers (no reason phrase, no
/// Connection).
fn h2_head(status: u16, body_bytes: u64, work_result: u64) -> Option<http::Response<()>> {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_LENGTH, body_bytes)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .header("x-work", format!("{work_result:016x}"))
        .body(())
        .ok()
}

/// Sends `body_bytes` of body on `send` as the peer's flow-control window allows, ending the
/// stream with the last byte.
async fn h2_send_body(send: &mut h2::SendStream<Bytes>, body_bytes: u64) -> Result<(), h2::Error> {
    let pattern = h2_body_pattern();
    let mut sent = 0;
    while sent < body_bytes {
        let left = body_bytes - sent;
        send.reserve_capacity(left.min(H2_CHUNK_BYTES as u64) as usize);
        while send.capacity() == 0 {
            match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                // The stream was reset: nobody reads the rest.
                None => return Ok(()),
            }
        }
        let len = send.capacity().min(H2_CHUNK_BYTES).min(left as usize);
        let chunk = h2_body_chunk(pattern, sent, len);
        sent += len as u64;
        send.send_data(chunk, sent == body_bytes)?;
    }
    Ok(())
}

/// `--h2`: answers one stream as `serve` answers one request.
async fn serve_h2_stream(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    args: &'static Args,
    log: Option<&'static Mutex<std::fs::File>>,
) {
    let (head, mut body) = request.into_parts();
    if let Some(log) = log {
        let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
        let line = format!("{} {target}\n", head.method);
        let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
        if file.write_all(line.as_bytes()).is_err() {
            // Dropping `respond` unanswered resets the stream, as HTTP/1.1 mode closes.
            return;
        }
    }
    // Read to the end (the client's window is given back as it goes) and dropped.
    let mut read = 0u64;
    while let Some(data) = body.data().await {
        let Ok(data) = data else { return };
        read += data.len() as u64;
        let _ = body.flow_control().release_capacity(data.len());
        if read > MAX_BODY_BYTES {
            if let Some(response) = h2_head(413, 0, 0) {
                let _ = respond.send_response(response, true);
            }
            return;
        }
    }
    let result = serve_one(args);
    let Some(response) = h2_head(args.status, args.body_bytes, result) else {
        return;
    };
    let end = head.method == http::Method::HEAD || args.body_bytes == 0;
    if let Ok(mut send) = respond.send_response(response, end)
        && !end
    {
        let _ = h2_send_body(&mut send, args.body_bytes).await;
    }
}

/// `--h2`: serves one connection's streams until it closes (over TLS first when `tls` is
/// given), on a runtime of its own thread.
fn serve_h2(
    stream: TcpStream,
    tls: Option<Arc<ServerConfig>>,
    args: &'static Args,
    log: Option<&'static Mutex<std::fs::File>>,
) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return;
    };
    runtime.block_on(async move {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
            return;
        };
        match tls {
            None => serve_h2_connection(stream, args, log).await,
            Some(config) => {
                // A client offering only http/1.1 fails here (no_application_protocol).
                let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(stream).await
                else {
                    return;
                };
                serve_h2_connection(stream, args, log).await;
            }
        }
    });
}

/// `--h2`: the HTTP/2 connection on `io` (TCP, or TLS over it), its streams served until it
/// closes.
async fn serve_h2_connection(
    io: impl AsyncRead + AsyncWrite + Unpin,
    args: &'static Args,
    log: Option<&'static Mutex<std::fs::File>>,
) {
    // A client without the preface (an HTTP/1.1 one) fails the handshake: closed.
    let Ok(mut connection) = h2::server::handshake(io).await else {
        return;
    };
    // Each stream a task, so that the connection goes on reading and writing (window
    // updates, the bodies' DATA) while a stream waits for its window; the tasks share
    // this thread.
    while let Some(Ok((request, respond))) = connection.accept().await {
        tokio::spawn(serve_h2_stream(request, respond, args, log));
    }
}

fn main() -> anyhow::Result<()> {
    let args: &'static Args = Box::leak(Box::new(Args::parse()));
    // Blocked before any thread exists, so every thread inherits the mask and SIGTERM waits
    // for the one thread that takes it.
    let signals = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT]);
    signals.thread_block().context("cannot block SIGTERM")?;
    thread::spawn(move || {
        if signals.wait().is_ok() {
            std::process::exit(0);
        }
    });
    if let Some(ms) = args.exit_after_ms {
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(ms));
            eprintln!(
                "testserver: exiting with status {EARLY_EXIT_STATUS} after --exit-after-ms {ms}"
            );
            std::process::exit(EARLY_EXIT_STATUS);
        });
    }
    let log: Option<&'static Mutex<std::fs::File>> = match &args.paths_log {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            Some(Box::leak(Box::new(Mutex::new(file))))
        }
        None => None,
    };
    let tls = if args.tls {
        Some(tls_config(args.bind, args.h2)?)
    } else {
        None
    };
    thread::sleep(Duration::from_millis(args.ready_after_ms));
    let addr = SocketAddr::new(args.bind, args.port);
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("listening on {}", listener.local_addr()?);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if args.raw {
            thread::spawn(move || serve_raw(stream, args, log));
        } else if args.h2 {
            let tls = tls.clone();
            thread::spawn(move || serve_h2(stream, tls, args, log));
        } else if let Some(config) = &tls {
            let config = Arc::clone(config);
            thread::spawn(move || serve_tls(stream, config, args, log));
        } else {
            thread::spawn(move || serve(stream, args, log));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Head, Refusal> {
        read_head(&mut BufReader::new(text.as_bytes()))
    }

    #[test]
    fn heads_say_how_long_the_body_is_and_whether_to_close() {
        assert_eq!(
            head("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"),
            Ok(Head {
                method: "POST".into(),
                target: "/x".into(),
                content_length: 5,
                close: false,
                chunked: false
            })
        );
        assert!(
            head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .close
        );
        assert!(head("GET / HTTP/1.0\r\n\r\n").unwrap().close);
        assert!(
            !head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .close
        );
        assert_eq!(head(""), Err(Refusal::Gone));
        assert_eq!(head("GET /\r\n\r\n"), Err(Refusal::Answer(400)));
        assert_eq!(
            head("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Err(Refusal::Answer(400))
        );
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_LINE_BYTES));
        assert_eq!(head(&long), Err(Refusal::Answer(431)));
    }

    #[test]
    fn answers_carry_their_length_and_the_works_result() {
        let mut out = Vec::new();
        answer(&mut out, 503, 20, work(3), true, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nContent-Length: 20\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nHello, world\nHello, "), "{text}");
        // A HEAD's answer: the same length said, no body sent.
        let mut out = Vec::new();
        answer(&mut out, 200, 20, work(3), false, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\r\nContent-Length: 20\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
        assert_ne!(
            work(1000),
            work(1001),
            "the loop's result depends on its length"
        );
    }

    #[test]
    fn h2_bodies_are_the_http1_body_whatever_the_chunks() {
        let pattern = h2_body_pattern();
        for (body_bytes, chunk) in [
            (0u64, 1usize),
            (30, 7),
            (1000, 13),
            (200_000, H2_CHUNK_BYTES),
        ] {
            let mut http1 = Vec::new();
            answer(&mut http1, 200, body_bytes, 0, false, false).unwrap();
            let expected = &http1[http1.len() - body_bytes as usize..];
            let mut body = Vec::new();
            while (body.len() as u64) < body_bytes {
                let len = chunk.min(body_bytes as usize - body.len());
                body.extend_from_slice(&h2_body_chunk(pattern, body.len() as u64, len));
            }
            assert_eq!(body, expected, "{body_bytes} bytes in chunks of {chunk}");
        }
        let head = h2_head(503, 20, work(3)).unwrap();
        assert_eq!(head.status(), 503);
        assert_eq!(head.headers()["content-length"], "20");
        assert_eq!(
            head.headers()["x-work"],
            format!("{:016x}", work(3)).as_str()
        );
    }

    #[test]
    fn h2_and_raw_exclude_each_other() {
        assert!(Args::try_parse_from(["testserver", "--port", "1", "--h2"]).is_ok_and(|a| a.h2));
        assert!(Args::try_parse_from(["testserver", "--port", "1", "--h2", "--raw"]).is_err());
    }

    #[test]
    fn tls_goes_with_h2_or_alone_never_with_raw() {
        let parse = |extra: &[&str]| {
            Args::try_parse_from(["testserver", "--port", "1"].iter().chain(extra))
        };
        assert!(parse(&["--tls"]).is_ok_and(|a| a.tls && !a.h2));
        assert!(parse(&["--tls", "--h2"]).is_ok_and(|a| a.tls && a.h2));
        assert!(parse(&["--tls", "--raw"]).is_err());
    }

    #[test]
    fn tls_offers_one_protocol_for_the_mode() {
        assert_eq!(tls_alpn(false), [b"http/1.1".to_vec()]);
        assert_eq!(tls_alpn(true), [b"h2".to_vec()]);
        let config = tls_config("127.0.0.1".parse().unwrap(), true).unwrap();
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
    }

    #[test]
    fn serve_answers_on_one_read_write_stream() {
        // Two keep-alive requests, the second asking to close, on one in-memory stream.
        struct Duplex {
            input: std::io::Cursor<Vec<u8>>,
            output: Vec<u8>,
        }
        impl Read for Duplex {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.input.read(buf)
            }
        }
        impl Write for Duplex {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.output.write(buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let args =
            Args::try_parse_from(["testserver", "--port", "1", "--body-bytes", "5"]).unwrap();
        let mut stream = Duplex {
            input: std::io::Cursor::new(
                b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\
                  Connection: close\r\n\r\nGET /never HTTP/1.1\r\n\r\n"
                    .to_vec(),
            ),
            output: Vec::new(),
        };
        serve(&mut stream, &args, None);
        let text = String::from_utf8(stream.output).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
        assert!(text.ends_with("Connection: close\r\n\r\nHello"), "{text}");
    }

    #[test]
    fn raw_answers_are_one_fixed_length_line() {
        for n in [0, 1, 1000] {
            let line = raw_answer(work(n));
            assert_eq!(line.len(), 21, "{line:?}");
            assert!(line.starts_with("+OK ") && line.ends_with('\n'), "{line:?}");
            assert_eq!(line.matches('\n').count(), 1);
        }
    }
}
