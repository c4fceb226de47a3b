//! The `http` probe's gRPC calls on the controller's side: `grpc=PACKAGE.SERVICE/METHOD` with
//! `grpc_request=FILE` (the request message, JSON or binary protobuf) and
//! `grpc_descriptor=FILE` (the descriptor set the method is in). Agents read no caller's
//! files and hold no protobuf code, so the controller reads both, finds the method, encodes
//! the message and sends its bytes in the internal `grpc_message` parameter, as hex; the
//! trial's record keeps the files' names as given.
//!
//! Like a request file ([`super::requests_file`]), both are read **once per run**, before any
//! host is reached: a method that is not in the set, a streaming method, a JSON field the
//! message does not have or a message too large for one call stops the run before any server
//! starts, saying which.
//!
//! JSON is proto3's JSON mapping (prost-reflect, the crate protox is built on; unknown fields
//! refused), and needs the descriptor set. A binary message is sent as it is; with a
//! descriptor set it is first decoded as the method's input type, and refused when it does not
//! decode or carries fields the type does not have. The first byte that is not white space
//! tells them apart: `{` is JSON (as a binary message, it would start with field 15 as a
//! group, which proto3 has no way to write).

use std::collections::BTreeMap;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use quietbench_vocab::grpc::{
    GRPC, GRPC_DESCRIPTOR, GRPC_MESSAGE, GRPC_REQUEST, MAX_GRPC_MESSAGE_BYTES, split_method, to_hex,
};

use super::requests_file::{Unread, read_bounded};
use crate::schedule::VariantSpec;

/// The largest descriptor set read: far above any service's (the whole of googleapis is
/// about 5 MB).
const MAX_DESCRIPTOR_BYTES: u64 = 64 << 20;
/// The largest request file read: a JSON message's text may be larger than its encoding.
const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// Encodes the request of every `http` variant that calls a gRPC method and puts it in the
/// variant's parameters, which the trials send. Called once per run on the trials' copy.
pub fn read_for_run(variants: &mut [VariantSpec]) -> anyhow::Result<()> {
    for variant in variants.iter_mut().filter(|v| v.probe == "http") {
        prepare(&mut variant.params).map_err(|why| {
            if variant.name == variant.probe {
                anyhow::anyhow!("http: {why}")
            } else {
                anyhow::anyhow!("variant {} (http): {why}", variant.name)
            }
        })?;
    }
    Ok(())
}

fn prepare(params: &mut BTreeMap<String, String>) -> Result<(), String> {
    if params.contains_key(GRPC_MESSAGE) {
        return Err(format!(
            "{GRPC_MESSAGE}= is not yours to set: give {GRPC_REQUEST}=FILE, and quietbench \
             encodes the message and sends it"
        ));
    }
    let Some(method) = params.get(GRPC).cloned() else {
        // The probe refuses grpc_request= and grpc_descriptor= without grpc= (as on an agent).
        return Ok(());
    };
    let (service, method_name) =
        split_method(method.trim()).map_err(|why| format!("grpc={why}"))?;
    let descriptor = match params.get(GRPC_DESCRIPTOR) {
        Some(path) => Some(
            read_file(path, MAX_DESCRIPTOR_BYTES)
                .and_then(|bytes| input_type(&bytes, service, method_name))
                .map_err(|why| format!("{GRPC_DESCRIPTOR}={path}: {why}"))?,
        ),
        None => None,
    };
    let Some(path) = params.get(GRPC_REQUEST).cloned() else {
        return Err(format!(
            "grpc={method} needs the request to send: {GRPC_REQUEST}=FILE (JSON, with \
             {GRPC_DESCRIPTOR}=FILE, or binary protobuf)"
        ));
    };
    let message = read_file(&path, MAX_REQUEST_BYTES)
        .and_then(|bytes| encode(&bytes, descriptor.as_ref()))
        .map_err(|why| format!("{GRPC_REQUEST}={path}: {why}"))?;
    if message.len() > MAX_GRPC_MESSAGE_BYTES {
        return Err(format!(
            "{GRPC_REQUEST}={path}: the message is {} bytes encoded; a call carries at most \
             {MAX_GRPC_MESSAGE_BYTES} (one HTTP/2 DATA frame)",
            message.len()
        ));
    }
    params.insert(GRPC_MESSAGE.into(), to_hex(&message));
    Ok(())
}

/// A file on this machine, at most `max` bytes.
fn read_file(path: &str, max: u64) -> Result<Vec<u8>, String> {
    read_bounded(path, max).map_err(|why| match why {
        Unread::TooBig => format!("over {max} bytes"),
        Unread::Io(why) => why,
    })
}

/// The input type of `service`'s unary `method` in an encoded descriptor set.
fn input_type(set: &[u8], service: &str, method: &str) -> Result<MessageDescriptor, String> {
    let pool = DescriptorPool::decode(set).map_err(|e| {
        format!(
            "not a descriptor set ({e}); make one with protoc --include_imports \
             --descriptor_set_out=FILE, or buf build -o FILE"
        )
    })?;
    let Some(found) = pool.get_service_by_name(service) else {
        let mut names: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        names.sort();
        return Err(format!(
            "has no service {service}; it has: {}",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        ));
    };
    let Some(m) = found.methods().find(|m| m.name() == method) else {
        let names: Vec<String> = found.methods().map(|m| m.name().to_string()).collect();
        return Err(format!(
            "{service} has no method {method}; it has: {}",
            names.join(", ")
        ));
    };
    if m.is_client_streaming() || m.is_server_streaming() {
        return Err(format!(
            "{service}/{method} streams; quietbench times unary calls only (one request, one \
             response)"
        ));
    }
    Ok(m.input())
}

/// The message to send: JSON encoded as `input`, or binary checked against it when known.
fn encode(bytes: &[u8], input: Option<&MessageDescriptor>) -> Result<Vec<u8>, String> {
    let json = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match (json, input) {
        (true, None) => Err(format!(
            "a JSON message needs the descriptor set its type is in: give {GRPC_DESCRIPTOR}=FILE"
        )),
        (true, Some(input)) => {
            let mut reader = serde_json::Deserializer::from_slice(bytes);
            let message = DynamicMessage::deserialize(input.clone(), &mut reader)
                .and_then(|m| reader.end().map(|()| m))
                .map_err(|e| format!("not a {} in JSON: {e}", input.full_name()))?;
            Ok(message.encode_to_vec())
        }
        (false, None) => Ok(bytes.to_vec()),
        (false, Some(input)) => {
            let message = DynamicMessage::decode(input.clone(), bytes).map_err(|e| {
                format!(
                    "neither JSON (which starts with {{) nor a binary {}: {e}",
                    input.full_name()
                )
            })?;
            if let Some(field) = message.unknown_fields().next() {
                return Err(format!(
                    "a binary message with field {}, which {} does not have",
                    field.number(),
                    input.full_name()
                ));
            }
            Ok(bytes.to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quietbench_proto::v1::AGENT_FILE_DESCRIPTOR_SET;

    /// A unary method of a real descriptor set: the agent's own, which protox compiled.
    const PREPARE: &str = "quietbench.v1.AgentService/Prepare";

    fn params(dir: &tempfile::TempDir, request: Option<&[u8]>) -> BTreeMap<String, String> {
        let set = dir.path().join("agent.pb");
        std::fs::write(&set, AGENT_FILE_DESCRIPTOR_SET).unwrap();
        let mut p = BTreeMap::from([
            (GRPC.to_string(), PREPARE.to_string()),
            (GRPC_DESCRIPTOR.into(), set.display().to_string()),
        ]);
        if let Some(request) = request {
            let file = dir.path().join("request");
            std::fs::write(&file, request).unwrap();
            p.insert(GRPC_REQUEST.into(), file.display().to_string());
        }
        p
    }

    #[test]
    fn a_json_request_is_encoded_as_the_methods_input() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = params(&dir, Some(br#" {"aslrOff": true, "thpMode": "never"}"#));
        prepare(&mut p).unwrap();
        // Field 2 (aslr_off) varint 1; field 6 (thp_mode) "never".
        assert_eq!(p[GRPC_MESSAGE], to_hex(b"\x10\x01\x32\x05never"));
        // The binary form of the same message is sent as it is.
        let mut p = params(&dir, Some(b"\x10\x01\x32\x05never"));
        prepare(&mut p).unwrap();
        assert_eq!(p[GRPC_MESSAGE], to_hex(b"\x10\x01\x32\x05never"));
        // Without a descriptor set, a binary message goes unchecked; JSON cannot go.
        p.remove(GRPC_DESCRIPTOR);
        p.remove(GRPC_MESSAGE);
        prepare(&mut p).unwrap();
        let mut p = params(&dir, Some(b"{}"));
        p.remove(GRPC_DESCRIPTOR);
        let why = prepare(&mut p).unwrap_err();
        assert!(why.contains("needs the descriptor set"), "{why}");
    }

    #[test]
    fn what_cannot_be_called_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |p: &mut BTreeMap<String, String>, expected: &str| {
            let why = prepare(p).unwrap_err();
            assert!(why.contains(expected), "expected '{expected}' in: {why}");
        };
        let mut p = params(&dir, Some(br#"{"noSuchField": 1}"#));
        refused(&mut p, "not a quietbench.v1.PrepareRequest in JSON");
        let mut p = params(&dir, Some(br#"{"aslrOff": "yes"}"#));
        refused(&mut p, "PrepareRequest in JSON");
        let mut p = params(&dir, Some(b"{} trailing"));
        refused(&mut p, "in JSON");
        // Field 99, which PrepareRequest does not have; bytes that are no message.
        let mut p = params(&dir, Some(b"\x98\x06\x01"));
        refused(
            &mut p,
            "field 99, which quietbench.v1.PrepareRequest does not have",
        );
        let mut p = params(&dir, Some(b"\x12\xff"));
        refused(&mut p, "nor a binary quietbench.v1.PrepareRequest");
        let mut p = params(&dir, Some(b"{}"));
        p.insert(GRPC.into(), "quietbench.v1.AgentService/RunProbe".into());
        refused(&mut p, "streams; quietbench times unary calls only");
        p.insert(GRPC.into(), "quietbench.v1.AgentService/Nope".into());
        refused(&mut p, "has no method Nope; it has: GetHost, RunProbe");
        p.insert(GRPC.into(), "x.Y/Z".into());
        refused(
            &mut p,
            "has no service x.Y; it has: quietbench.v1.AgentService",
        );
        p.insert(GRPC.into(), "nope".into());
        refused(&mut p, "PACKAGE.SERVICE/METHOD");
        let mut p = params(&dir, None);
        refused(&mut p, "needs the request to send: grpc_request=FILE");
        let mut p = params(&dir, Some(b"{}"));
        p.insert(GRPC_MESSAGE.into(), "00".into());
        refused(&mut p, "grpc_message= is not yours to set");
        let mut p = params(&dir, Some(b"{}"));
        p.insert(GRPC_DESCRIPTOR.into(), p[GRPC_REQUEST].clone());
        refused(&mut p, "not a descriptor set");
        p.insert(GRPC_DESCRIPTOR.into(), "/no/such/file".into());
        refused(&mut p, "grpc_descriptor=/no/such/file: cannot read it");
        // A message larger than one call carries.
        let big = format!(r#"{{"thpMode": "{}"}}"#, "x".repeat(MAX_GRPC_MESSAGE_BYTES));
        let mut p = params(&dir, Some(big.as_bytes()));
        refused(&mut p, "a call carries at most 16379");
    }

    #[test]
    fn variants_without_grpc_are_left_as_they_are() {
        let mut variants = vec![VariantSpec {
            name: "a".into(),
            probe: "http".into(),
            params: BTreeMap::from([("path".into(), "/x".into())]),
        }];
        read_for_run(&mut variants).unwrap();
        assert_eq!(variants[0].params.len(), 1);
        variants[0].params.insert(GRPC.into(), "a.B/C".into());
        let why = read_for_run(&mut variants).unwrap_err().to_string();
        assert!(
            why.starts_with("variant a (http): grpc=a.B/C needs"),
            "{why}"
        );
    }
}
