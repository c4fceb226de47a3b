//! net.throughput's client: one TCP flow per probe thread (two with mode=bidir), one system
//! call per step, as iperf3 does, so the harness's per-thread intervals are per-flow Gbit/s.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use nix::libc;
use quietbench_vocab::metrics;

use super::sys::{self, TcpStats};
use super::wire::{Header, Mode, Secret, Tail, Trailer};
use crate::{Counter, Merge, MetricSet, Samples, Step, Throughput, Workload};

/// A flow that moves nothing for this long fails the trial rather than hanging it.
pub const STALL: Duration = Duration::from_secs(5);
/// Connecting to the peer may take this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Draining a reverse flow at the end (to read the server's trailer) may take this long.
const DRAIN_DEADLINE: Duration = Duration::from_secs(3);

const GBIT: Throughput = Throughput {
    metric: metrics::GBIT_PER_SEC,
    unit: "Gbit/s",
    bytes_per_unit: 1.25e8,
};

/// mode=send: the probe thread writes.
pub const SEND: &[MetricSet] = &[MetricSet {
    rate_metric: metrics::WRITES_PER_SEC,
    rate_unit: "writes/s",
    latency_metric: metrics::WRITE_LATENCY,
    latency_unit: "ns",
    throughput: Some(GBIT),
}];

/// mode=reverse: the probe thread reads what the peer sends.
pub const REVERSE: &[MetricSet] = &[MetricSet {
    rate_metric: metrics::READS_PER_SEC,
    rate_unit: "reads/s",
    latency_metric: metrics::READ_LATENCY,
    latency_unit: "ns",
    throughput: Some(GBIT),
}];

/// mode=bidir: writes on one socket, reads on another, both directions at once.
pub const BIDIR: &[MetricSet] = &[
    MetricSet {
        rate_metric: metrics::WRITES_PER_SEC,
        rate_unit: "writes/s",
        latency_metric: metrics::WRITE_LATENCY,
        latency_unit: "ns",
        throughput: Some(Throughput {
            metric: metrics::GBIT_PER_SEC_TX,
            ..GBIT
        }),
    },
    MetricSet {
        rate_metric: metrics::READS_PER_SEC,
        rate_unit: "reads/s",
        latency_metric: metrics::READ_LATENCY,
        latency_unit: "ns",
        throughput: Some(Throughput {
            metric: metrics::GBIT_PER_SEC_RX,
            ..GBIT
        }),
    },
];

/// Which way the bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// This host sends (iperf3's default).
    Send,
    /// The peer sends (iperf3 -R).
    Reverse,
    /// Both at once, on two sockets (iperf3 --bidir).
    Bidir,
}

impl Direction {
    /// The metric sets of the direction's samples.
    pub fn metric_sets(self) -> &'static [MetricSet] {
        match self {
            Direction::Send => SEND,
            Direction::Reverse => REVERSE,
            Direction::Bidir => BIDIR,
        }
    }
}

/// One thread's flow settings, checked by `resolve`.
#[derive(Debug, Clone, Copy)]
pub struct FlowConfig {
    /// The peer server's TCP address.
    pub peer: SocketAddr,
    /// Which way.
    pub direction: Direction,
    /// SO_SNDBUF/SO_RCVBUF, both ends; 0: the kernel's autotuning.
    pub buffer_bytes: u32,
    /// Bytes per write (and per read) system call.
    pub write_bytes: u32,
    /// SO_MAX_PACING_RATE of each sending socket, Mbit/s; 0: none.
    pub pacing_mbit: u32,
    /// Flows this thread drives in turn (mode=send only; 1 for the others).
    pub flows_per_thread: u32,
    /// The trial's secret, sent in every connection's header.
    pub secret: Secret,
}

/// The net.throughput workload of one probe thread.
pub struct ThroughputWorkload {
    config: FlowConfig,
    /// The sending flows: none (mode=reverse), one, or with flows_per_thread > 1 several, all
    /// then non-blocking and written in turn, waiting in poll only when none can take more.
    tx: Vec<TcpStream>,
    rx: Option<TcpStream>,
    /// With several sending flows, one entry per flow, built once: polling allocates nothing.
    poll_fds: Vec<libc::pollfd>,
    /// The flow to try first in the next step.
    next_flow: usize,
    write_buf: Vec<u8>,
    read_buf: Vec<u8>,
    /// Bidir: which socket to try first in the next step (alternates, so neither starves).
    rx_first: bool,
    fq: Option<bool>,
    error: Option<String>,
    counters: Vec<Counter>,
}

/// A buffer of bytes that are not all zero: a zeroed allocation maps every page to the one
/// shared zero page, and copying from it would measure a cache-resident source.
pub fn filled_buffer(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Connects to the peer server, sets the socket up and sends the header.
pub fn connect(peer: SocketAddr, header: &Header) -> Result<TcpStream, String> {
    let stream = TcpStream::connect_timeout(&peer, CONNECT_TIMEOUT)
        .map_err(|e| format!("cannot connect to the peer server at {peer}: {e}"))?;
    let setup = || -> io::Result<()> {
        stream.set_read_timeout(Some(STALL))?;
        stream.set_write_timeout(Some(STALL))?;
        (&stream).write_all(&header.encode())
    };
    setup().map_err(|e| format!("cannot set up the connection to {peer}: {e}"))?;
    Ok(stream)
}

impl ThroughputWorkload {
    /// Opens this thread's flow(s). Runs on the pinned probe thread, before measuring.
    pub fn new(config: FlowConfig) -> Result<Self, String> {
        let header = |mode| Header {
            mode,
            request_bytes: if mode == Mode::Sink {
                config.write_bytes
            } else {
                0
            },
            response_bytes: if mode == Mode::Source {
                config.write_bytes
            } else {
                0
            },
            buffer_bytes: config.buffer_bytes,
            pacing_mbit: if mode == Mode::Source {
                config.pacing_mbit
            } else {
                0
            },
            secret: config.secret,
        };
        let peer = config.peer;
        let sockopt_error = |e: io::Error| format!("cannot set socket options for {peer}: {e}");
        let (sends, receives) = match config.direction {
            Direction::Send => (true, false),
            Direction::Reverse => (false, true),
            Direction::Bidir => (true, true),
        };
        let mut fq = None;
        let open_sender = |fq: &mut Option<bool>| -> Result<TcpStream, String> {
            let tx = connect(peer, &header(Mode::Sink))?;
            if config.buffer_bytes > 0 {
                sys::set_buffer(&tx, true, config.buffer_bytes).map_err(sockopt_error)?;
            }
            if config.pacing_mbit > 0 {
                sys::set_pacing(&tx, config.pacing_mbit).map_err(sockopt_error)?;
                let local = tx.local_addr().map_err(sockopt_error)?;
                *fq = sys::fq_paces(local.ip(), peer.ip());
            }
            Ok(tx)
        };
        // flows_per_thread is 1 unless mode=send (resolve refuses more for the others).
        let flows = if sends { config.flows_per_thread } else { 0 };
        let tx = (0..flows)
            .map(|_| open_sender(&mut fq))
            .collect::<Result<Vec<_>, _>>()?;
        let mut poll_fds = Vec::new();
        if tx.len() > 1 {
            for s in &tx {
                s.set_nonblocking(true).map_err(sockopt_error)?;
                poll_fds.push(libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                });
            }
        }
        let rx = if receives {
            let rx = connect(peer, &header(Mode::Source))?;
            if config.buffer_bytes > 0 {
                sys::set_buffer(&rx, false, config.buffer_bytes).map_err(sockopt_error)?;
            }
            sys::set_rcvlowat(&rx, config.write_bytes as usize).map_err(sockopt_error)?;
            Some(rx)
        } else {
            None
        };
        if config.direction == Direction::Bidir {
            for s in tx.iter().chain(&rx) {
                s.set_nonblocking(true).map_err(sockopt_error)?;
            }
        }
        let len = config.write_bytes as usize;
        Ok(Self {
            config,
            tx,
            rx,
            poll_fds,
            next_flow: 0,
            write_buf: if sends {
                filled_buffer(len)
            } else {
                Vec::new()
            },
            read_buf: if receives { vec![0; len] } else { Vec::new() },
            rx_first: false,
            fq,
            error: None,
            counters: Vec::new(),
        })
    }

    fn fail(&mut self, message: String) -> Step {
        self.error = Some(message);
        Step::Failed
    }

    /// One blocking write (mode=send) or read (mode=reverse).
    fn blocking_step(&mut self, receive: bool) -> Step {
        let result = match (receive, self.tx.first(), &self.rx) {
            (false, Some(tx), _) => (&*tx).write(&self.write_buf),
            (true, _, Some(rx)) => (&*rx).read(&mut self.read_buf),
            _ => return self.fail("the flow is closed".into()),
        };
        match result {
            Ok(0) if receive => self.fail(format!(
                "the peer {} closed the connection",
                self.config.peer
            )),
            Ok(n) => Step::Timed {
                metric_set: 0,
                bytes: n as u64,
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Recorded,
            Err(e) => self.io_failure(receive, &e),
        }
    }

    fn io_failure(&mut self, receive: bool, e: &io::Error) -> Step {
        let peer = self.config.peer;
        let what = if receive {
            "receiving from"
        } else {
            "sending to"
        };
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            self.fail(format!(
                "{what} the peer {peer}: nothing moved for {STALL:?}"
            ))
        } else {
            self.fail(format!("{what} the peer {peer} failed: {e}"))
        }
    }

    /// mode=send with several flows: one non-blocking write to the first flow, from the one
    /// after the last written, that takes bytes; waits in poll only when none does.
    fn multi_send_step(&mut self) -> Step {
        let flows = self.tx.len();
        for k in 0..flows {
            let i = (self.next_flow + k) % flows;
            match (&self.tx[i]).write(&self.write_buf) {
                Ok(n) => {
                    self.next_flow = (i + 1) % flows;
                    return Step::Timed {
                        metric_set: 0,
                        bytes: n as u64,
                    };
                }
                Err(e) if not_now(&e) => {}
                Err(e) => return self.io_failure(false, &e),
            }
        }
        match sys::poll_all(&mut self.poll_fds, STALL) {
            Ok(false) => self.fail(format!(
                "sending to the peer {}: no flow took bytes for {STALL:?}",
                self.config.peer
            )),
            Ok(true) => Step::Recorded,
            Err(e) => self.fail(format!("poll failed: {e}")),
        }
    }

    /// mode=bidir: one non-blocking write or read, whichever socket is ready, alternating
    /// which is tried first; waits in poll only when neither is.
    fn bidir_step(&mut self) -> Step {
        let (Some(tx), Some(rx)) = (self.tx.first(), &self.rx) else {
            return self.fail("the flow is closed".into());
        };
        self.rx_first = !self.rx_first;
        for receive in [self.rx_first, !self.rx_first] {
            let result = if receive {
                (&*rx).read(&mut self.read_buf)
            } else {
                (&*tx).write(&self.write_buf)
            };
            match result {
                Ok(0) if receive => {
                    return self.fail(format!(
                        "the peer {} closed the connection",
                        self.config.peer
                    ));
                }
                Ok(n) => {
                    return Step::Timed {
                        metric_set: usize::from(receive),
                        bytes: n as u64,
                    };
                }
                Err(e) if not_now(&e) => {}
                Err(e) => return self.io_failure(receive, &e),
            }
        }
        let fds = [
            (tx.as_raw_fd(), libc::POLLOUT),
            (rx.as_raw_fd(), libc::POLLIN),
        ];
        match sys::poll2(fds, STALL) {
            Ok([false, false]) => self.fail(format!(
                "with the peer {}: nothing moved either way for {STALL:?}",
                self.config.peer
            )),
            Ok(_) => Step::Recorded,
            Err(e) => self.fail(format!("poll failed: {e}")),
        }
    }
}

/// A non-blocking socket's "not now": full (or empty), or interrupted by a signal.
fn not_now(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Half-closes a receiving flow and reads to its end, keeping the last bytes: the server's
/// trailer with its sending socket's TCP_INFO.
fn drain_for_trailer(rx: &mut TcpStream, buf: &mut [u8]) -> Option<Trailer> {
    rx.set_nonblocking(false).ok()?;
    rx.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    // The trailer is a few bytes: a read must not wait for a whole write's worth.
    sys::set_rcvlowat(&*rx, 1).ok()?;
    rx.shutdown(Shutdown::Write).ok()?;
    let deadline = Instant::now() + DRAIN_DEADLINE;
    let mut tail = Tail::default();
    while Instant::now() < deadline {
        match rx.read(buf) {
            Ok(0) => return Trailer::decode(tail.bytes()),
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
    None
}

/// The flow's whole-trial counters from what each sender's TCP_INFO said. Absent, not zero,
/// when no sender could be read.
pub fn flow_counters(senders: &[TcpStats], fq: Option<bool>) -> Vec<Counter> {
    let mut counters = Vec::new();
    if !senders.is_empty() {
        counters.push(Counter {
            name: metrics::TCP_RETRANSMITS,
            unit: "segments",
            value: senders.iter().map(|s| f64::from(s.total_retrans)).sum(),
            merge: Merge::Sum,
        });
        counters.push(Counter {
            name: metrics::TCP_RTT_US,
            unit: "us",
            value: senders.iter().map(|s| f64::from(s.rtt_us)).sum::<f64>() / senders.len() as f64,
            merge: Merge::Mean,
        });
    }
    if let Some(fq) = fq {
        counters.push(Counter {
            name: metrics::FQ_QDISC,
            unit: "bool",
            value: f64::from(u8::from(fq)),
            merge: Merge::Max,
        });
    }
    counters
}

impl Workload for ThroughputWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        self.config.direction.metric_sets()
    }

    fn step(&mut self, _samples: &mut Samples<'_>) -> Step {
        match self.config.direction {
            Direction::Send if self.tx.len() > 1 => self.multi_send_step(),
            Direction::Send => self.blocking_step(false),
            Direction::Reverse => self.blocking_step(true),
            Direction::Bidir => self.bidir_step(),
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    fn finish(&mut self) {
        let mut senders = Vec::with_capacity(self.tx.len() + 1);
        for tx in self.tx.drain(..) {
            senders.extend(sys::tcp_stats(&tx).ok());
            let _ = tx.shutdown(Shutdown::Write);
        }
        if let Some(mut rx) = self.rx.take()
            && let Some(trailer) = drain_for_trailer(&mut rx, &mut self.read_buf)
        {
            senders.push(TcpStats {
                total_retrans: trailer.total_retrans,
                rtt_us: trailer.rtt_us,
            });
        }
        self.counters = flow_counters(&senders, self.fq);
    }

    fn counters(&mut self) -> Vec<Counter> {
        std::mem::take(&mut self.counters)
    }
}
