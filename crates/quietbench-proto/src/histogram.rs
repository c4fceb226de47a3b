//! Decoding the histograms of the wire contract (`Histogram.hdr_v2_deflate`) with bounds.
//!
//! hdrhistogram's own deserializer trusts the sizes an encoding states: a 40-byte message that
//! declares a 4 GiB payload makes it zero 4 GiB before it finds the bytes missing, and a DEFLATE
//! stream may inflate without limit. A controller reads these bytes from agents over the network,
//! so [`decode_bounded`] checks every stated size against the bytes really there, and caps the
//! inflated size and the histogram's precision, before hdrhistogram allocates anything.

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
    Deserializer::new()
        .deserialize(&mut &plain[..])
        .map_err(|e| HistogramDecodeError::Invalid(e.to_string()))
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
