//! The peer server: the far end of net.throughput and net.rr, run by the peer agent.
//!
//! Plain threads, like the probes: an accept thread, one thread per connection pinned in turn
//! to the CPUs it was given (the NIC's RSS CPUs, so the receiving side is placed as carefully
//! as the sending side), and one UDP echo thread. A throughput connection then moves to the
//! CPU that handles its flow's packets, where that is one of those CPUs (`follow_flow_cpu`).
//! Each connection allocates its buffers once, after its header, within the protocol's bounds;
//! nothing is allocated per byte or per message. Every blocking call has a timeout or is woken by `shutdown`, so [`PeerServer::stop`]
//! returns within a fraction of a second with no thread left behind.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sys;
use super::wire::{self, HEADER_LEN, Header, Mode, Secret, Trailer};
use crate::affinity::pin_current_thread;

/// Connections served at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 512;
/// How often blocked threads look at the stop flag (their sockets' timeouts).
const POLL: Duration = Duration::from_millis(100);
/// A client must send its header within this time.
const HEADER_DEADLINE: Duration = Duration::from_secs(5);
/// A sink reads this much per call when the client gives no write size (its header's
/// `request_bytes` is 0): iperf3's default length.
const SINK_READ_DEFAULT: usize = 128 << 10;
/// A source looks for the client's half-close every this many writes.
const FIN_CHECK_EVERY: u32 = 8;

/// The server side of the network probes: TCP sink, source and echo on one port, UDP echo on
/// another. Stops, and joins every thread it started, on [`PeerServer::stop`] or drop.
pub struct PeerServer {
    tcp_port: u16,
    udp_port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    udp: Option<JoinHandle<()>>,
    /// The UDP socket, to shut down on stop (which wakes the thread blocked in recv).
    udp_waker: UdpSocket,
}

impl std::fmt::Debug for PeerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerServer")
            .field("tcp_port", &self.tcp_port)
            .field("udp_port", &self.udp_port)
            .finish_non_exhaustive()
    }
}

struct Shared {
    stop: AtomicBool,
    /// Connections accepted and given a thread, since the start.
    served: AtomicU64,
    /// Throughput connections moved to each CPU (their flow's), since the start.
    followed: Mutex<BTreeMap<u32, u64>>,
    /// Live connections: a handle to shut the socket down, and the thread to join.
    connections: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
    /// The trial's secret: connections and datagrams without it are not served.
    secret: Secret,
    /// Connections closed for a header without the secret.
    refused: AtomicU64,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

impl PeerServer {
    /// Listens on `bind` (TCP and UDP, ephemeral ports), serving only connections and datagrams
    /// that carry `secret`. Connection threads are pinned to `cpus` in turn (the UDP thread to
    /// the first); left unpinned when `cpus` is empty.
    pub fn start(bind: IpAddr, cpus: &[u32], secret: Secret) -> io::Result<PeerServer> {
        let listener = TcpListener::bind(SocketAddr::new(bind, 0))?;
        listener.set_nonblocking(true)?;
        let udp = UdpSocket::bind(SocketAddr::new(bind, 0))?;
        // No read timeout on the UDP socket: a timed wait arms and cancels a kernel timer per
        // datagram. `stop` wakes the thread with shutdown instead.
        let udp_waker = udp.try_clone()?;
        let tcp_port = listener.local_addr()?.port();
        let udp_port = udp.local_addr()?.port();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
            followed: Mutex::new(BTreeMap::new()),
            served: AtomicU64::new(0),
            secret,
            refused: AtomicU64::new(0),
        });
        let cpus: Arc<[u32]> = cpus.into();
        let udp_cpu = cpus.first().copied();
        let udp_shared = Arc::clone(&shared);
        let udp = std::thread::Builder::new()
            .name("qb-peer-udp".into())
            .spawn(move || {
                if let Some(cpu) = udp_cpu {
                    let _ = pin_current_thread(&[cpu]);
                }
                serve_udp(&udp, &udp_shared);
            })?;
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("qb-peer-accept".into())
            .spawn(move || accept_loop(&listener, &cpus, &accept_shared));
        let accept = match accept {
            Ok(handle) => handle,
            Err(err) => {
                shared.stop.store(true, Ordering::Relaxed);
                sys::shutdown(&udp_waker);
                let _ = udp.join();
                return Err(err);
            }
        };
        Ok(PeerServer {
            tcp_port,
            udp_port,
            shared,
            accept: Some(accept),
            udp: Some(udp),
            udp_waker,
        })
    }

    /// The TCP port (throughput flows and TCP round trips).
    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    /// The UDP port (UDP round trips).
    pub fn udp_port(&self) -> u16 {
        self.udp_port
    }

    /// Connections closed since the start because their header lacked the trial's secret.
    pub fn connections_refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Connections served since the start (each got a thread).
    pub fn connections_served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }

    /// How many throughput connections moved to each CPU, their flow's (see
    /// `follow_flow_cpu`), since the start. Connections left where they were are not counted.
    pub fn flows_followed(&self) -> BTreeMap<u32, u64> {
        self.shared
            .followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops serving: closes every connection and joins every thread.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // The accept thread first, so no connection is added after the list is taken.
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        // Wakes reads and writes blocked on the socket at once, rather than at their timeout.
        for (stream, _) in &connections {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for (_, handle) in connections {
            let _ = handle.join();
        }
        if let Some(udp) = self.udp.take() {
            sys::shutdown(&self.udp_waker);
            let _ = udp.join();
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn accept_loop(listener: &TcpListener, cpus: &Arc<[u32]>, shared: &Arc<Shared>) {
    let mut accepted = 0usize;
    while !shared.stopping() {
        let readable = sys::poll_readable(listener.as_raw_fd(), POLL);
        reap(shared);
        match readable {
            Ok(true) => {}
            Ok(false) => continue,
            // EBADF and the like cannot heal: stop accepting rather than spin.
            Err(_) => return,
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if transient(&err) => continue,
            // Out of descriptors or memory: back off instead of spinning on a ready listener.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let mut connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
        if connections.len() >= MAX_CONNECTIONS {
            continue; // dropping the stream closes it
        }
        let Ok(handle_copy) = stream.try_clone() else {
            continue;
        };
        let cpu = (!cpus.is_empty()).then(|| cpus[accepted % cpus.len()]);
        accepted += 1;
        let conn_shared = Arc::clone(shared);
        let allowed = Arc::clone(cpus);
        let spawned = std::thread::Builder::new()
            .name("qb-peer-conn".into())
            .spawn(move || {
                if let Some(cpu) = cpu {
                    let _ = pin_current_thread(&[cpu]);
                }
                // Any error ends this connection only. The accept thread holds a second
                // descriptor of the socket (to shut it down on stop): shut it down here, so
                // the client sees the end now rather than when that descriptor is reaped.
                let _ = serve_connection(&stream, &allowed, &conn_shared);
                let _ = stream.shutdown(Shutdown::Both);
            });
        if let Ok(handle) = spawned {
            connections.push((handle_copy, handle));
            shared.served.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Joins finished connection threads and closes their sockets' last descriptors, so the list
/// holds live connections only.
fn reap(shared: &Shared) {
    let mut connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
    let mut i = 0;
    while i < connections.len() {
        if connections[i].1.is_finished() {
            let (_, handle) = connections.swap_remove(i);
            let _ = handle.join();
        } else {
            i += 1;
        }
    }
}

/// Whether an I/O error only means "timed out, look at the stop flag and go on".
fn transient(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Fills `buf` completely. Ok(false) at end of stream or on stop; `deadline` bounds the wait.
fn read_full(
    mut stream: &TcpStream,
    buf: &mut [u8],
    shared: &Shared,
    deadline: Option<Instant>,
) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        if shared.stopping() || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

/// Writes all of `buf`. Ok(false) on stop.
fn write_full(mut stream: &TcpStream, buf: &[u8], shared: &Shared) -> io::Result<bool> {
    let mut written = 0;
    while written < buf.len() {
        if shared.stopping() {
            return Ok(false);
        }
        match stream.write(&buf[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

/// Moves a throughput connection's thread to the CPU that handles its flow's packets
/// (SO_INCOMING_CPU), when that CPU is one of `allowed` (any CPU when `allowed` is empty).
///
/// With RSS that is the CPU of the queue the flow hashes to, which round-robin pinning can
/// only guess; across veth or loopback it is the sending thread's CPU. Either way every
/// packet of the flow, and the ACK-clocked sends its reads trigger, then take one CPU's path
/// through the stack. Split across two CPUs they overtake each other, and TCP takes the
/// reordering for loss: across veth on 2 vCPUs, 4 flows made 60-185 thousand spurious fast
/// retransmits per 4-6 s run with the reader left to the scheduler and 0-50 with it here, and
/// moved 30-36 Gbit/s spread over both CPUs against 21-25 at best before.
fn follow_flow_cpu(stream: &TcpStream, allowed: &[u32], shared: &Shared) {
    let Ok(cpu) = sys::incoming_cpu(stream) else {
        return;
    };
    if (allowed.is_empty() || allowed.contains(&cpu)) && pin_current_thread(&[cpu]).is_ok() {
        *shared
            .followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(cpu)
            .or_default() += 1;
    }
}

fn serve_connection(stream: &TcpStream, allowed: &[u32], shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(POLL))?;
    let mut raw = [0u8; HEADER_LEN];
    if !read_full(
        stream,
        &mut raw,
        shared,
        Some(Instant::now() + HEADER_DEADLINE),
    )? {
        return Ok(());
    }
    // A bad header closes the connection: nothing was allocated for it yet.
    let header = match Header::decode(&raw, &shared.secret) {
        Ok(header) => header,
        Err(err) => {
            if err == wire::HeaderError::Secret {
                shared.refused.fetch_add(1, Ordering::Relaxed);
            }
            return Err(io::Error::other(err));
        }
    };
    if header.buffer_bytes > 0 {
        sys::set_buffer(stream, true, header.buffer_bytes)?;
        sys::set_buffer(stream, false, header.buffer_bytes)?;
    }
    if matches!(header.mode, Mode::Sink | Mode::Source) {
        follow_flow_cpu(stream, allowed, shared);
    }
    match header.mode {
        Mode::Sink => sink(stream, sink_read_bytes(&header), shared),
        Mode::Source => {
            if header.pacing_mbit > 0 {
                sys::set_pacing(stream, header.pacing_mbit)?;
            }
            source(stream, header.response_bytes as usize, shared)
        }
        Mode::Echo => {
            stream.set_nodelay(true)?;
            // No read timeout while serving round trips: a timed wait arms and cancels a
            // kernel timer per request. `stop` wakes the read with shutdown instead.
            stream.set_read_timeout(None)?;
            echo(stream, &header, shared)
        }
    }
}

/// A sink reads with the client's write size, as iperf3's --length sets both ends.
fn sink_read_bytes(header: &Header) -> usize {
    match header.request_bytes {
        0 => SINK_READ_DEFAULT,
        n => n as usize,
    }
}

fn sink(mut stream: &TcpStream, read_bytes: usize, shared: &Shared) -> io::Result<()> {
    sys::set_rcvlowat(stream, read_bytes)?;
    let mut buf = vec![0u8; read_bytes];
    while !shared.stopping() {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(err) if transient(&err) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Writes until the client half-closes, then sends the [`Trailer`] (this socket's TCP_INFO:
/// only the sender knows its retransmits) and ends the stream.
fn source(mut stream: &TcpStream, write_bytes: usize, shared: &Shared) -> io::Result<()> {
    let buf = vec![0u8; write_bytes];
    let mut scratch = [0u8; 64];
    let mut writes = 0u32;
    loop {
        if shared.stopping() {
            return Ok(());
        }
        let check_fin = match stream.write(&buf) {
            Ok(_) => {
                writes = writes.wrapping_add(1);
                writes.is_multiple_of(FIN_CHECK_EVERY)
            }
            // Blocked for a whole timeout: the client may have stopped reading to half-close.
            Err(err) if transient(&err) => true,
            Err(err) => return Err(err),
        };
        // The client sends nothing after its header but its FIN; anything else is dropped.
        if check_fin && sys::recv_nowait(stream, &mut scratch)? == Some(0) {
            break;
        }
    }
    let stats = sys::tcp_stats(stream)?;
    let trailer = Trailer {
        total_retrans: stats.total_retrans,
        rtt_us: stats.rtt_us,
    };
    if write_full(stream, &trailer.encode(), shared)? {
        stream.shutdown(Shutdown::Write)?;
    }
    Ok(())
}

fn echo(stream: &TcpStream, header: &Header, shared: &Shared) -> io::Result<()> {
    let mut request = vec![0u8; header.request_bytes as usize];
    let response = vec![0u8; header.response_bytes as usize];
    while read_full(stream, &mut request, shared, None)? {
        if !write_full(stream, &response, shared)? {
            break;
        }
    }
    Ok(())
}

fn serve_udp(socket: &UdpSocket, shared: &Shared) {
    let mut request = vec![0u8; wire::UDP_MAX as usize + 1];
    let mut response = vec![0u8; wire::UDP_MAX as usize];
    while !shared.stopping() {
        let (n, from) = match socket.recv_from(&mut request) {
            Ok(got) => got,
            Err(err) if transient(&err) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Some(len) = wire::udp_response_len(&request[..n], &shared.secret) else {
            continue;
        };
        // Magic and sequence number back, so the client matches the response to its request.
        response[..8].copy_from_slice(&request[..8]);
        let _ = socket.send_to(&response[..len], from);
    }
}
