use super::*;

fn echo(request_bytes: u32, response_bytes: u32) -> Header {
    Header {
        mode: Mode::Echo,
        request_bytes,
        response_bytes,
        buffer_bytes: 0,
        pacing_mbit: 0,
        secret: SECRET,
    }
}

const SECRET: Secret = Secret([0xa5; SECRET_LEN]);

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
            secret: SECRET,
        },
        Header {
            mode: Mode::Sink,
            request_bytes: 0,
            response_bytes: 0,
            buffer_bytes: 0,
            pacing_mbit: 0,
            secret: SECRET,
        },
    ] {
        assert_eq!(Header::decode(&header.encode(), &SECRET), Ok(header));
    }
}

#[test]
fn bad_headers_are_refused_with_the_reason() {
    let good = echo(1, 1).encode();
    let mut bad = good;
    bad[0] = b'X';
    assert_eq!(Header::decode(&bad, &SECRET), Err(HeaderError::Magic));
    let mut bad = good;
    bad[4] = 9;
    assert_eq!(Header::decode(&bad, &SECRET), Err(HeaderError::Version(9)));
    let mut bad = good;
    bad[5] = 0;
    assert_eq!(Header::decode(&bad, &SECRET), Err(HeaderError::Mode(0)));
    let mut bad = good;
    bad[7] = 1;
    assert_eq!(Header::decode(&bad, &SECRET), Err(HeaderError::Reserved));
    let err = Header::decode(&echo(MAX_MESSAGE + 1, 1).encode(), &SECRET).unwrap_err();
    assert!(err.to_string().contains("request_bytes"), "{err}");
    assert!(Header::decode(&echo(1, 0).encode(), &SECRET).is_err());
    let mut huge = echo(1, 1);
    huge.buffer_bytes = u32::MAX;
    assert!(Header::decode(&huge.encode(), &SECRET).is_err());
    assert_eq!(
        Header::decode(&[0xff; HEADER_LEN], &SECRET),
        Err(HeaderError::Magic)
    );
    // Another trial's secret.
    assert_eq!(
        Header::decode(&good, &Secret([0x5a; SECRET_LEN])),
        Err(HeaderError::Secret)
    );
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
    let mut datagram = [0u8; 48];
    encode_udp_request(&mut datagram, 5, 20, &SECRET);
    assert_eq!(udp_response_len(&datagram, &SECRET), Some(20));
    assert_eq!(udp_response_seq(&datagram), Some(5));
    assert_eq!(udp_response_len(&datagram[..31], &SECRET), None);
    assert_eq!(udp_response_len(&datagram, &Secret([1; SECRET_LEN])), None);
    encode_udp_request(&mut datagram, 5, UDP_MAX + 1, &SECRET);
    assert_eq!(udp_response_len(&datagram, &SECRET), None);
    encode_udp_request(&mut datagram, 5, 3, &SECRET);
    assert_eq!(udp_response_len(&datagram, &SECRET), None);
    datagram[0] = 0;
    assert_eq!(udp_response_len(&datagram, &SECRET), None);
    assert_eq!(udp_response_seq(&datagram), None);
}

#[test]
fn secrets_travel_as_hex_and_compare_whole() {
    let s = Secret::from_hex("00112233445566778899aabbccddeeff").unwrap();
    assert_eq!(s.to_hex(), "00112233445566778899aabbccddeeff");
    assert_eq!(Secret::from_hex(&SECRET.to_hex()), Ok(SECRET));
    for bad in [
        "",
        "0011",
        "zz112233445566778899aabbccddeeff",
        "00112233445566778899aabbccddeeff00",
    ] {
        assert!(Secret::from_hex(bad).is_err(), "{bad}");
    }
    assert!(s.matches(&s.0));
    assert!(!s.matches(&s.0[..15]));
    let mut last = s.0;
    last[15] ^= 1;
    assert!(!s.matches(&last));
    assert_eq!(format!("{s:?}"), "Secret(..)");
}
