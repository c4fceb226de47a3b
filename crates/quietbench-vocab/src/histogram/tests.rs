use std::io::Write;

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};

use super::*;

fn sample() -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for v in [1u64, 7, 1_000, 812_345, 5_000_000_000] {
        h.record(v).unwrap();
    }
    h
}

fn plain(h: &Histogram<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    V2Serializer::new().serialize(h, &mut out).unwrap();
    out
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

fn compressed(inner: &[u8]) -> Vec<u8> {
    let stream = zlib(inner);
    let mut out = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
    out.extend_from_slice(&(stream.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream);
    out
}

#[test]
fn decodes_both_forms_of_what_hdrhistogram_writes() {
    let h = sample();
    let mut deflated = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&h, &mut deflated)
        .unwrap();
    assert_eq!(decode_bounded(&deflated).unwrap(), h);
    assert_eq!(decode_bounded(&plain(&h)).unwrap(), h);
}

#[test]
fn a_stated_payload_the_bytes_do_not_back_is_refused_before_any_allocation() {
    let mut bytes = plain(&sample());
    bytes[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    let err = decode_bounded(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            HistogramDecodeError::Truncated {
                what: "the payload length",
                stated: 4_294_967_295,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_compressed_length_past_the_end_is_refused() {
    let mut bytes = compressed(&plain(&sample()));
    let stated = bytes.len() as u32; // 8 more than there are
    bytes[4..8].copy_from_slice(&stated.to_be_bytes());
    let err = decode_bounded(&bytes).unwrap_err();
    assert!(
        err.to_string().contains("the compressed length states"),
        "{err}"
    );
}

#[test]
fn a_deflate_bomb_stops_at_the_cap() {
    let mut inner = plain(&sample());
    inner.resize(MAX_INFLATED + 4096, 0);
    let bytes = compressed(&inner);
    assert!(bytes.len() < 64 << 10, "the bomb is small: {}", bytes.len());
    assert_eq!(
        decode_bounded(&bytes).unwrap_err(),
        HistogramDecodeError::InflatesTooFar
    );
}

#[test]
fn too_many_digits_too_many_bytes_and_foreign_cookies_are_refused() {
    let mut five = plain(&sample());
    five[12..16].copy_from_slice(&5u32.to_be_bytes());
    assert_eq!(
        decode_bounded(&five).unwrap_err(),
        HistogramDecodeError::Digits(5)
    );
    assert_eq!(
        decode_bounded(&vec![0; MAX_ENCODED + 1]).unwrap_err(),
        HistogramDecodeError::TooLarge(MAX_ENCODED + 1)
    );
    assert_eq!(
        decode_bounded(b"\x1c\x84\x93\x03rest").unwrap_err(),
        HistogramDecodeError::Cookie(0x1c84_9303)
    );
    assert!(matches!(
        decode_bounded(b"\x1c\x84").unwrap_err(),
        HistogramDecodeError::Truncated { .. }
    ));
    // A compressed envelope around something that is not V2 inside.
    assert_eq!(
        decode_bounded(&compressed(b"\x00\x00\x00\x01")).unwrap_err(),
        HistogramDecodeError::Cookie(1)
    );
}

#[test]
fn invalid_bounds_are_refused_not_a_panic() {
    let mut bytes = plain(&sample());
    // lowest = 0 is invalid for hdrhistogram.
    bytes[16..24].copy_from_slice(&0u64.to_be_bytes());
    assert!(matches!(
        decode_bounded(&bytes).unwrap_err(),
        HistogramDecodeError::Range { lowest: 0, .. }
    ));
}

#[test]
fn the_counts_array_size_is_hdrhistograms_own() {
    for (lowest, highest, digits) in [
        (1, 2, 0),
        (1, 3_600_000_000_000, 3),
        (1, u64::MAX, 3),
        (1, 1 << 29, 4),
        (1000, 1_000_000_000, 2),
        (7, 1 << 40, 1),
        ((1 << 40) + 3, 1 << 61, 3),
        (1, u64::MAX, 0),
    ] {
        let h = Histogram::<u64>::new_with_bounds(lowest, highest, digits as u8).unwrap();
        assert_eq!(
            decoded_bytes(lowest, highest, digits),
            Some(h.distinct_values() as u64 * 8),
            "{lowest} {highest} {digits}"
        );
    }
    // What hdrhistogram refuses.
    assert_eq!(decoded_bytes(0, 10, 3), None);
    assert_eq!(decoded_bytes(10, 19, 3), None);
    assert_eq!(decoded_bytes(1 << 60, u64::MAX, 3), None);
}

/// The red team's histogram: 4 digits over 1..2^62 in a few dozen bytes claims 6.5 MB of
/// counts, which hdrhistogram would zero before reading one.
#[test]
fn a_header_that_claims_a_huge_counts_array_is_refused_before_decoding() {
    let mut bytes = plain(&sample());
    bytes[12..16].copy_from_slice(&4u32.to_be_bytes());
    bytes[24..32].copy_from_slice(&(1u64 << 62).to_be_bytes());
    let err = decode_bounded(&compressed(&bytes)).unwrap_err();
    assert_eq!(
        err,
        HistogramDecodeError::DecodesTooLarge {
            lowest: 1,
            highest: 1 << 62,
            digits: 4,
            bytes: 819_200 * 8,
        }
    );
    assert!(err.to_string().contains("6553600 bytes of counts"), "{err}");
    // quietbench's own histograms, and 3 digits over everything, stay well inside.
    assert!(decoded_bytes(1, u64::MAX, 3).unwrap() <= MAX_DECODED as u64 / 4);
}

#[test]
fn counts_that_sum_past_the_cap_or_overflow_are_refused() {
    // Four counts of 2^62: hdrhistogram's total saturates at u64::MAX, and p99 < p50 follows.
    let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
    for v in [10, 20, 30, 40] {
        h.record_n(v, 1 << 62).unwrap();
    }
    let err = decode_bounded(&plain(&h)).unwrap_err();
    assert_eq!(err, HistogramDecodeError::CountOverflow(u64::MAX));
    // Just past the cap, no overflow.
    let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
    h.record_n(10, MAX_TOTAL_COUNT + 1).unwrap();
    assert_eq!(
        decode_bounded(&plain(&h)).unwrap_err(),
        HistogramDecodeError::CountOverflow(MAX_TOTAL_COUNT + 1)
    );
    h.reset();
    h.record_n(10, MAX_TOTAL_COUNT).unwrap();
    assert_eq!(decode_bounded(&plain(&h)).unwrap().len(), MAX_TOTAL_COUNT);
}
