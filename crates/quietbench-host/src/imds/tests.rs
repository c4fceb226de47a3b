use super::*;
use crate::test_fixtures::dev_vm;
use std::io::BufRead;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the test server saw of one request.
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A server on 127.0.0.1 that answers each connection with `answer(request)`; it runs
/// until the test process exits.
fn serve(answer: impl Fn(&Seen) -> Vec<u8> + Send + 'static) -> SocketAddr {
    serve_with(None, answer)
}

/// Like [`serve`], writing the answer one byte per `byte_delay` when given.
fn serve_with(
    byte_delay: Option<Duration>,
    answer: impl Fn(&Seen) -> Vec<u8> + Send + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::Builder::new()
        .name("imds-test-server".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    continue;
                }
                let mut words = first.split_whitespace();
                let method = words.next().unwrap_or_default().to_string();
                let path = words.next().unwrap_or_default().to_string();
                let mut headers = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((n, v)) = line.split_once(':') {
                        headers.push((n.to_string(), v.trim().to_string()));
                    }
                }
                let seen = Seen {
                    method,
                    path,
                    headers,
                };
                let bytes = answer(&seen);
                match byte_delay {
                    None => {
                        let _ = stream.write_all(&bytes);
                    }
                    Some(delay) => {
                        for b in bytes {
                            std::thread::sleep(delay);
                            if stream.write_all(&[b]).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        })
        .unwrap();
    addr
}

fn http(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nServer: EC2ws\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const TOKEN: &str = "AQAEAFyR3nxTestTokenOfIMDSv2==";

/// Answers as IMDSv2 is documented to: a token for a PUT with a TTL header (400 without),
/// 401 for a GET without the token, 404 for what the instance does not have.
fn imdsv2(seen: &Seen) -> Vec<u8> {
    const NOT_FOUND: &str =
        "<?xml version=\"1.0\"?><html><body><h1>404 - Not Found</h1></body></html>";
    match (seen.method.as_str(), seen.path.as_str()) {
        ("PUT", "/latest/api/token") => match seen.header("X-aws-ec2-metadata-token-ttl-seconds") {
            Some("21600") => http("200 OK", TOKEN),
            _ => http("400 Bad Request", ""),
        },
        ("GET", _) if seen.header("X-aws-ec2-metadata-token") != Some(TOKEN) => {
            http("401 Unauthorized", "")
        }
        ("GET", "/latest/meta-data/instance-id") => http("200 OK", "i-0a1b2c3d4e5f67890"),
        ("GET", "/latest/meta-data/instance-type") => http("200 OK", "c7i.large"),
        ("GET", "/latest/meta-data/ami-id") => http("200 OK", "ami-0abcdef1234567890"),
        ("GET", "/latest/meta-data/placement/availability-zone") => http("200 OK", "eu-west-1b"),
        ("GET", "/latest/meta-data/placement/availability-zone-id") => http("200 OK", "euw1-az3"),
        _ => http("404 Not Found", NOT_FOUND),
    }
}

fn cfg(endpoint: SocketAddr, ms: u64) -> ImdsConfig {
    ImdsConfig {
        endpoint,
        timeout: Duration::from_millis(ms),
    }
}

#[test]
fn reads_the_identity_with_a_token_and_absent_fields_as_none() {
    let addr = serve(imdsv2);
    let id = query_imds(&cfg(addr, 2000)).unwrap();
    assert_eq!(
        id,
        InstanceIdentity {
            instance_id: Some("i-0a1b2c3d4e5f67890".into()),
            instance_type: Some("c7i.large".into()),
            availability_zone: Some("eu-west-1b".into()),
            availability_zone_id: Some("euw1-az3".into()),
            ami_id: Some("ami-0abcdef1234567890".into()),
            placement_group: None,
            host_id: None,
            partition_number: None,
        }
    );
}

#[test]
fn without_the_token_the_server_says_401_and_the_error_says_why() {
    let addr = serve(imdsv2);
    let c = cfg(addr, 2000);
    let req = Request {
        method: "GET",
        path: "/latest/meta-data/instance-id",
        header: ("X-Other", "1"),
    };
    assert_eq!(send(&c, &req).unwrap().status, 401);
    // A server that refuses every token.
    let addr = serve(|s| {
        if s.method == "PUT" {
            http("200 OK", "t")
        } else {
            http("401 Unauthorized", "")
        }
    });
    let err = query_imds(&cfg(addr, 2000)).unwrap_err();
    assert!(
        matches!(err, ImdsError::Status { status: 401, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("token"), "{err}");
}

#[test]
fn a_server_that_never_answers_times_out_in_time() {
    // Connections complete in the backlog but nobody accepts or answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let err = query_imds(&cfg(listener.local_addr().unwrap(), 300)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, ImdsError::Timeout { .. }), "{err}");
    assert!(took < 2 * timeout, "took {took:?}");
    drop(listener);
}

#[test]
fn a_server_that_drips_bytes_still_times_out_in_time() {
    // A byte every 20 ms: each read succeeds, but the answer takes seconds in all.
    let addr = serve_with(Some(Duration::from_millis(20)), imdsv2);
    let start = Instant::now();
    let err = query_imds(&cfg(addr, 300)).unwrap_err();
    assert!(matches!(err, ImdsError::Timeout { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_millis(600),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn garbage_is_a_clear_error() {
    let answers: [&[u8]; 6] = [
        b"\x00\xffgarbage\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
    ];
    for answer in answers {
        let addr = serve(move |_| answer.to_vec());
        let err = query_imds(&cfg(addr, 2000)).unwrap_err();
        assert!(
            matches!(err, ImdsError::Malformed { .. }),
            "{answer:?}: {err}"
        );
        assert!(err.to_string().contains("PUT /latest/api/token"), "{err}");
    }
    let addr = serve(|_| Vec::new()); // closes at once
    assert!(matches!(
        query_imds(&cfg(addr, 2000)).unwrap_err(),
        ImdsError::Malformed { .. }
    ));
}

#[test]
fn answers_are_bounded_in_size() {
    let addr = serve(|_| {
        let mut big = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        big.resize(200 * 1024, b'x');
        big
    });
    let err = query_imds(&cfg(addr, 2000)).unwrap_err();
    assert!(matches!(err, ImdsError::TooLarge { .. }), "{err}");
    let addr = serve(|_| http("200 OK", &"y".repeat(70 * 1024)));
    assert!(query_imds(&cfg(addr, 2000)).is_err());
}

#[test]
fn a_body_framed_by_close_and_a_token_with_spaces() {
    // No Content-Length: the body runs to the close. A token with a space is refused.
    let addr = serve(|_| b"HTTP/1.0 200 OK\r\n\r\nbad token".to_vec());
    let err = query_imds(&cfg(addr, 2000)).unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert_eq!(
        parse_answer(b"HTTP/1.1 404 Not Found\r\n\r\nx", true).unwrap(),
        Some(Answer {
            status: 404,
            body: b"x".to_vec()
        })
    );
    assert_eq!(parse_answer(b"HTT", false).unwrap(), None);
    assert_eq!(
        parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\na", false).unwrap(),
        None
    );
}

#[test]
fn the_answer_parser_survives_arbitrary_bytes() {
    // Deterministic xorshift bytes around a real-looking answer, cut at every length.
    let real = http("200 OK", "i-0a1b2c3d4e5f67890");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..2000 {
        let mut bytes = real.clone();
        for _ in 0..(round % 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % bytes.len();
            bytes[at] = (x >> 32) as u8;
        }
        let cut = (x as usize >> 8) % (bytes.len() + 1);
        let _ = parse_answer(&bytes[..cut], round % 2 == 0);
    }
}

#[test]
fn the_development_vm_is_not_ec2() {
    assert!(!looks_like_ec2(&dev_vm()));
}

#[test]
fn off_ec2_nothing_is_sent() {
    // 0.0.0.0 is not loopback but connects to this host, so a request that should not have
    // been made lands here (and leaves no machine) instead of going out.
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let endpoint = SocketAddr::from(([0, 0, 0, 0], port));
    let got = read_instance_identity(&dev_vm(), &cfg(endpoint, 300)).unwrap();
    assert_eq!(got, None);
    assert!(listener.accept().is_err(), "a connection was made");
    // The default endpoint, too, is left alone.
    let got = read_instance_identity(&dev_vm(), &ImdsConfig::default()).unwrap();
    assert_eq!(got, None);
}

#[test]
fn a_loopback_endpoint_is_asked_even_off_ec2() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let addr = serve(move |s| {
        counter.fetch_add(1, Ordering::SeqCst);
        imdsv2(s)
    });
    let got = read_instance_identity(&dev_vm(), &cfg(addr, 2000)).unwrap();
    assert_eq!(got.unwrap().instance_type.as_deref(), Some("c7i.large"));
    assert_eq!(calls.load(Ordering::SeqCst), 1 + FIELDS.len());
}

#[test]
fn ec2_evidence() {
    let none = HypervisorEvidence::default();
    assert!(!is_ec2_evidence(&none, None));
    let nitro = HypervisorEvidence {
        dmi_sys_vendor: Some("Amazon EC2".into()),
        ..none.clone()
    };
    assert!(is_ec2_evidence(&nitro, None));
    let tag = HypervisorEvidence {
        dmi_board_asset_tag: Some("i-0a1b2c3d4e5f67890\n".into()),
        ..none.clone()
    };
    assert!(is_ec2_evidence(&tag, None));
    let xen = HypervisorEvidence {
        sys_hypervisor_uuid: Some("ec2e1916-9099-7caf-fd21-01234abcdef0".into()),
        ..none.clone()
    };
    assert!(is_ec2_evidence(&xen, None));
    assert!(is_ec2_evidence(
        &none,
        Some("EC2E1916-9099-7CAF-FD21-01234ABCDEF0")
    ));
    let other = HypervisorEvidence {
        dmi_sys_vendor: Some("QEMU".into()),
        dmi_board_asset_tag: Some("i-".into()),
        ..none
    };
    assert!(!is_ec2_evidence(&other, Some("4c4c4544-0000")));
}
