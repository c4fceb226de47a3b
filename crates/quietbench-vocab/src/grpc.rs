//! The `http` probe's gRPC calls (`grpc=PACKAGE.SERVICE/METHOD`): the parameters both ends
//! name, the form of a method, and the hex the encoded request travels in.
//!
//! The controller reads the user's request file (`grpc_request=FILE`, JSON or binary protobuf)
//! and descriptor set (`grpc_descriptor=FILE`), encodes the request once per run and sends its
//! bytes in [`GRPC_MESSAGE`] as hex (parameters are text). The probe frames the bytes as gRPC
//! does (a 5-byte prefix) and sends the same call each time: no protobuf code on the agent.

/// The method to call: `PACKAGE.SERVICE/METHOD`.
pub const GRPC: &str = "grpc";
/// The request message's file on the controller's machine: JSON or binary protobuf.
pub const GRPC_REQUEST: &str = "grpc_request";
/// The descriptor set (`protoc --descriptor_set_out`, `buf build -o`) the method is found in.
pub const GRPC_DESCRIPTOR: &str = "grpc_descriptor";
/// The encoded request message in hex, set by the controller from [`GRPC_REQUEST`].
pub const GRPC_MESSAGE: &str = "grpc_message";

/// The largest encoded request message: a gRPC frame (a 5-byte prefix and the message) goes in
/// one HTTP/2 DATA frame of at most 16 384 bytes.
pub const MAX_GRPC_MESSAGE_BYTES: usize = 16_384 - 5;

/// Checks a method's name, `PACKAGE.SERVICE/METHOD` (the package may be empty or dotted): the
/// service's full name and the method's name.
pub fn split_method(text: &str) -> Result<(&str, &str), String> {
    let why = || {
        format!(
            "'{text}': give the method as PACKAGE.SERVICE/METHOD, e.g. helloworld.Greeter/SayHello"
        )
    };
    let (service, method) = text.split_once('/').ok_or_else(why)?;
    let word = |w: &str| {
        !w.is_empty()
            && !w.starts_with(|c: char| c.is_ascii_digit())
            && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !word(method) || !service.split('.').all(word) {
        return Err(why());
    }
    Ok((service, method))
}

/// Bytes as lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    text
}

/// Hex (either case) back to bytes.
pub fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let text = text.trim().as_bytes();
    if !text.len().is_multiple_of(2) {
        return Err("an odd number of hex digits".into());
    }
    text.chunks(2)
        .enumerate()
        .map(|(i, pair)| match (digit(pair[0]), digit(pair[1])) {
            (Some(high), Some(low)) => Ok(high << 4 | low),
            _ => Err(format!("not hex at byte {}", i + 1)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_package_service_slash_method() {
        assert_eq!(
            split_method("helloworld.Greeter/SayHello").unwrap(),
            ("helloworld.Greeter", "SayHello")
        );
        assert_eq!(split_method("Svc/Do_1").unwrap(), ("Svc", "Do_1"));
        for bad in [
            "",
            "Greeter",
            "/SayHello",
            "a.Greeter/",
            "a..Greeter/M",
            "a.Greeter/M/N",
            "a.Gr eeter/M",
            "a.1Greeter/M",
            "a.Greeter/Say-Hello",
        ] {
            let why = split_method(bad).unwrap_err();
            assert!(why.contains("PACKAGE.SERVICE/METHOD"), "{bad}: {why}");
        }
    }

    #[test]
    fn hex_goes_there_and_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = to_hex(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(from_hex(&text).unwrap(), bytes);
        assert_eq!(from_hex("0A0b").unwrap(), vec![10, 11]);
        assert_eq!(from_hex("").unwrap(), Vec::<u8>::new());
        assert!(from_hex("abc").unwrap_err().contains("odd"));
        assert!(from_hex("zz").unwrap_err().contains("byte 1"));
    }
}
