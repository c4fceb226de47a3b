//! The little of HPACK (RFC 7541) the `http2=true` load needs: integers and plain string
//! literals to encode a request's fields once, never indexed, so that no encoder state exists;
//! and a response's `:status`, the one field read (`super` explains why that is enough), from
//! the static table or a literal, Huffman-coded or not; and with `grpc=`, the `grpc-status`
//! of the block that ends a call.

use crate::http::response::Malformed;

/// An HPACK integer with an `n`-bit prefix whose high bits are `high` (RFC 7541 §5.1).
pub(super) fn put_int(out: &mut Vec<u8>, high: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal, not Huffman-coded.
pub(super) fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A field never indexed by a static-table name (`0001xxxx`): no encoder state to keep.
pub(super) fn put_named(out: &mut Vec<u8>, name_index: usize, value: &[u8]) {
    put_int(out, 0x10, 4, name_index);
    put_str(out, value);
}

/// Static table indices (RFC 7541 Appendix A).
pub(super) const AUTHORITY: usize = 1;
pub(super) const METHOD_GET: u8 = 2;
pub(super) const METHOD_POST: u8 = 3;
pub(super) const PATH: usize = 4;
pub(super) const PATH_ROOT: u8 = 4;
pub(super) const SCHEME_HTTP: u8 = 6;
pub(super) const CONTENT_LENGTH: usize = 28;

/// An HPACK integer with an `n`-bit prefix at `bytes[*at]`; None when cut short or too large.
fn get_int(bytes: &[u8], at: &mut usize, n: u32) -> Option<usize> {
    let max = (1usize << n) - 1;
    let mut value = usize::from(*bytes.get(*at)?) & max;
    *at += 1;
    if value < max {
        return Some(value);
    }
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        value = value.checked_add(usize::from(b & 0x7f).checked_shl(shift)?)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// Decimal digits, Huffman-coded (RFC 7541 Appendix B: '0'–'2' are the 5-bit codes 0–2,
/// '3'–'9' the 6-bit codes 0b011001–0b011111), then at most 7 bits of padding, all ones: the
/// number and how many digits it had, or None for anything else (or more than 9 digits).
fn huffman_digits(bytes: &[u8]) -> Option<(u32, usize)> {
    let bits = bytes.len() * 8;
    let bit = |i: usize| (bytes[i / 8] >> (7 - i % 8)) & 1;
    let (mut at, mut value, mut digits) = (0, 0u32, 0);
    while at < bits {
        if bits - at < 8 && (at..bits).all(|i| bit(i) == 1) {
            break;
        }
        if at + 5 > bits || digits == 9 {
            return None;
        }
        let five = (0..5).fold(0u8, |v, k| v << 1 | bit(at + k));
        let digit = if five <= 2 {
            at += 5;
            five
        } else if at + 6 <= bits && (0b01100..=0b01111).contains(&five) {
            let six = five << 1 | bit(at + 5);
            if six < 0b011001 {
                return None;
            }
            at += 6;
            six - 0b011001 + 3
        } else {
            return None;
        };
        value = value * 10 + u32::from(digit);
        digits += 1;
    }
    (digits > 0).then_some((value, digits))
}

/// A status's three digits, Huffman-coded.
pub(super) fn huffman_status(bytes: &[u8]) -> Option<u16> {
    match huffman_digits(bytes)? {
        (status, 3) => u16::try_from(status).ok(),
        _ => None,
    }
}

/// A string literal's value as digits, Huffman-coded or not (`huffman`).
fn digits(value: &[u8], huffman: bool) -> Option<u32> {
    if huffman {
        return huffman_digits(value).map(|(v, _)| v);
    }
    if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |v, d| v * 10 + u32::from(d - b'0')))
}

/// The statuses of the static table's `:status` entries, indices 8 to 14.
const STATIC_STATUS: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];

/// A reference into a dynamic table we left the server without.
const DYNAMIC_TABLE: Malformed = Malformed::Http2(
    "the server referred to its HPACK dynamic table, which our SETTINGS set to size 0",
);

/// The `:status` at the start of a header block (after any table size updates).
pub(super) fn block_status(block: &[u8]) -> Result<u16, Malformed> {
    const HPACK: Malformed =
        Malformed::Http2("a response header block that does not start with a :status we can read");
    let mut at = 0;
    // Dynamic table size updates (001xxxxx): the server confirming the size 0 we set.
    while block.get(at).is_some_and(|b| b & 0xe0 == 0x20) {
        get_int(block, &mut at, 5).ok_or(HPACK)?;
    }
    let first = *block.get(at).ok_or(HPACK)?;
    let name = if first & 0x80 != 0 {
        let index = get_int(block, &mut at, 7).ok_or(HPACK)?;
        return match index {
            8..=14 => Ok(STATIC_STATUS[index - 8]),
            62.. => Err(DYNAMIC_TABLE),
            _ => Err(HPACK),
        };
    } else if first & 0xc0 == 0x40 {
        get_int(block, &mut at, 6).ok_or(HPACK)?
    } else if first & 0xe0 == 0x00 {
        get_int(block, &mut at, 4).ok_or(HPACK)?
    } else {
        return Err(HPACK);
    };
    match name {
        8..=14 => {}
        0 => {
            // A literal name: it must be ":status", not Huffman-coded (no server seen does).
            let huffman = block.get(at).ok_or(HPACK)? & 0x80 != 0;
            let length = get_int(block, &mut at, 7).ok_or(HPACK)?;
            if huffman || block.get(at..at + length) != Some(b":status".as_slice()) {
                return Err(HPACK);
            }
            at += length;
        }
        _ => return Err(HPACK),
    }
    let huffman = block.get(at).ok_or(HPACK)? & 0x80 != 0;
    let length = get_int(block, &mut at, 7).ok_or(HPACK)?;
    let value = block.get(at..at + length).ok_or(HPACK)?;
    let status = if huffman {
        huffman_status(value)
    } else if value.len() == 3 {
        digits(value, false).and_then(|s| u16::try_from(s).ok())
    } else {
        None
    };
    status.filter(|s| (100..=999).contains(s)).ok_or(HPACK)
}

/// The field name gRPC's status goes under, as sent plain and as Huffman-coded (RFC 7541
/// Appendix B; the code is canonical, so this is the only coding of the name). The coded form
/// was computed with the Python `hpack` package's encoder and is the one tonic's server sends
/// (the fixture `tonic-0.14-grpc-status.bin`, tested in `tests.rs`).
const GRPC_STATUS: &[u8] = b"grpc-status";
const GRPC_STATUS_HUFFMAN: &[u8] = &[0x9a, 0xca, 0xc8, 0xb2, 0x12, 0x34, 0xda, 0x8f];

/// Reads one string literal at `at`: whether it is Huffman-coded, and its bytes; None when the
/// block is cut short there.
fn get_str<'a>(block: &'a [u8], at: &mut usize) -> Option<(bool, &'a [u8])> {
    let huffman = block.get(*at)? & 0x80 != 0;
    let length = get_int(block, at, 7)?;
    let value = block.get(*at..at.checked_add(length)?)?;
    *at += length;
    Some((huffman, value))
}

/// The `grpc-status` of a header block that ends a gRPC call (its trailers, or a
/// "Trailers-Only" response whose `:status` comes first), read field by field. Our SETTINGS
/// leave the server no dynamic table, so every field is a static-table reference (none of which
/// is `grpc-status`) or a literal; a reference into a dynamic table is an error.
///
/// `whole`: the block is all here. When it is not (a long block, of which the reader keeps the
/// start), running out of bytes before `grpc-status` is Ok(None), not an error.
pub(super) fn block_grpc_status(block: &[u8], whole: bool) -> Result<Option<u32>, Malformed> {
    const HPACK: Malformed = Malformed::Http2("a gRPC trailer block we cannot read");
    let mut at = 0;
    let cut = || if whole { Err(HPACK) } else { Ok(None) };
    while at < block.len() {
        let first = block[at];
        let name_index = if first & 0x80 != 0 {
            let Some(index) = get_int(block, &mut at, 7) else {
                return cut();
            };
            match index {
                1..=61 => continue,
                0 => return Err(HPACK),
                _ => return Err(DYNAMIC_TABLE),
            }
        } else if first & 0xe0 == 0x20 {
            if get_int(block, &mut at, 5).is_none() {
                return cut();
            }
            continue;
        } else if first & 0xc0 == 0x40 {
            get_int(block, &mut at, 6)
        } else {
            get_int(block, &mut at, 4)
        };
        let Some(name_index) = name_index else {
            return cut();
        };
        if name_index > 61 {
            return Err(DYNAMIC_TABLE);
        }
        let name = if name_index == 0 {
            match get_str(block, &mut at) {
                Some(name) => Some(name),
                None => return cut(),
            }
        } else {
            None
        };
        let Some((huffman, value)) = get_str(block, &mut at) else {
            return cut();
        };
        let is_status = match name {
            Some((false, name)) => name == GRPC_STATUS,
            Some((true, name)) => name == GRPC_STATUS_HUFFMAN,
            None => false,
        };
        if is_status {
            return digits(value, huffman)
                .map(Some)
                .ok_or(Malformed::Http2("a grpc-status that is not a number"));
        }
    }
    Ok(None)
}
