use super::*;

fn echo(request_bytes: u32, response_bytes: u32) -> Header {
    Header {
        mode: Mode::Echo,
        request_bytes,
        response_bytes,
        buffer_bytes: 0,
        pacing_mbit: 0,
    }
}

#[test]
fn headers_round_trip() {
    for header in [
        echo(1, 1),
        echo(MAX_MESSAGE, 7),
        Header {
            mode: Mode::Source,
            request_bytes: 0,
            response_bytes: 128 << 10,
            buffer_bytes: 4 << 20,
            pacing_mbit: 800,
        },
        Header {
            mode: Mode::Sink,
            request_bytes: 0,
            response_bytes: 0,
            buffer_bytes: 0,
            pacing_mbit: 0,
        },
    ] {
        assert_eq!(Header::decode(&header.encode()), Ok(header));
    }
}

#[test]
fn bad_headers_are_refused_with_the_reason() {
    let good = echo(1, 1).encode();
    let mut bad = good;
    bad[0] = b'X';
    assert_eq!(Header::decode(&bad), Err(HeaderError::Magic));
    let mut bad = good;
    bad[4] = 9;
    assert_eq!(Header::decode(&bad), Err(HeaderError::Version(9)));
    let mut bad = good;
    bad[5] = 0;
    assert_eq!(Header::decode(&bad), Err(HeaderError::Mode(0)));
    let mut bad = good;
    bad[7] = 1;
    assert_eq!(Header::decode(&bad), Err(HeaderError::Reserved));
    let err = Header::decode(&echo(MAX_MESSAGE + 1, 1).encode()).unwrap_err();
    assert!(err.to_string().contains("request_bytes"), "{err}");
    assert!(Header::decode(&echo(1, 0).encode()).is_err());
    let mut huge = echo(1, 1);
    huge.buffer_bytes = u32::MAX;
    assert!(Header::decode(&huge.encode()).is_err());
    assert_eq!(Header::decode(&[0xff; HEADER_LEN]), Err(HeaderError::Magic));
}

#[test]
fn the_tail_keeps_the_last_bytes_across_short_reads() {
    let trailer = Trailer {
        total_retrans: 7,
        rtt_us: 42,
    };
    let bytes = trailer.encode();
    let mut tail = Tail::default();
    tail.push(&[1; 100]);
    assert_eq!(Trailer::decode(tail.bytes()), None);
    tail.push(&bytes[..3]);
    tail.push(&bytes[3..10]);
    tail.push(&[]);
    tail.push(&bytes[10..]);
    assert_eq!(Trailer::decode(tail.bytes()), Some(trailer));
    let mut long = vec![0u8; 50];
    long.extend_from_slice(&bytes);
    let mut tail = Tail::default();
    tail.push(&long);
    assert_eq!(Trailer::decode(tail.bytes()), Some(trailer));
}

#[test]
fn udp_datagrams_are_checked() {
    let mut datagram = [0u8; 32];
    encode_udp_request(&mut datagram, 5, 20);
    assert_eq!(udp_response_len(&datagram), Some(20));
    assert_eq!(udp_response_seq(&datagram), Some(5));
    assert_eq!(udp_response_len(&datagram[..15]), None);
    encode_udp_request(&mut datagram, 5, UDP_MAX + 1);
    assert_eq!(udp_response_len(&datagram), None);
    encode_udp_request(&mut datagram, 5, 3);
    assert_eq!(udp_response_len(&datagram), None);
    datagram[0] = 0;
    assert_eq!(udp_response_len(&datagram), None);
    assert_eq!(udp_response_seq(&datagram), None);
}
