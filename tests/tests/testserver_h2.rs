//! The test server's `--h2` mode (tests/src/bin/testserver.rs) on its own, before any probe
//! speaks to it: HTTP/2 over cleartext TCP with prior knowledge, checked with the h2 crate's
//! client (status, body, the `x-work` header, HEAD, a request body, several streams on one
//! connection, the paths log, SIGTERM) and with an independent client, nghttp2's h2load.
//!
//! h2load is required, not optional: without it the test fails and says what to install
//! (Debian: nghttp2-client), so that a machine without it cannot pass by skipping.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;

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

/// One answer: its status, headers and whole body.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// An HTTP/2 connection with prior knowledge to 127.0.0.1:`port`.
async fn connect(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `method path` on `client`'s connection, with `body` if not empty: the whole answer.
async fn request(
    client: &h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    body: &'static [u8],
) -> Answer {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1{path}"))
        .body(())
        .unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (response, mut send) = client.send_request(request, body.is_empty()).unwrap();
    if !body.is_empty() {
        send.send_data(Bytes::from_static(body), true).unwrap();
    }
    let (parts, mut stream) = response.await.unwrap().into_parts();
    let mut received = Vec::new();
    while let Some(data) = stream.data().await {
        let data = data.unwrap();
        received.extend_from_slice(&data);
        // Given back, or a body past the first window (64 KiB) would never come.
        stream.flow_control().release_capacity(data.len()).unwrap();
    }
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: received,
    }
}

/// What the server's body is: "Hello, world\n" repeated to `n` bytes.
fn expected_body(n: usize) -> Vec<u8> {
    b"Hello, world\n".iter().copied().cycle().take(n).collect()
}

#[tokio::test]
async fn h2_answers_every_stream_as_http1_answers_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paths.log");
    // More body than one flow-control window: the server must send as the client reads.
    let server = Server::start(&[
        "--h2",
        "--work",
        "1000",
        "--delay-us",
        "200",
        "--body-bytes",
        "100000",
        "--paths-log",
        log.to_str().unwrap(),
    ]);
    let port = server.port;
    tokio::time::timeout(LIMIT, async {
        let client = connect(port).await;
        let get = request(&client, "GET", "/x", b"").await;
        assert_eq!(get.status, 200);
        assert_eq!(get.body.len(), 100_000);
        assert!(get.body == expected_body(100_000), "the body repeats BODY");
        assert_eq!(get.headers["content-length"], "100000");
        let work = get.headers["x-work"].to_str().unwrap();
        assert!(
            work.len() == 16 && u64::from_str_radix(work, 16).is_ok(),
            "x-work: {work:?}"
        );

        let head = request(&client, "HEAD", "/x", b"").await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty(), "HEAD gets no body");
        assert_eq!(head.headers["content-length"], "100000");
        assert_eq!(
            head.headers["x-work"], work,
            "the same work, the same result"
        );

        let post = request(&client, "POST", "/y?z=1", b"a request body").await;
        assert_eq!(post.status, 200);
        assert_eq!(post.body.len(), 100_000);

        // Streams in flight together on the one connection: each answered whole.
        let streams: Vec<_> = (0..8)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move { request(&client, "GET", &format!("/m{i}"), b"").await })
            })
            .collect();
        for stream in streams {
            let answer = stream.await.unwrap();
            assert_eq!((answer.status, answer.body.len()), (200, 100_000));
        }
    })
    .await
    .expect("the h2 exchanges finish in time");

    let lines = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines[..3], ["GET /x", "HEAD /x", "POST /y?z=1"]);
    lines[3..].sort();
    assert_eq!(
        lines[3..],
        (0..8).map(|i| format!("GET /m{i}")).collect::<Vec<_>>()
    );
    assert!(server.terminate().success(), "SIGTERM exits 0 in --h2 too");
}

#[tokio::test]
async fn h2_answers_with_the_status_it_is_given() {
    let server = Server::start(&["--h2", "--status", "503", "--body-bytes", "0"]);
    let port = server.port;
    tokio::time::timeout(LIMIT, async {
        let client = connect(port).await;
        for _ in 0..3 {
            let answer = request(&client, "GET", "/", b"").await;
            assert_eq!(answer.status, 503);
            assert!(answer.body.is_empty());
            assert_eq!(answer.headers["content-length"], "0");
            assert!(answer.headers.contains_key("x-work"));
        }
    })
    .await
    .expect("the h2 exchanges finish in time");
}

#[test]
fn h2_and_raw_are_refused_together() {
    let out = Command::new(TESTSERVER)
        .args(["--port", "0", "--h2", "--raw"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn h2load_gets_every_answer() {
    let server = Server::start(&["--h2", "--work", "1000"]);
    let url = format!("http://127.0.0.1:{}/", server.port);
    let mut h2load = match Command::new("h2load")
        .args(["-n", "200", "-c", "2", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "h2load is not installed: install nghttp2-client (Debian: apt-get install \
             nghttp2-client); this test does not skip"
        ),
        Err(e) => panic!("cannot start h2load: {e}"),
    };
    let deadline = Instant::now() + LIMIT;
    while h2load.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = h2load.kill();
            panic!("h2load did not finish in {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = h2load.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("200 succeeded"),
        "h2load: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
