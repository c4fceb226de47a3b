//! Writes the seeds that no captured file provides: histograms as agents ship them, peer
//! protocol bytes as the probes send them, and IMDS answers in the shapes the reader accepts.
//! Each comes from the real encoder, not typed by hand. `benches/fuzz/seed.sh` runs it.
//!
//! Usage: write_seeds CORPUS_DIR

use std::path::Path;

use quietbench_host::journal::{Journal, JournalEntry};
use quietbench_probe::histogram::{encode_v2_deflate, new_latency_histogram, record_clamped};
use quietbench_probe::net::wire::{self, Header, Mode, Secret, Trailer};

fn main() {
    let Some(root) = std::env::args().nth(1) else {
        eprintln!("usage: write_seeds CORPUS_DIR");
        std::process::exit(2);
    };
    let root = Path::new(&root);
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("corpus folder");
        std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed file");
    };

    // Histograms: empty, one sample, a latency-like spread, and clamped extremes.
    let spreads: [(&str, Vec<u64>); 4] = [
        ("empty", vec![]),
        ("one", vec![812_345]),
        ("spread", (1..2000u64).map(|i| 20_000 + i * i * 3).collect()),
        ("extremes", vec![0, 1, u64::MAX, 3_600_000_000_000, 7]),
    ];
    for (name, values) in spreads {
        let mut hist = new_latency_histogram();
        for v in values {
            record_clamped(&mut hist, v);
        }
        write(
            "histogram",
            name,
            &encode_v2_deflate(&hist).expect("encodes"),
        );
    }

    // Peer protocol: a header of each mode (the seed carries its own secret), a trailer, and a
    // UDP request.
    let secret = Secret([0x5a; wire::SECRET_LEN]);
    for (name, mode, req, resp) in [
        ("sink", Mode::Sink, 131_072, 0),
        ("source", Mode::Source, 0, 131_072),
        ("echo", Mode::Echo, 1, 1),
    ] {
        let header = Header {
            mode,
            request_bytes: req,
            response_bytes: resp,
            buffer_bytes: 4 << 20,
            pacing_mbit: 10_000,
            secret,
        };
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(
            &Trailer {
                total_retrans: 3,
                rtt_us: 41,
            }
            .encode(),
        );
        write("peer_wire", name, &bytes);
    }
    let mut udp = vec![0; 64];
    wire::encode_udp_request(&mut udp, 9, 64, &secret);
    write("peer_wire", "udp", &udp);

    // The tuning journal, as the agent writes it (a temporary state folder).
    let state = std::env::temp_dir().join(format!("qb-seed-journal-{}", std::process::id()));
    let journal = Journal::in_dir(&state);
    for entry in [
        JournalEntry::File {
            control: "aslr".into(),
            path: "/proc/sys/kernel/randomize_va_space".into(),
            original: "2\n".into(),
        },
        JournalEntry::StoppedProcess {
            control: "irqbalance".into(),
            pid: 612,
            comm: "irqbalance".into(),
        },
    ] {
        journal.record(&entry).expect("journal entry");
    }
    write(
        "kernel_files",
        "journal",
        &std::fs::read(journal.path()).expect("journal file"),
    );
    let _ = std::fs::remove_dir_all(&state);

    // IMDS answers: a token, a JSON document, a 404, one framed by the connection closing, and
    // a chunked one (refused).
    for (name, text) in [
        (
            "token",
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 56\r\nConnection: close\r\n\r\nAQAEAGyzJm3zcr9wKt1XVn0yfkWyx0o1mk0uTt0qWr0ANgJ5l2v3aQ==",
        ),
        (
            "document",
            "HTTP/1.1 200 OK\r\nContent-Length: 61\r\n\r\n{\"instanceId\":\"i-0abc\",\"instanceType\":\"c5.large\",\"az\":\"a\"}",
        ),
        (
            "missing",
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        ),
        ("close_framed", "HTTP/1.0 200 OK\r\n\r\nc5.large"),
        (
            "chunked",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ),
    ] {
        write("imds_http", name, text.as_bytes());
    }
}
