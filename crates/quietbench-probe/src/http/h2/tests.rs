use proptest::prelude::*;

use super::hpack::{block_grpc_status, block_status, huffman_status};
use super::*;

/// nginx 1.22.1's answers to GET /index.html (200), /missing (404), /unavailable (503) on
/// streams 1, 3, 5 (fixtures/README.md).
const NGINX: &[u8] = include_bytes!("fixtures/nginx-1.22-200-404-503.bin");

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame_head(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

/// Feeds `bytes` in pieces of `piece` bytes; the result of each advance.
fn feed(reader: &mut Http2Reader, bytes: &[u8], piece: usize) -> Vec<Result<bool, Malformed>> {
    bytes
        .chunks(piece.max(1))
        .map(|chunk| {
            reader.spare()[..chunk.len()].copy_from_slice(chunk);
            reader.advance(chunk.len())
        })
        .collect()
}

/// A reader with a request in flight on its first stream (whose bytes are dropped).
fn awaiting() -> Http2Reader {
    let mut reader = Http2Reader::new(false);
    let mut request = Vec::new();
    append_request(&mut request, Method::Get, "/", "h", &[], b"").unwrap();
    reader.prepare(&mut Vec::new(), &request);
    reader
}

/// Where each frame of `bytes` ends.
fn frame_ends(bytes: &[u8]) -> Vec<usize> {
    let (mut at, mut ends) = (0, Vec::new());
    while at + 9 <= bytes.len() {
        at += 9
            + (usize::from(bytes[at]) << 16 | usize::from(bytes[at + 1]) << 8)
            + usize::from(bytes[at + 2]);
        ends.push(at);
    }
    assert_eq!(at, bytes.len(), "the fixture is whole frames");
    ends
}

#[test]
fn nginx_responses_are_read_one_stream_at_a_time() {
    let ends = frame_ends(NGINX);
    // SETTINGS, WINDOW_UPDATE, SETTINGS ACK, then HEADERS and DATA for each of three streams.
    assert_eq!(ends.len(), 9);
    let mut reader = Http2Reader::new(false);
    let mut request = Vec::new();
    append_request(&mut request, Method::Get, "/", "h", &[], b"").unwrap();
    let mut from = 0;
    for (k, status) in [(0, 200), (1, 404), (2, 503)] {
        let mut out = Vec::new();
        reader.prepare(&mut out, &request);
        // The first send opens the connection; later ones carry the SETTINGS ACK we owe.
        assert_eq!(out.starts_with(PREFACE), k == 0);
        let to = ends[4 + 2 * k];
        let results = feed(&mut reader, &NGINX[from..to], 7);
        assert_eq!(results.last(), Some(&Ok(true)), "stream {}", 2 * k + 1);
        assert!(results[..results.len() - 1].iter().all(|r| *r == Ok(false)));
        assert_eq!(reader.status(), status);
        assert!(!reader.close());
        from = to;
        if k == 0 {
            // nginx's SETTINGS were taken in: their ACK waits to be written.
            assert_eq!(reader.control(), &[0, 0, 0, SETTINGS, ACK, 0, 0, 0, 0]);
        }
    }
}

/// The h2 crate's server (0.4.20) answering 503 twice, its status Huffman-coded.
const H2_CRATE_503: &[u8] = include_bytes!("fixtures/h2-0.4.20-503-huffman.bin");

#[test]
fn the_h2_crates_huffman_coded_statuses_are_read() {
    let ends = frame_ends(H2_CRATE_503);
    // SETTINGS, SETTINGS ACK, then HEADERS and DATA for each of two streams.
    assert_eq!(ends.len(), 6);
    let mut reader = Http2Reader::new(false);
    let mut request = Vec::new();
    append_request(&mut request, Method::Get, "/", "h", &[], b"").unwrap();
    let mut from = 0;
    for k in 0..2 {
        reader.prepare(&mut Vec::new(), &request);
        let to = ends[3 + 2 * k];
        let results = feed(&mut reader, &H2_CRATE_503[from..to], 5);
        assert_eq!(results.last(), Some(&Ok(true)));
        assert_eq!(reader.status(), 503);
        from = to;
    }
}

/// tonic 0.14's server (the tests' `grpcserver --fail-every 2 --fail-code 14`) answering two
/// unary calls (fixtures/README.md): the first with HEADERS, DATA and trailers carrying
/// `grpc-status: 0`; the second Trailers-Only, status 14 (UNAVAILABLE) before its message.
const TONIC_GRPC: &[u8] = include_bytes!("fixtures/tonic-0.14-grpc-status.bin");

/// A gRPC call, as `grpc=` formats it, for a reader of gRPC calls.
fn grpc_call() -> Vec<u8> {
    let mut request = Vec::new();
    let headers = [
        ("content-type".to_string(), "application/grpc".to_string()),
        ("te".to_string(), "trailers".to_string()),
    ];
    let body = b"\x00\x00\x00\x00\x04\x0a\x02hi";
    append_request(
        &mut request,
        Method::Post,
        "/qbtest.v1.Bench/Echo",
        "h",
        &headers,
        body,
    )
    .unwrap();
    request
}

#[test]
fn tonics_grpc_statuses_are_read_from_trailers_and_trailers_only() {
    let ends = frame_ends(TONIC_GRPC);
    // SETTINGS, SETTINGS ACK, WINDOW_UPDATE; HEADERS, DATA, HEADERS (trailers); HEADERS
    // (Trailers-Only).
    assert_eq!(ends.len(), 7);
    let request = grpc_call();
    for piece in [1, 4, 9, 300] {
        let mut reader = Http2Reader::new(true);
        let mut from = 0;
        for (to, grpc_status) in [(ends[5], 0), (ends[6], 14)] {
            reader.prepare(&mut Vec::new(), &request);
            let results = feed(&mut reader, &TONIC_GRPC[from..to], piece);
            assert_eq!(results.last(), Some(&Ok(true)), "piece {piece}");
            assert!(results[..results.len() - 1].iter().all(|r| *r == Ok(false)));
            assert_eq!(reader.status(), 200);
            assert_eq!(reader.grpc_status(), Some(grpc_status), "piece {piece}");
            from = to;
        }
    }
    // Read as plain HTTP/2, the same bytes are two 200s with no gRPC status.
    let mut reader = Http2Reader::new(false);
    reader.prepare(&mut Vec::new(), &request);
    let results = feed(&mut reader, &TONIC_GRPC[..ends[5]], 16);
    assert_eq!(results.last(), Some(&Ok(true)));
    assert_eq!((reader.status(), reader.grpc_status()), (200, None));
}

#[test]
fn grpc_status_is_found_among_literals_plain_or_huffman_coded() {
    // Plain name and value, after a static reference and a literal with an indexed name.
    let mut block = vec![0x88, 0x0f, 0x10, 3, b'a', b'/', b'b'];
    block.extend_from_slice(&[0x00, 11]);
    block.extend_from_slice(b"grpc-status");
    block.extend_from_slice(&[2, b'1', b'6']);
    assert_eq!(block_grpc_status(&block, true), Ok(Some(16)));
    // Huffman-coded name and value ("14"), as incremental indexing into a table of size 0,
    // after a table size update.
    let block = [
        0x20, 0x40, 0x88, 0x9a, 0xca, 0xc8, 0xb2, 0x12, 0x34, 0xda, 0x8f, 0x82, 0x0b, 0x5f,
    ];
    assert_eq!(block_grpc_status(&block, true), Ok(Some(14)));
    // Another literal name first: skipped.
    let mut block = vec![0x00, 12];
    block.extend_from_slice(b"grpc-message");
    block.extend_from_slice(&[1, b'x', 0x00, 11]);
    block.extend_from_slice(b"grpc-status");
    block.extend_from_slice(&[1, b'0']);
    assert_eq!(block_grpc_status(&block, true), Ok(Some(0)));
    // None in a whole block; a cut block that ends before it.
    assert_eq!(block_grpc_status(&[0x88], true), Ok(None));
    assert_eq!(block_grpc_status(&block[..9], false), Ok(None));
    assert!(block_grpc_status(&block[..9], true).is_err());
    // A dynamic reference, a value that is not a number.
    assert!(block_grpc_status(&[0xbe], true).is_err());
    let mut block = vec![0x00, 11];
    block.extend_from_slice(b"grpc-status");
    block.extend_from_slice(&[2, b'o', b'k']);
    assert!(block_grpc_status(&block, true).is_err());
}

#[test]
fn a_grpc_call_without_a_status_fails() {
    let request = grpc_call();
    // 200, then DATA that ends the stream: no trailers.
    let mut reader = Http2Reader::new(true);
    reader.prepare(&mut Vec::new(), &request);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x88]);
    bytes.extend(frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00"));
    let results = feed(&mut reader, &bytes, 100);
    assert!(matches!(results.last(), Some(Err(Malformed::Http2(m))) if m.contains("trailers")));
    // Trailers without grpc-status.
    let mut reader = Http2Reader::new(true);
    reader.prepare(&mut Vec::new(), &request);
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x88]);
    bytes.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &[0x0f, 0x10, 1, b'x'],
    ));
    let results = feed(&mut reader, &bytes, 100);
    assert!(matches!(results.last(), Some(Err(Malformed::Http2(m))) if m.contains("grpc-status")));
    // A 503 without gRPC's trailers is read as HTTP: a status, no gRPC code.
    let mut reader = Http2Reader::new(true);
    reader.prepare(&mut Vec::new(), &request);
    let results = feed(
        &mut reader,
        &frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x8e]),
        100,
    );
    assert_eq!(results.last(), Some(&Ok(true)));
    assert_eq!((reader.status(), reader.grpc_status()), (500, None));
}

#[test]
fn the_opening_and_the_request_frames() {
    let mut reader = Http2Reader::new(false);
    let mut request = Vec::new();
    append_request(&mut request, Method::Get, "/", "10.0.0.5:80", &[], b"").unwrap();
    // HEADERS, END_HEADERS | END_STREAM, stream 0 until sent.
    assert_eq!(
        &request[3..9],
        &[HEADERS, END_HEADERS | END_STREAM, 0, 0, 0, 0]
    );
    // :method GET, :scheme http, :path / from the static table; :authority as a literal.
    assert_eq!(&request[9..12], &[0x82, 0x86, 0x84]);
    assert_eq!(&request[12..14], &[0x11, 11]);
    assert_eq!(&request[14..], b"10.0.0.5:80");
    let mut out = Vec::new();
    reader.prepare(&mut out, &request);
    let opening_len = PREFACE.len() + 9 + 18 + 13;
    assert_eq!(opening_len + CONTROL_BYTES, ROOM_BYTES);
    assert_eq!(&out[..24], PREFACE);
    // SETTINGS: header table 0, push off, stream window 2^31-1.
    assert_eq!(&out[24..33], &[0, 0, 18, SETTINGS, 0, 0, 0, 0, 0]);
    assert_eq!(
        &out[33..51],
        &[
            0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff
        ]
    );
    // The connection's window raised by 2^31-1 - 65535.
    assert_eq!(
        &out[51..64],
        &[0, 0, 4, WINDOW_UPDATE, 0, 0, 0, 0, 0, 0x7f, 0xff, 0, 0]
    );
    assert_eq!(&out[64 + 5..64 + 9], &1u32.to_be_bytes());
    reader.prepare(&mut out, &request);
    assert_eq!(out.len(), request.len(), "no second opening");
    assert_eq!(&out[5..9], &3u32.to_be_bytes());
}

#[test]
fn bodies_go_in_one_data_frame_and_headers_in_lower_case() {
    let mut request = Vec::new();
    let headers = [("X-Trace".to_string(), "a b".to_string())];
    append_request(&mut request, Method::Put, "/x?y=1", "h", &headers, b"body").unwrap();
    let ends = frame_ends(&request);
    assert_eq!(ends.len(), 2);
    assert_eq!(request[4], END_HEADERS, "the DATA frame ends the stream");
    let block = &request[9..ends[0]];
    let text = String::from_utf8_lossy(block);
    assert!(text.contains("PUT") && text.contains("/x?y=1") && text.contains("x-trace"));
    assert!(
        block.ends_with(&[0x10 | 0xf, 28 - 15, 1, b'4']),
        "content-length 4"
    );
    assert_eq!(
        &request[ends[0]..ends[0] + 9],
        &[0, 0, 4, DATA, END_STREAM, 0, 0, 0, 0]
    );
    assert_eq!(&request[ends[0] + 9..], b"body");
    let mut out = Vec::new();
    let mut reader = Http2Reader::new(false);
    reader.prepare(&mut out, &request);
    reader.prepare(&mut out, &request);
    // Every frame of the request carries the stream id.
    assert_eq!(&out[5..9], &3u32.to_be_bytes());
    assert_eq!(&out[ends[0] + 5..ends[0] + 9], &3u32.to_be_bytes());
}

#[test]
fn what_http2_cannot_send_is_refused() {
    let mut out = Vec::new();
    let big = vec![b'x'; MAX_BODY_BYTES + 1];
    let err = append_request(&mut out, Method::Post, "/", "h", &[], &big).unwrap_err();
    assert!(err.contains("at most 16384 bytes"), "{err}");
    let long = [("x-long".to_string(), "v".repeat(MAX_FRAME_BYTES))];
    let err = append_request(&mut out, Method::Get, "/", "h", &long, b"").unwrap_err();
    assert!(err.contains("fit one 16384-byte frame"), "{err}");
    assert!(
        check_header("Upgrade")
            .unwrap_err()
            .contains("connection-specific")
    );
    assert!(check_header("x-fine").is_ok());
}

#[test]
fn statuses_in_every_encoding() {
    // Indexed (static table), after a table size update.
    assert_eq!(block_status(&[0x20, 0x88]), Ok(200));
    assert_eq!(block_status(&[0x8e]), Ok(500));
    // Literal with incremental indexing, not Huffman-coded (nginx's 503).
    assert_eq!(block_status(&[0x48, 0x03, b'5', b'0', b'3']), Ok(503));
    // Literal never indexed, Huffman-coded: "200" = 0x1001, "503" = 0x6c0cff, "103" = 0x0819
    // (the codes of RFC 7541 Appendix B, as the h2 crate's table has them).
    assert_eq!(block_status(&[0x18, 0x82, 0x10, 0x01]), Ok(200));
    assert_eq!(block_status(&[0x08, 0x83, 0x6c, 0x0c, 0xff]), Ok(503));
    assert_eq!(block_status(&[0x48, 0x82, 0x08, 0x19]), Ok(103));
    // A literal name.
    let mut block = vec![0x00, 7];
    block.extend_from_slice(b":status");
    block.extend_from_slice(&[3, b'2', b'0', b'4']);
    assert_eq!(block_status(&block), Ok(204));
    // A dynamic-table reference, another first field, short or bad values.
    assert!(matches!(block_status(&[0xbe]), Err(Malformed::Http2(m)) if m.contains("dynamic")));
    for bad in [
        &[0x82][..],
        &[0x44, 0x01, b'/'],
        &[0x48, 0x02, b'2', b'0'],
        &[0x48, 0x03, b'2', b'x', b'0'],
        &[0x48, 0x83, 0x10, 0x01, 0xff],
        &[0x48, 0x81, 0x10],
        &[],
        &[0x20],
    ] {
        assert!(block_status(bad).is_err(), "{bad:02x?}");
    }
}

#[test]
fn control_frames_are_acknowledged_and_goaway_closes() {
    let mut reader = awaiting();
    let mut bytes = frame(PING, 0, 0, b"12345678");
    bytes.extend(frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
    bytes.extend(frame(SETTINGS, ACK, 0, b""));
    bytes.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
    bytes.extend(frame(0xfa, 0, 0, b"an unknown frame type"));
    bytes.extend(frame(HEADERS, END_HEADERS, 1, &[0x88]));
    bytes.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]));
    bytes.extend(frame(DATA, END_STREAM, 1, b"ok"));
    assert_eq!(feed(&mut reader, &bytes, bytes.len()), [Ok(true)]);
    let mut owed = frame(PING, ACK, 0, b"12345678");
    owed.extend(frame(SETTINGS, ACK, 0, b""));
    assert_eq!(reader.control(), owed);
    reader.control_written(10);
    assert_eq!(reader.control(), &owed[10..]);
    assert!(reader.close(), "GOAWAY: reopen after this response");
}

#[test]
fn interim_responses_trailers_and_continuations() {
    let mut reader = awaiting();
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x48, 0x03, b'1', b'0', b'3']);
    bytes.extend(frame(HEADERS, 0, 1, &[0x88]));
    bytes.extend(frame(
        CONTINUATION,
        END_HEADERS,
        1,
        &[0x0f, 0x0d, 0x01, b'0'],
    ));
    bytes.extend(frame(DATA, 0, 1, b"part"));
    // Trailers end the stream, over a CONTINUATION.
    bytes.extend(frame(HEADERS, END_STREAM, 1, &[0x00]));
    let results = feed(&mut reader, &bytes, 1);
    assert_eq!(
        results.last(),
        Some(&Ok(false)),
        "the trailers' block is open"
    );
    let end = frame(CONTINUATION, END_HEADERS, 1, b"");
    assert_eq!(feed(&mut reader, &end, 3), [Ok(false), Ok(false), Ok(true)]);
    assert_eq!(reader.status(), 200);

    // Padded and prioritised HEADERS.
    let mut reader = awaiting();
    let payload = [&[2][..], &[0, 0, 0, 0, 16], &[0x8d], &[0, 0]].concat();
    let bytes = frame(
        HEADERS,
        END_HEADERS | END_STREAM | PADDED | PRIORITY,
        1,
        &payload,
    );
    assert_eq!(feed(&mut reader, &bytes, 4).last(), Some(&Ok(true)));
    assert_eq!(reader.status(), 404);
}

#[test]
fn what_fails_a_request() {
    let cases: [(&str, Vec<u8>); 8] = [
        ("reset", frame(RST_STREAM, 0, 1, &[0, 0, 0, 2])),
        (
            "push",
            frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]),
        ),
        ("went away", frame(GOAWAY, 0, 0, &[0; 8])),
        ("larger", {
            let mut b = vec![0, 0x40, 1, DATA, 0, 0, 0, 0, 1];
            b.resize(9 + 16_385, 0);
            b
        }),
        ("interrupted", {
            let mut b = frame(HEADERS, 0, 1, &[0x88]);
            b.extend(frame(DATA, END_STREAM, 1, b""));
            b
        }),
        ("before its headers", frame(DATA, END_STREAM, 1, b"x")),
        ("SETTINGS", frame(SETTINGS, 0, 0, &[0, 1, 0])),
        (
            "informational",
            frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                1,
                &[0x48, 0x82, 0x08, 0x19],
            ),
        ),
    ];
    for (why, bytes) in cases {
        let mut reader = awaiting();
        let results = feed(&mut reader, &bytes, bytes.len().min(BUFFER_BYTES));
        let err = results.into_iter().find_map(Result::err);
        assert!(
            matches!(err, Some(Malformed::Http2(m)) if m.contains(why)),
            "{why}: {err:?}"
        );
    }
    // A reset of a finished stream, or of another, is nothing to this request.
    let mut reader = awaiting();
    assert_eq!(
        feed(&mut reader, &frame(RST_STREAM, 0, 7, &[0; 4]), 13),
        [Ok(false)]
    );
    assert_eq!(reader.eof(), Err(Malformed::Eof));
}

#[test]
fn pings_that_pile_up_fail_the_connection() {
    let mut reader = awaiting();
    let ping = frame(PING, 0, 0, b"abcdefgh");
    let fits = CONTROL_BYTES / ping.len();
    let flood: Vec<u8> = ping.repeat(fits + 1);
    let results = feed(&mut reader, &flood, ping.len());
    assert!(results[..fits].iter().all(|r| *r == Ok(false)));
    assert!(matches!(results[fits], Err(Malformed::Http2(m)) if m.contains("pile up")));
}

#[test]
fn a_gigabyte_of_data_tops_the_window_up() {
    let mut reader = awaiting();
    let data = frame(DATA, 0, 1, &[0; MAX_FRAME_BYTES]);
    let frames = (REFILL_BYTES as usize).div_ceil(MAX_FRAME_BYTES);
    feed(&mut reader, &frame(HEADERS, END_HEADERS, 1, &[0x88]), 64);
    for _ in 0..frames {
        feed(&mut reader, &data, BUFFER_BYTES);
    }
    let increment = (frames * MAX_FRAME_BYTES) as u32;
    let mut owed = vec![0, 0, 4, WINDOW_UPDATE, 0, 0, 0, 0, 0];
    owed.extend_from_slice(&increment.to_be_bytes());
    assert_eq!(reader.control(), owed);
}

#[test]
fn a_new_connection_starts_over() {
    let mut reader = awaiting();
    feed(&mut reader, &frame(SETTINGS, 0, 0, b""), 9);
    feed(&mut reader, &[0, 0], 2);
    reader.connected();
    assert!(reader.control().is_empty());
    let mut out = Vec::new();
    reader.prepare(
        &mut out,
        &frame(HEADERS, END_HEADERS | END_STREAM, 0, &[0x82]),
    );
    assert!(out.starts_with(PREFACE));
    assert_eq!(&out[64 + 5..64 + 9], &1u32.to_be_bytes());
    // The half frame header of the old connection is gone.
    let bytes = frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]);
    assert_eq!(feed(&mut reader, &bytes, 100), [Ok(true)]);
}

#[test]
fn stream_ids_that_run_out_close_the_connection() {
    let mut reader = awaiting();
    reader.next_stream = MAX_STREAM_ID;
    let mut out = Vec::new();
    reader.prepare(
        &mut out,
        &frame(HEADERS, END_HEADERS | END_STREAM, 0, &[0x82]),
    );
    assert_eq!(&out[5..9], &MAX_STREAM_ID.to_be_bytes());
    assert!(reader.close());
}

proptest! {
    #[test]
    fn any_split_reads_the_same(piece in 1usize..200) {
        let mut reader = Http2Reader::new(false);
        let mut request = Vec::new();
        append_request(&mut request, Method::Get, "/", "h", &[], b"").unwrap();
        let ends = frame_ends(NGINX);
        let mut from = 0;
        for (k, status) in [(0, 200), (1, 404), (2, 503)] {
            reader.prepare(&mut Vec::new(), &request);
            let to = ends[4 + 2 * k];
            let results = feed(&mut reader, &NGINX[from..to], piece);
            prop_assert_eq!(results.last(), Some(&Ok(true)));
            prop_assert_eq!(reader.status(), status);
            from = to;
        }
    }

    #[test]
    fn garbage_is_refused_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut reader = awaiting();
        let _ = feed(&mut reader, &bytes, 37);
        let _ = block_status(&bytes);
        let _ = huffman_status(&bytes);
    }
}
