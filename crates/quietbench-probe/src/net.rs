//! Network probes between two agents: net.throughput (TCP flows, iperf3's measure) and net.rr
//! (request/response round trips, netperf TCP_RR and sockperf's). The probe threads are the
//! clients; the other agent runs a [`PeerServer`] (its StartPeer RPC), and the controller
//! passes its address in the `peer` and `peer_udp` parameters.
//!
//! Both ends are placed: the probe threads go one per RSS CPU (network placement), and the
//! server pins its connection threads to the CPUs its agent gives it. Reaching a NIC's limit
//! takes that (CONTEXT.md §4: ~95 Gbit/s with pinned, paced flows against ~28 for one
//! unplaced process).
//!
//! The wire protocol is ours, not iperf3's: a 24-byte header per connection says what the
//! server does (see `wire.rs`), so one port serves every mode and the server never guesses.

pub(crate) mod rr;
mod server;
pub(crate) mod sys;
#[cfg(test)]
mod tests;
pub(crate) mod throughput;
pub mod wire;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

pub use rr::{Protocol, RrConfig, RrWorkload};
pub use server::{MAX_CONNECTIONS, PeerServer};
pub use throughput::{Direction, FlowConfig, ThroughputWorkload};
pub use wire::Secret;

use crate::placement::WorkKind;
use crate::spec::{IntParam, resolve_integers};
use crate::{ParamError, ProbeSpec, RateBasis};

/// The controller fills this in for every network probe; net.throughput ignores it.
const PEER_UDP: IntParam = IntParam {
    name: "peer_udp",
    default: 0,
    min: 0,
    max: 65_535,
    meaning: "the peer server's UDP port (set by the controller)",
};

/// net.throughput's integer parameters.
const THROUGHPUT_PARAMS: &[IntParam] = &[
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: 256,
        meaning: "TCP flows, one per probe thread (two with mode=bidir), each on its own RSS CPU",
    },
    IntParam {
        name: "buffer_kib",
        default: 0,
        min: 0,
        max: 262_144,
        meaning: "SO_SNDBUF/SO_RCVBUF of both ends, KiB; 0 leaves them to the kernel's autotuning, as \
         iperf3 does, which grows each up to the maximum of net.ipv4.tcp_wmem/tcp_rmem; a \
         fixed size turns autotuning off",
    },
    IntParam {
        name: "write_kib",
        default: 128,
        min: 1,
        max: 1024,
        meaning: "bytes per write (and read) system call, KiB, as iperf3's --length",
    },
    IntParam {
        name: "pacing_mbit",
        default: 0,
        min: 0,
        max: 1_000_000,
        meaning: "SO_MAX_PACING_RATE of each sending socket, Mbit/s (iperf3 --fq-rate); 0: no pacing",
    },
    IntParam {
        name: "flows_per_thread",
        default: 1,
        min: 1,
        max: 64,
        meaning: "TCP flows each probe thread drives in turn (mode=send), as iperf3 drives all its \
         streams from one thread: for machines with fewer CPUs than flows",
    },
    PEER_UDP,
];

/// net.rr's integer parameters.
const RR_PARAMS: &[IntParam] = &[
    IntParam {
        name: "threads",
        default: 1,
        min: 1,
        max: 256,
        meaning: "connections, one per probe thread, each on its own RSS CPU",
    },
    IntParam {
        name: "request_bytes",
        default: 1,
        min: 1,
        max: wire::MAX_MESSAGE as u64,
        meaning: "bytes per request (protocol=udp: at least 32, default 32: a header and the trial's secret)",
    },
    IntParam {
        name: "response_bytes",
        default: 1,
        min: 1,
        max: wire::MAX_MESSAGE as u64,
        meaning: "bytes per response (protocol=udp: at least 16, default 16)",
    },
    IntParam {
        name: "rate",
        default: 0,
        min: 0,
        max: 10_000_000,
        meaning: "requests per second per thread, sent on schedule and timed from when each was due; \
         0: closed loop, the next request when the response is in",
    },
    PEER_UDP,
];

/// A text parameter: name, default (None: required), meaning.
type TextParam = (&'static str, Option<&'static str>, &'static str);

const PEER: TextParam = (
    "peer",
    None,
    "HOST:PORT of the peer agent's server, TCP port (set by the controller when it pairs two agents)",
);

const PEER_SECRET: TextParam = (
    "peer_secret",
    None,
    "the trial's secret, 32 hex digits, that the peer server requires of every connection (set by \
     the controller with the peer)",
);

const THROUGHPUT_TEXT: &[TextParam] = &[
    PEER,
    PEER_SECRET,
    (
        "mode",
        Some("send"),
        "send (this host sends), reverse (the peer sends, iperf3 -R) or bidir (both at once, \
         two sockets per thread)",
    ),
];

const RR_TEXT: &[TextParam] = &[PEER, PEER_SECRET, ("protocol", Some("tcp"), "tcp or udp")];

fn tables(probe: &str) -> Option<(&'static [IntParam], &'static [TextParam])> {
    match probe {
        "net.throughput" => Some((THROUGHPUT_PARAMS, THROUGHPUT_TEXT)),
        "net.rr" => Some((RR_PARAMS, RR_TEXT)),
        _ => None,
    }
}

/// Resolves this module's probes.
pub fn resolve(
    probe: &'static str,
    params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    let (ints, texts) = tables(probe).ok_or_else(|| ParamError::UnknownProbe(probe.into()))?;
    let is_text = |key: &str| texts.iter().any(|(n, ..)| *n == key);
    if let Some(key) = params
        .keys()
        .find(|k| !is_text(k) && !ints.iter().any(|p| *k == p.name))
    {
        let known: Vec<&str> = texts
            .iter()
            .map(|(n, ..)| *n)
            .chain(ints.iter().map(|p| p.name))
            .collect();
        return Err(ParamError::UnknownParam {
            probe,
            key: key.clone(),
            known: known.join(", "),
        });
    }
    let int_params: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| !is_text(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut values = resolve_integers(probe, ints, &int_params)?;
    let mut text = BTreeMap::new();
    for &(name, default, _) in texts {
        let value = match (params.get(name), default) {
            (Some(v), _) => v.trim().to_string(),
            (None, Some(d)) => d.to_string(),
            (None, None) => String::new(),
        };
        text.insert(name, value);
    }
    let peer = parse_peer(probe, &text["peer"])?;
    let secret =
        wire::Secret::from_hex(&text["peer_secret"]).map_err(|why| ParamError::BadValue {
            probe,
            key: "peer_secret".into(),
            value: String::new(), // never echoed
            why: format!("{why}; the controller sets it when it pairs two agents"),
        })?;
    let bad = |key: &str, why: &str| ParamError::BadValue {
        probe,
        key: key.to_string(),
        value: params.get(key).cloned().unwrap_or_default(),
        why: why.to_string(),
    };
    let threads = values["threads"] as usize;
    let mut resolved = crate::spec::as_text(&values);
    // The secret is not reported: reports and the store keep resolved parameters.
    resolved.extend(
        text.iter()
            .filter(|(k, _)| **k != "peer_secret")
            .map(|(k, v)| (k.to_string(), v.clone())),
    );

    if probe == "net.throughput" {
        let direction = match text["mode"].as_str() {
            "send" => Direction::Send,
            "reverse" => Direction::Reverse,
            "bidir" => Direction::Bidir,
            _ => return Err(bad("mode", "expected send, reverse or bidir")),
        };
        let flows_per_thread = values["flows_per_thread"] as u32;
        if flows_per_thread > 1 && direction != Direction::Send {
            return Err(bad(
                "flows_per_thread",
                "several flows per thread are for mode=send; use threads= for the others",
            ));
        }
        let config = FlowConfig {
            peer,
            direction,
            buffer_bytes: (values["buffer_kib"] * 1024) as u32,
            write_bytes: (values["write_kib"] * 1024) as u32,
            pacing_mbit: values["pacing_mbit"] as u32,
            flows_per_thread,
            secret,
        };
        return Ok(ProbeSpec {
            name: probe,
            threads,
            resolved_params: resolved,
            metric_sets: direction.metric_sets(),
            // Directions of a bidir flow run at the same time: each over the elapsed time.
            basis: RateBasis::Elapsed,
            work: WorkKind::Network,
            factory: Arc::new(move |_| Ok(Box::new(ThroughputWorkload::new(config)?))),
        });
    }

    let protocol = match text["protocol"].as_str() {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        _ => return Err(bad("protocol", "expected tcp or udp")),
    };
    let mut server = peer;
    if protocol == Protocol::Udp {
        let port = values["peer_udp"] as u16;
        if port == 0 {
            return Err(bad(
                "peer_udp",
                "protocol=udp needs the peer server's UDP port (the controller sets it)",
            ));
        }
        server.set_port(port);
        // A UDP request carries a 32-byte header (magic, sequence, response size, the trial's
        // secret); a response, 16 (magic and sequence echoed).
        for (key, min) in [
            ("request_bytes", wire::UDP_MIN),
            ("response_bytes", wire::UDP_RESPONSE_MIN),
        ] {
            if !params.contains_key(key) {
                values.insert(key, u64::from(min));
                resolved.insert(key.to_string(), min.to_string());
            }
            if !(u64::from(min)..=u64::from(wire::UDP_MAX)).contains(&values[key]) {
                return Err(bad(
                    key,
                    &format!("protocol=udp needs {min}..={}", wire::UDP_MAX),
                ));
            }
        }
    }
    let config = RrConfig {
        peer: server,
        protocol,
        request_bytes: values["request_bytes"] as u32,
        response_bytes: values["response_bytes"] as u32,
        rate: values["rate"],
        secret,
    };
    Ok(ProbeSpec {
        name: probe,
        threads,
        resolved_params: resolved,
        metric_sets: rr::METRIC_SETS,
        basis: RateBasis::Elapsed,
        work: WorkKind::Network,
        factory: Arc::new(move |_| Ok(Box::new(RrWorkload::new(config)?))),
    })
}

/// The peer server's address: an IP address and port, or a name that resolves to one.
fn parse_peer(probe: &'static str, text: &str) -> Result<SocketAddr, ParamError> {
    let bad = |why: String| ParamError::BadValue {
        probe,
        key: "peer".into(),
        value: text.to_string(),
        why,
    };
    if text.is_empty() {
        return Err(bad(
            "required: HOST:PORT of the peer agent's server; the controller sets it when \
             given --peer (run --local starts a peer agent)"
                .into(),
        ));
    }
    let addr = match text.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => text
            .to_socket_addrs()
            .map_err(|e| bad(format!("expected HOST:PORT: {e}")))?
            .next()
            .ok_or_else(|| bad("the name resolves to no address".into()))?,
    };
    if addr.port() == 0 {
        return Err(bad("the port must not be 0".into()));
    }
    Ok(addr)
}
