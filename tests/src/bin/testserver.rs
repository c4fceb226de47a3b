//! testserver: a small HTTP/1.1 keep-alive server with a known cost per request, the user's
//! server of the end-to-end tests of the `http` probe (tests/server_lifecycle.rs): it runs
//! under an agent's StartServer as a user's server would, and it can be told to be slow to
//! listen, to exit early, or to answer with a given status, so that every branch of the
//! agent's readiness and stop can be reached.
//!
//! One thread per connection (std only: the tests measure the agent, not this server). Each
//! request runs `--work` iterations of a fixed integer loop, whose result goes out in the
//! `X-Work` header so that the loop cannot be optimised away, and sleeps `--delay-us`.
//! `--paths-log FILE` appends each request's method and target to FILE, a line each, so a
//! test can see which requests arrived (tests/http_requests.rs).
//! `--raw` speaks a line protocol instead, for the `tcp` probe (tests/tcp_server.rs): each
//! request is a line, each answer the fixed-length line `+OK <the work's result in 16 hex
//! digits>\n` (21 bytes), after the same work and delay.
//! SIGTERM ends it with status 0; "listening on ADDR" on stderr says it is ready.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use nix::sys::signal::{SigSet, Signal};

#[derive(Debug, Parser)]
#[command(
    name = "testserver",
    about = "An HTTP/1.1 keep-alive server (or with --raw a line server) with a known \
             per-request cost, for the end-to-end \
             tests of the http probe; exits 0 at SIGTERM"
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

/// Writes one answer: `status`, `body_bytes` of body, and the work's result.
fn answer(
    out: &mut impl Write,
    status: u16,
    body_bytes: u64,
    work_result: u64,
    close: bool,
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
    let mut left = body_bytes;
    while left > 0 {
        let chunk = left.min(BODY.len() as u64) as usize;
        out.write_all(&BODY[..chunk])?;
        left -= chunk as u64;
    }
    out.flush()
}

/// Serves one connection until it closes or asks to; logs each request's line to `log`.
fn serve(stream: TcpStream, args: &Args, log: Option<&Mutex<std::fs::File>>) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut writer = std::io::BufWriter::new(write_half);
    loop {
        let head = match read_head(&mut reader) {
            Ok(head) => head,
            Err(Refusal::Gone) => return,
            Err(Refusal::Answer(status)) => {
                let _ = answer(&mut writer, status, 0, 0, true);
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
            let _ = answer(&mut writer, 501, 0, 0, true);
            return;
        }
        if head.content_length > MAX_BODY_BYTES {
            let _ = answer(&mut writer, 413, 0, 0, true);
            return;
        }
        let copied = std::io::copy(
            &mut reader.by_ref().take(head.content_length),
            &mut std::io::sink(),
        );
        if !matches!(copied, Ok(n) if n == head.content_length) {
            return;
        }
        let result = work(args.work);
        if args.delay_us > 0 {
            thread::sleep(Duration::from_micros(args.delay_us));
        }
        if answer(
            &mut writer,
            args.status,
            args.body_bytes,
            result,
            head.close,
        )
        .is_err()
            || head.close
        {
            return;
        }
    }
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
        let result = work(args.work);
        if args.delay_us > 0 {
            thread::sleep(Duration::from_micros(args.delay_us));
        }
        if writer.write_all(raw_answer(result).as_bytes()).is_err() {
            return;
        }
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
    thread::sleep(Duration::from_millis(args.ready_after_ms));
    let addr = SocketAddr::new(args.bind, args.port);
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("listening on {}", listener.local_addr()?);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if args.raw {
            thread::spawn(move || serve_raw(stream, args, log));
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
        answer(&mut out, 503, 20, work(3), true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nContent-Length: 20\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nHello, world\nHello, "), "{text}");
        assert_ne!(
            work(1000),
            work(1001),
            "the loop's result depends on its length"
        );
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
