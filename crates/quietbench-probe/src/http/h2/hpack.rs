//! The little of HPACK (RFC 7541) the `http2=true` load needs: integers and plain string
//! literals to encode a request's fields once, never indexed, so that no encoder state exists;
//! and a response's `:status`, the one field read (`super` explains why that is enough), from
//! the static table or a literal, Huffman-coded or not.

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

/// A status's three digits, Huffman-coded (RFC 7541 Appendix B: '0'–'2' are the 5-bit codes
/// 0–2, '3'–'9' the 6-bit codes 0b011001–0b011111), then at most 7 bits of padding, all ones.
pub(super) fn huffman_status(bytes: &[u8]) -> Option<u16> {
    let bits = bytes.len() * 8;
    let bit = |i: usize| (bytes[i / 8] >> (7 - i % 8)) & 1;
    let (mut at, mut status) = (0, 0u16);
    for _ in 0..3 {
        if at + 5 > bits {
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
        status = status * 10 + u16::from(digit);
    }
    let padding = bits - at;
    (padding < 8 && (at..bits).all(|i| bit(i) == 1)).then_some(status)
}

/// The statuses of the static table's `:status` entries, indices 8 to 14.
const STATIC_STATUS: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];

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
            62.. => Err(Malformed::Http2(
                "the server referred to its HPACK dynamic table, which our SETTINGS set to size 0",
            )),
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
    } else if value.len() == 3 && value.iter().all(u8::is_ascii_digit) {
        Some(value.iter().fold(0, |s, d| s * 10 + u16::from(d - b'0')))
    } else {
        None
    };
    status.filter(|s| (100..=999).contains(s)).ok_or(HPACK)
}
