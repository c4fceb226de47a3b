//! Waiting for the user's server to be ready: its port accepts a connection and, when a ready
//! path is given, `GET path` answers 2xx. A server that exits meanwhile fails the wait at once,
//! not at the timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::spawn::Leader;

/// How often the port is tried.
const EVERY: Duration = Duration::from_millis(10);
/// The longest one connection attempt or HTTP answer is waited for, within the timeout.
const ONE_TRY: Duration = Duration::from_secs(1);
/// Bytes of an answer read to find its status line.
const STATUS_LINE_BYTES: usize = 1024;

/// Why the server is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// The leader exited; `accepted` when its port had accepted by then.
    Exited {
        /// The port had accepted a connection.
        accepted: bool,
    },
    /// The timeout passed.
    TimedOut {
        /// The port had accepted a connection (only the ready path was missing).
        accepted: bool,
        /// The last connection error, or the last answer to the ready path.
        last: String,
    },
}

/// Waits until `addr` accepts (and `GET path` answers 2xx, when `path` is given), or the
/// leader exits, or `timeout` passes.
pub fn wait_ready(
    leader: &Leader,
    addr: SocketAddr,
    path: Option<&str>,
    timeout: Duration,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + timeout;
    let mut accepted = false;
    let mut last = String::from("no attempt was made");
    loop {
        if leader.has_exited() {
            return Err(NotReady::Exited { accepted });
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(NotReady::TimedOut { accepted, last });
        }
        let limit = (deadline - now).min(ONE_TRY);
        match TcpStream::connect_timeout(&addr, limit) {
            Ok(stream) => {
                accepted = true;
                let Some(path) = path else {
                    return Ok(());
                };
                match get_status(stream, addr, path, limit) {
                    Ok(status) if (200..300).contains(&status.0) => return Ok(()),
                    Ok(status) => last = status.1,
                    Err(why) => last = why,
                }
            }
            Err(err) => last = err.to_string(),
        }
        let now = Instant::now();
        if now < deadline {
            std::thread::sleep((deadline - now).min(EVERY));
        }
    }
}

/// Sends `GET path` on `stream` (HTTP/1.1, Connection: close) and reads the answer's status:
/// its code and its status line.
fn get_status(
    mut stream: TcpStream,
    addr: SocketAddr,
    path: &str,
    limit: Duration,
) -> Result<(u16, String), String> {
    let _ = stream.set_read_timeout(Some(limit));
    let _ = stream.set_write_timeout(Some(limit));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: quietbench-agent\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("sending GET {path} failed: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 256];
    while !answer.contains(&b'\n') && answer.len() < STATUS_LINE_BYTES {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("reading the answer to GET {path} failed: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let line = text.lines().next().unwrap_or("").trim().to_string();
    match parse_status_line(&line) {
        Some(code) => Ok((code, line)),
        None if line.is_empty() => Err(format!(
            "GET {path}: the connection closed without an answer"
        )),
        None => Err(format!("GET {path}: not an HTTP answer: {line:?}")),
    }
}

/// The status code of an HTTP/1.x status line ("HTTP/1.1 200 OK").
pub fn parse_status_line(line: &str) -> Option<u16> {
    let mut words = line.split_whitespace();
    let version = words.next()?;
    if !version.starts_with("HTTP/") {
        return None;
    }
    let code = words.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok().filter(|c| (100..600).contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn status_lines_give_their_code() {
        assert_eq!(parse_status_line("HTTP/1.1 200 OK"), Some(200));
        assert_eq!(
            parse_status_line("HTTP/1.0 503 Service Unavailable"),
            Some(503)
        );
        assert_eq!(parse_status_line("HTTP/1.1 204"), Some(204));
        assert_eq!(parse_status_line("SSH-2.0-OpenSSH_9.6"), None);
        assert_eq!(parse_status_line("HTTP/1.1 20 OK"), None);
        assert_eq!(parse_status_line(""), None);
    }

    /// A server that answers every connection with `answer` after reading its request.
    fn answering(answer: &'static str) -> (SocketAddr, std::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = Vec::new();
                let mut buf = [0u8; 512];
                while !request.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(String::from_utf8_lossy(&request).into_owned());
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        (addr, rx)
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        TcpStream::connect(addr).unwrap()
    }

    #[test]
    fn the_ready_path_is_asked_with_host_and_connection_close() {
        let (addr, requests) = answering("HTTP/1.1 204 No Content\r\n\r\n");
        let status = get_status(connect(addr), addr, "/ready?x=1", ONE_TRY).unwrap();
        assert_eq!(status, (204, "HTTP/1.1 204 No Content".to_string()));
        let request = requests.recv().unwrap();
        assert!(
            request.starts_with("GET /ready?x=1 HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains(&format!("\r\nHost: {addr}\r\n")),
            "{request}"
        );
        assert!(request.contains("\r\nConnection: close\r\n"), "{request}");
    }

    #[test]
    fn a_non_http_answer_or_a_closed_connection_is_named() {
        let (addr, _requests) = answering("SSH-2.0-OpenSSH\r\n");
        let err = get_status(connect(addr), addr, "/", ONE_TRY).unwrap_err();
        assert!(err.contains("not an HTTP answer"), "{err}");
        let (addr, _requests) = answering("");
        let err = get_status(connect(addr), addr, "/", ONE_TRY).unwrap_err();
        assert!(err.contains("closed without an answer"), "{err}");
    }
}
