//! net.rr's client: request/response round trips over TCP (netperf TCP_RR) or UDP (sockperf
//! ping-pong, netperf UDP_RR), in a closed loop (the next request when the response is in) or
//! an open loop at a constant rate.
//!
//! In the open loop, request k is due at `start + k / rate` whatever happened to request k-1,
//! and its latency runs from that intended time, not from when it was actually sent: a slow
//! response delays the requests behind it, and that delay is part of what a client at that
//! rate would see. Measuring from the actual send would hide it (coordinated omission; the
//! correction wrk2 makes). Requests sent late are counted.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use quietbench_vocab::metrics;

use super::sys;
use super::throughput::{STALL, connect};
use super::wire::{self, Header, Mode, Secret};
use crate::{Counter, Merge, MetricSet, Samples, Step, Workload};

/// The metric set of every round trip.
pub const METRIC_SETS: &[MetricSet] = &[MetricSet {
    rate_metric: metrics::ROUND_TRIPS_PER_SEC,
    rate_unit: "round trips/s",
    latency_metric: metrics::ROUND_TRIP_LATENCY,
    latency_unit: "ns",
    throughput: None,
}];

/// A UDP response not back within this time is counted lost.
pub const UDP_TIMEOUT: Duration = Duration::from_millis(200);
/// An open-loop request sent this long after its intended time is counted late.
pub const LATE: Duration = Duration::from_micros(10);
/// Waits longer than this sleep; shorter ones spin (sleep wakes tens of microseconds late).
const SPIN_BELOW: Duration = Duration::from_micros(200);
/// A step sleeps at most this long, so the harness sees the trial's end promptly.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// One TCP connection per thread, TCP_NODELAY.
    Tcp,
    /// One connected UDP socket per thread; requests carry a sequence number.
    Udp,
}

/// One thread's round-trip settings, checked by `resolve`.
#[derive(Debug, Clone, Copy)]
pub struct RrConfig {
    /// The peer server's address (its TCP or UDP port, per `protocol`).
    pub peer: SocketAddr,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Bytes per request.
    pub request_bytes: u32,
    /// Bytes per response.
    pub response_bytes: u32,
    /// Requests per second in an open loop; 0: closed loop.
    pub rate: u64,
    /// The trial's secret, in the TCP header or every UDP request.
    pub secret: Secret,
}

enum Conn {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// The net.rr workload of one probe thread.
pub struct RrWorkload {
    config: RrConfig,
    conn: Conn,
    request: Vec<u8>,
    response: Vec<u8>,
    seq: u32,
    /// Open loop: when request 0 was due, and the index of the next.
    start: Option<Instant>,
    next: u64,
    late: u64,
    lost: u64,
    error: Option<String>,
    counters: Vec<Counter>,
}

/// When request `k` is due, after the first, at `rate` per second.
pub fn intended_offset(k: u64, rate: u64) -> Duration {
    let ns = u128::from(k) * 1_000_000_000 / u128::from(rate.max(1));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// What a round trip came to.
enum Trip {
    Done,
    /// UDP: no response in time.
    Lost,
}

impl RrWorkload {
    /// Connects. Runs on the pinned probe thread, before measuring.
    pub fn new(config: RrConfig) -> Result<Self, String> {
        let peer = config.peer;
        let conn = match config.protocol {
            Protocol::Tcp => {
                let stream = connect(
                    peer,
                    &Header {
                        mode: Mode::Echo,
                        request_bytes: config.request_bytes,
                        response_bytes: config.response_bytes,
                        buffer_bytes: 0,
                        pacing_mbit: 0,
                        secret: config.secret,
                    },
                )?;
                stream
                    .set_nodelay(true)
                    .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
                Conn::Tcp(stream)
            }
            Protocol::Udp => {
                let any: SocketAddr = if peer.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    ([0u16; 8], 0).into()
                };
                let setup = || -> io::Result<UdpSocket> {
                    let socket = UdpSocket::bind(any)?;
                    socket.connect(peer)?;
                    socket.set_read_timeout(Some(UDP_TIMEOUT))?;
                    socket.set_write_timeout(Some(STALL))?;
                    Ok(socket)
                };
                Conn::Udp(setup().map_err(|e| format!("cannot open a UDP socket to {peer}: {e}"))?)
            }
        };
        let mut request = vec![0u8; config.request_bytes as usize];
        if config.protocol == Protocol::Udp {
            wire::encode_udp_request(&mut request, 0, config.response_bytes, &config.secret);
        }
        Ok(Self {
            config,
            conn,
            request,
            // One spare byte: a longer UDP datagram than asked for shows as too long.
            response: vec![0u8; config.response_bytes as usize + 1],
            seq: 0,
            start: None,
            next: 0,
            late: 0,
            lost: 0,
            error: None,
            counters: Vec::new(),
        })
    }

    fn round_trip(&mut self) -> Result<Trip, String> {
        let peer = self.config.peer;
        let response_len = self.config.response_bytes as usize;
        match &mut self.conn {
            Conn::Tcp(stream) => {
                write_all(stream, &self.request)
                    .map_err(|e| format!("sending a request to {peer} failed: {e}"))?;
                read_exact(stream, &mut self.response[..response_len])
                    .map_err(|e| format!("reading a response from {peer} failed: {e}"))?;
                Ok(Trip::Done)
            }
            Conn::Udp(socket) => {
                self.seq = self.seq.wrapping_add(1);
                self.request[4..8].copy_from_slice(&self.seq.to_le_bytes());
                socket
                    .send(&self.request)
                    .map_err(|e| format!("sending a UDP request to {peer} failed: {e}"))?;
                loop {
                    match socket.recv(&mut self.response) {
                        // A response to an earlier, timed-out request: not this one's.
                        Ok(n) if wire::udp_response_seq(&self.response[..n]) != Some(self.seq) => {}
                        Ok(n) if n == response_len => return Ok(Trip::Done),
                        Ok(n) => {
                            return Err(format!(
                                "the peer {peer} answered {n} bytes, not {response_len}"
                            ));
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) =>
                        {
                            self.lost += 1;
                            return Ok(Trip::Lost);
                        }
                        Err(e) => {
                            return Err(format!(
                                "receiving a UDP response from {peer} failed: {e}"
                            ));
                        }
                    }
                }
            }
        }
    }

    fn closed_loop(&mut self) -> Step {
        match self.round_trip() {
            Ok(Trip::Done) => Step::Timed {
                metric_set: 0,
                bytes: self.bytes_per_trip(),
            },
            Ok(Trip::Lost) => Step::Recorded,
            Err(message) => self.fail(message),
        }
    }

    fn open_loop(&mut self, samples: &mut Samples<'_>) -> Step {
        let start = *self.start.get_or_insert_with(Instant::now);
        let intended = start + intended_offset(self.next, self.config.rate);
        loop {
            let now = Instant::now();
            let Some(wait) = intended.checked_duration_since(now) else {
                break;
            };
            if wait.is_zero() {
                break;
            }
            if wait > MAX_SLEEP {
                // Back to the harness, which ends the trial when its time is up.
                std::thread::sleep(MAX_SLEEP);
                return Step::Recorded;
            }
            if wait > SPIN_BELOW {
                std::thread::sleep(wait - SPIN_BELOW);
            } else {
                std::hint::spin_loop();
            }
        }
        let sent = Instant::now();
        if sent.saturating_duration_since(intended) > LATE {
            self.late += 1;
        }
        self.next += 1;
        match self.round_trip() {
            Ok(Trip::Done) => {
                let ns = Instant::now()
                    .saturating_duration_since(intended)
                    .as_nanos();
                samples.record(
                    0,
                    u64::try_from(ns).unwrap_or(u64::MAX),
                    self.bytes_per_trip(),
                );
                Step::Recorded
            }
            Ok(Trip::Lost) => Step::Recorded,
            Err(message) => self.fail(message),
        }
    }

    fn bytes_per_trip(&self) -> u64 {
        u64::from(self.config.request_bytes) + u64::from(self.config.response_bytes)
    }

    fn fail(&mut self, message: String) -> Step {
        self.error = Some(message);
        Step::Failed
    }
}

fn write_all(stream: &mut TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_exact(stream: &mut TcpStream, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.read(buf) {
            Ok(0) => return Err(io::Error::other("the peer closed the connection")),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::other(format!("no response for {STALL:?}")));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Workload for RrWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        METRIC_SETS
    }

    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        if self.config.rate == 0 {
            self.closed_loop()
        } else {
            self.open_loop(samples)
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        let mut counters = Vec::new();
        if let Conn::Tcp(stream) = &self.conn
            && let Ok(stats) = sys::tcp_stats(stream)
        {
            counters.extend(super::throughput::flow_counters(&[stats], None));
        }
        if self.config.protocol == Protocol::Udp {
            counters.push(Counter {
                name: metrics::UDP_LOST,
                unit: "datagrams",
                value: self.lost as f64,
                merge: Merge::Sum,
            });
        }
        if self.config.rate > 0 {
            counters.push(Counter {
                name: metrics::LATE_SENDS,
                unit: "requests",
                value: self.late as f64,
                merge: Merge::Sum,
            });
        }
        self.counters = counters;
    }

    fn counters(&mut self) -> Vec<Counter> {
        std::mem::take(&mut self.counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_due_at_even_intervals_without_drift() {
        assert_eq!(intended_offset(0, 1000), Duration::ZERO);
        assert_eq!(intended_offset(1, 1000), Duration::from_millis(1));
        assert_eq!(intended_offset(3, 3), Duration::from_secs(1));
        // k / rate computed exactly each time, not accumulated: no rounding drift.
        assert_eq!(
            intended_offset(3_000_000_000, 3),
            Duration::from_secs(1_000_000_000)
        );
        assert_eq!(intended_offset(1, 0), Duration::from_secs(1));
    }
}
