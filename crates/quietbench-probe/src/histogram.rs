//! HDR histograms as quietbench records and ships them: nanosecond latencies, 3 significant
//! digits, clamped (and counted) above one hour, and serialized as HdrHistogram V2 + DEFLATE so
//! that every HdrHistogram implementation (Java, Python, Go, C) decodes them.

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};

/// Lowest value recorded distinctly: 1 ns.
pub const LOWEST_NS: u64 = 1;
/// Highest value recorded distinctly: one hour. Longer samples are clamped to it and counted.
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept (0.1% resolution).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A fixed-size latency histogram: it never resizes, so recording never allocates.
pub fn new_latency_histogram() -> Histogram<u64> {
    let mut hist = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid");
    hist.auto(false);
    hist
}

/// Records one sample, clamping it into the histogram's range. Returns true when the sample was
/// clamped, so the caller can count it. Never allocates: the histogram is fixed-size.
#[inline]
pub fn record_clamped(hist: &mut Histogram<u64>, value_ns: u64) -> bool {
    let clamped = !(LOWEST_NS..=HIGHEST_NS).contains(&value_ns);
    let value = value_ns.clamp(LOWEST_NS, HIGHEST_NS);
    // Cannot fail: the value is within the bounds this histogram was made with.
    let _ = hist.record(value);
    clamped
}

/// Encoding or decoding failed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Encoding failed.
    #[error("cannot encode histogram as HdrHistogram V2+DEFLATE: {0}")]
    Encode(String),
    /// The bytes are not a V2+DEFLATE histogram.
    #[error("cannot decode HdrHistogram V2+DEFLATE bytes: {0}")]
    Decode(String),
}

/// Serializes as HdrHistogram V2, DEFLATE-compressed (cookie 0x1c849314).
pub fn encode_v2_deflate(hist: &Histogram<u64>) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(hist, &mut out)
        .map_err(|err| CodecError::Encode(format!("{err:?}")))?;
    Ok(out)
}

/// Decodes HdrHistogram V2 bytes, compressed or not, within the wire contract's bounds.
pub fn decode_v2(bytes: &[u8]) -> Result<Histogram<u64>, CodecError> {
    quietbench_vocab::histogram::decode_bounded(bytes)
        .map_err(|err| CodecError::Decode(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_v2_deflate() {
        let mut hist = new_latency_histogram();
        for v in [1u64, 7, 1_000, 812_345, 812_399, 5_000_000_000] {
            record_clamped(&mut hist, v);
        }
        let bytes = encode_v2_deflate(&hist).unwrap();
        // The V2 compressed cookie (0x1c849304 with the 0x10 word-size bit), big-endian, opens it.
        assert_eq!(&bytes[..4], &[0x1c, 0x84, 0x93, 0x14]);
        let back = decode_v2(&bytes).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.max(), hist.max());
        assert_eq!(back.min(), hist.min());
        assert_eq!(back.value_at_quantile(0.5), hist.value_at_quantile(0.5));
        assert_eq!(back, hist);
    }

    #[test]
    fn clamps_and_reports_out_of_range_samples() {
        let mut hist = new_latency_histogram();
        assert!(!record_clamped(&mut hist, 500));
        assert!(record_clamped(&mut hist, HIGHEST_NS * 2));
        assert!(record_clamped(&mut hist, 0));
        assert_eq!(hist.len(), 3);
        assert!(hist.max() >= HIGHEST_NS && hist.max() <= HIGHEST_NS + HIGHEST_NS / 1000);
    }

    #[test]
    fn garbage_is_a_decode_error_not_a_panic() {
        assert!(decode_v2(b"").is_err());
        assert!(decode_v2(&[0x1c, 0x84, 0x93, 0x04, 0, 0, 0, 9, 1, 2, 3]).is_err());
        assert!(decode_v2(&[0u8; 64]).is_err());
    }
}
