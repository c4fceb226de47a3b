//! Decoding the histograms of the wire contract (`Histogram.hdr_v2_deflate`) with bounds.
//!
//! hdrhistogram's own deserializer trusts the sizes an encoding states: a 40-byte message that
//! declares a 4 GiB payload makes it zero 4 GiB before it finds the bytes missing, and a DEFLATE
//! stream may inflate without limit. A controller reads these bytes from agents over the network,
//! so [`decode_bounded`] checks every stated size against the bytes really there, and caps the
//! inflated size and the size of the counts array the header's range and precision imply, before
//! hdrhistogram allocates anything; after decoding it refuses counts whose sum overflows.

use std::io::Read;

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;

/// The most encoded bytes one histogram may take: a gRPC message is at most 1 MiB anyway.
pub const MAX_ENCODED: usize = 1 << 20;
/// The most bytes a compressed histogram may inflate to. quietbench's own histograms (1 ns to
/// 1 h, 3 digits) have 45 056 counts: at most 9 bytes each, under 0.5 MiB.
pub const MAX_INFLATED: usize = 4 << 20;
/// The most significant digits accepted. 4 digits over the whole u64 range is 819 200 counts
/// (6.5 MB); 5 would be ten times that, and no probe records with more than 3.
pub const MAX_DIGITS: u32 = 4;
/// The most bytes the decoded counts array may take (8 bytes a count). The header's lowest,
/// highest and digits fix its length, and hdrhistogram allocates it whole before reading one
/// count, so a 137-byte encoding can claim 6.5 MB: 2000 of them took a controller past 13 GB.
/// quietbench's own histograms (1 ns to 1 h, 3 digits) take 270 KB, and 3 digits over the whole
/// u64 range 450 KB; 4 digits fit up to a range of about 2^29 (half a second in ns).
pub const MAX_DECODED: usize = 2 << 20;
/// The most samples one histogram may count. A trial records at most an hour; 256 threads at
/// 10^9 events/s for an hour are 9.2 * 10^14, under this 2^50 (1.1 * 10^15). hdrhistogram's
/// total saturates at u64::MAX instead of failing, which puts p99 below p50; with this cap a
/// sum cannot get near the overflow, nor can merging 16 384 histograms.
pub const MAX_TOTAL_COUNT: u64 = 1 << 50;

// The base cookies 0x1c849303 and 0x1c849304, each with the 0x10 word-size bit, as every V2
// implementation writes them.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Cookie, payload length, normalizing offset, digits, lowest, highest, integer-to-double ratio.
const V2_HEADER_LEN: usize = 4 + 4 + 4 + 4 + 8 + 8 + 8;

/// Why histogram bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramDecodeError {
    /// More bytes than any histogram of the wire contract takes.
    #[error("{0} bytes is more than the {MAX_ENCODED} a histogram may take")]
    TooLarge(usize),
    /// A stated length runs past the bytes there.
    #[error("truncated: {what} states {stated} bytes but only {present} follow")]
    Truncated {
        /// Which length.
        what: &'static str,
        /// The length stated.
        stated: u64,
        /// The bytes present.
        present: usize,
    },
    /// Not an HdrHistogram V2 cookie.
    #[error("not HdrHistogram V2 (cookie {0:#010x})")]
    Cookie(u32),
    /// The DEFLATE stream is broken.
    #[error("the DEFLATE stream is corrupt: {0}")]
    Deflate(String),
    /// The DEFLATE stream inflates past [`MAX_INFLATED`].
    #[error("inflates to more than {MAX_INFLATED} bytes")]
    InflatesTooFar,
    /// More significant digits than [`MAX_DIGITS`].
    #[error("{0} significant digits (at most {MAX_DIGITS} are accepted)")]
    Digits(u32),
    /// The header's range is not one a histogram can have.
    #[error(
        "the header's range is invalid: lowest {lowest}, highest {highest}, {digits} digits \
         (lowest must be at least 1 and highest at least twice lowest)"
    )]
    Range {
        /// Lowest discernible value stated.
        lowest: u64,
        /// Highest trackable value stated.
        highest: u64,
        /// Significant digits stated.
        digits: u32,
    },
    /// The header's range and precision need a counts array over [`MAX_DECODED`].
    #[error(
        "the header's range ({lowest} to {highest}, {digits} digits) needs {bytes} bytes of \
         counts, more than the {MAX_DECODED} accepted"
    )]
    DecodesTooLarge {
        /// Lowest discernible value stated.
        lowest: u64,
        /// Highest trackable value stated.
        highest: u64,
        /// Significant digits stated.
        digits: u32,
        /// The counts array's size.
        bytes: u64,
    },
    /// The counts sum past [`MAX_TOTAL_COUNT`] (or overflow u64).
    #[error("the counts sum to {0} or more samples, past the {MAX_TOTAL_COUNT} accepted")]
    CountOverflow(u64),
    /// hdrhistogram refused the (bounded) encoding.
    #[error("{0}")]
    Invalid(String),
}

/// Decodes HdrHistogram V2 bytes, DEFLATE-compressed or not, refusing any stated size that the
/// bytes do not back and anything over the bounds above. Never panics, whatever the bytes.
pub fn decode_bounded(bytes: &[u8]) -> Result<Histogram<u64>, HistogramDecodeError> {
    if bytes.len() > MAX_ENCODED {
        return Err(HistogramDecodeError::TooLarge(bytes.len()));
    }
    let inflated;
    let plain = match read_u32(bytes, 0, "the cookie")? {
        V2_COMPRESSED_COOKIE => {
            let stated = read_u32(bytes, 4, "the compressed length")?;
            let stream = bytes.get(8..).unwrap_or_default();
            let stream = checked_prefix(stream, u64::from(stated), "the compressed length")?;
            inflated = inflate_capped(stream)?;
            &inflated[..]
        }
        V2_COOKIE => bytes,
        other => return Err(HistogramDecodeError::Cookie(other)),
    };
    let plain = checked_plain(plain)?;
    let hist: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &plain[..])
        .map_err(|e| HistogramDecodeError::Invalid(e.to_string()))?;
    // hdrhistogram sums the counts with saturation: a sum at u64::MAX may have overflowed.
    if hist.len() > MAX_TOTAL_COUNT {
        return Err(HistogramDecodeError::CountOverflow(hist.len()));
    }
    Ok(hist)
}

/// The bytes of the counts array that hdrhistogram allocates for a histogram of this range and
/// precision (`Histogram::new_with_bounds`, 8 bytes a count), or `None` when hdrhistogram would
/// refuse the range. Computed as hdrhistogram 7 does, in integers, without allocating.
pub fn decoded_bytes(lowest: u64, highest: u64, digits: u32) -> Option<u64> {
    if !(1..=u64::MAX / 2).contains(&lowest) || highest < 2 * lowest || digits > 5 {
        return None;
    }
    // Single-unit resolution up to 2 * 10^digits, rounded up to a power of two.
    let largest = 2 * 10u64.pow(digits);
    let sub_bucket_magnitude = 64 - (largest - 1).leading_zeros();
    let unit_magnitude = 63 - lowest.leading_zeros();
    if unit_magnitude + sub_bucket_magnitude > 63 {
        return None;
    }
    let sub_bucket_count = 1u64 << sub_bucket_magnitude;
    // Buckets, each twice the range of the one before, until `highest` is covered.
    let mut smallest_untrackable = sub_bucket_count << unit_magnitude;
    let mut buckets = 1u64;
    while smallest_untrackable <= highest {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    Some((buckets + 1) * (sub_bucket_count / 2) * 8)
}

/// Checks an uncompressed V2 encoding's header and returns exactly its header and payload.
fn checked_plain(plain: &[u8]) -> Result<&[u8], HistogramDecodeError> {
    let cookie = read_u32(plain, 0, "the inner cookie")?;
    if cookie != V2_COOKIE {
        return Err(HistogramDecodeError::Cookie(cookie));
    }
    let payload = read_u32(plain, 4, "the payload length")?;
    let digits = read_u32(plain, 12, "the digits")?;
    if digits > MAX_DIGITS {
        return Err(HistogramDecodeError::Digits(digits));
    }
    if plain.len() < V2_HEADER_LEN {
        return Err(HistogramDecodeError::Truncated {
            what: "the header",
            stated: V2_HEADER_LEN as u64,
            present: plain.len(),
        });
    }
    let lowest = read_u64(plain, 16);
    let highest = read_u64(plain, 24);
    match decoded_bytes(lowest, highest, digits) {
        None => {
            return Err(HistogramDecodeError::Range {
                lowest,
                highest,
                digits,
            });
        }
        Some(bytes) if bytes > MAX_DECODED as u64 => {
            return Err(HistogramDecodeError::DecodesTooLarge {
                lowest,
                highest,
                digits,
                bytes,
            });
        }
        Some(_) => {}
    }
    let body = checked_prefix(
        &plain[V2_HEADER_LEN..],
        u64::from(payload),
        "the payload length",
    )?;
    Ok(&plain[..V2_HEADER_LEN + body.len()])
}

fn read_u32(bytes: &[u8], at: usize, what: &'static str) -> Result<u32, HistogramDecodeError> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(HistogramDecodeError::Truncated {
            what,
            stated: 4,
            present: bytes.len().saturating_sub(at),
        })
}

/// A big-endian u64 of the header, whose length the caller checked.
fn read_u64(header: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&header[at..at + 8]);
    u64::from_be_bytes(word)
}

fn checked_prefix<'a>(
    bytes: &'a [u8],
    stated: u64,
    what: &'static str,
) -> Result<&'a [u8], HistogramDecodeError> {
    usize::try_from(stated)
        .ok()
        .and_then(|n| bytes.get(..n))
        .ok_or(HistogramDecodeError::Truncated {
            what,
            stated,
            present: bytes.len(),
        })
}

fn inflate_capped(stream: &[u8]) -> Result<Vec<u8>, HistogramDecodeError> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(stream)
        .take(MAX_INFLATED as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| HistogramDecodeError::Deflate(e.to_string()))?;
    if out.len() > MAX_INFLATED {
        return Err(HistogramDecodeError::InflatesTooFar);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
