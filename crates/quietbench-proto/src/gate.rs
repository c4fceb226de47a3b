//! A server's accept loop, and who may hold a connection: the agent's and `quietbench serve`'s.
//!
//! A controller needs one or two connections to an agent, a client one to the service; a
//! stranger must not be able to keep them from getting them. So connections live in two
//! budgets ([`Gate`]):
//! - **pending**: accepted, not yet through a call's authentication (the TLS handshake, the
//!   token check). Small, and when full the *oldest* pending connection is closed to make room:
//!   a controller authenticates within milliseconds of connecting, so it is never the oldest
//!   for long, while sockets that only sit there are pushed out. A pending connection is also
//!   closed when [`Limits::auth_deadline`] passes.
//! - **established**: a call on it passed authentication. Closed after [`Limits::idle`] with
//!   no byte read or written (a controller's HTTP/2 keep-alive pings every 2 s count).
//!
//! Refusals are logged at most once per [`LOG_EVERY`], with a count: one WARN per refused
//! connection let a flood fill the journal.
//!
//! The red team's lock-out (64 idle sockets, or 64 TLS handshakes without a token, blocked every
//! legitimate call while they stayed open; 300 idle sockets locked `serve`'s clients out) is
//! what this answers.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_stream::Stream;
use tonic::Status;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How many connections of each kind, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections not yet authenticated.
    pub pending: usize,
    /// Authenticated connections.
    pub established: usize,
    /// How long a connection may stay unauthenticated (the TLS handshake and the first call).
    pub auth_deadline: Duration,
    /// How long an authenticated connection may stay silent.
    pub idle: Duration,
}

/// An agent's limits: a controller needs one or two connections (its peer pairing another).
pub const AGENT_LIMITS: Limits = Limits {
    pending: 16,
    established: 64,
    auth_deadline: Duration::from_secs(10),
    idle: Duration::from_secs(300),
};

/// `quietbench serve`'s limits: clients are CI jobs and people, each with a call or a watch open.
pub const SERVICE_LIMITS: Limits = Limits {
    pending: 32,
    established: 128,
    auth_deadline: Duration::from_secs(10),
    idle: Duration::from_secs(600),
};

/// How long accepting pauses when the process is out of file descriptors: retrying at once
/// spun a core at 100% while the descriptors stayed taken.
const FULL_PAUSE: Duration = Duration::from_millis(100);

/// Shortest time between two log lines about refused or closed connections.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

const PENDING: u8 = 0;
const ESTABLISHED: u8 = 1;
const CLOSED: u8 = 2;

/// One connection's standing, shared by its stream and the gate.
#[derive(Debug)]
pub struct Standing {
    state: AtomicU8,
    /// Wakes the stream's reader when the gate closes it.
    waker: AtomicWaker,
}

impl Standing {
    fn new() -> Self {
        Self {
            state: AtomicU8::new(PENDING),
            waker: AtomicWaker::new(),
        }
    }

    fn is(&self, state: u8) -> bool {
        self.state.load(Ordering::Acquire) == state
    }

    fn close(&self) {
        self.state.store(CLOSED, Ordering::Release);
        self.waker.wake();
    }
}

#[derive(Debug, Default)]
struct GateState {
    /// Pending connections, oldest first.
    pending: VecDeque<(SocketAddr, Arc<Standing>)>,
    established: usize,
    /// Every live connection by its peer's address (what a call's request knows of it).
    by_peer: HashMap<SocketAddr, Arc<Standing>>,
    /// Refusals and evictions since the last log line.
    unlogged: u64,
    last_log: Option<Instant>,
}

/// The two budgets. Touched when a connection opens, closes, or makes a call: never on a
/// measured path.
#[derive(Debug)]
pub struct Gate {
    limits: Limits,
    state: Mutex<GateState>,
}

impl Gate {
    /// A gate with `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // A poisoned lock only means a panic elsewhere; the counts inside are still coherent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection from `peer` as pending, closing the oldest pending one when the
    /// budget is full.
    pub fn admit(&self, peer: SocketAddr) -> Arc<Standing> {
        let standing = Arc::new(Standing::new());
        let mut state = self.lock();
        while state.pending.len() >= self.limits.pending {
            let Some((old_peer, old)) = state.pending.pop_front() else {
                break;
            };
            old.close();
            state.by_peer.remove(&old_peer);
            Self::note(&mut state, || {
                format!(
                    "closed the oldest unauthenticated connection ({old_peer}): {} are open",
                    self.limits.pending
                )
            });
        }
        state.pending.push_back((peer, Arc::clone(&standing)));
        state.by_peer.insert(peer, Arc::clone(&standing));
        standing
    }

    /// A call from `peer` passed authentication: its connection becomes established (once).
    /// Refused when the established budget is full, or when the connection is unknown (closed
    /// meanwhile).
    pub fn authenticate(&self, peer: SocketAddr) -> Result<(), Status> {
        let mut state = self.lock();
        let Some(standing) = state.by_peer.get(&peer).cloned() else {
            return Err(Status::unavailable(
                "this connection was closed by the agent (unauthenticated too long, or \
                 pushed out by newer ones): reconnect",
            ));
        };
        if standing.is(ESTABLISHED) {
            return Ok(());
        }
        if state.established >= self.limits.established {
            let limit = self.limits.established;
            Self::note(&mut state, || {
                format!("refused a call from {peer}: {limit} authenticated connections are open")
            });
            return Err(Status::resource_exhausted(format!(
                "this agent has {limit} authenticated connections open already: close some"
            )));
        }
        state.pending.retain(|(p, _)| *p != peer);
        state.established += 1;
        standing.state.store(ESTABLISHED, Ordering::Release);
        Ok(())
    }

    /// A connection ended: its slot is free.
    fn release(&self, peer: SocketAddr, standing: &Arc<Standing>) {
        let mut state = self.lock();
        match standing.state.swap(CLOSED, Ordering::AcqRel) {
            ESTABLISHED => state.established -= 1,
            PENDING => state.pending.retain(|(_, s)| !Arc::ptr_eq(s, standing)),
            _ => {}
        }
        if state
            .by_peer
            .get(&peer)
            .is_some_and(|s| Arc::ptr_eq(s, standing))
        {
            state.by_peer.remove(&peer);
        }
    }

    /// Open connections: (pending, established).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.pending.len(), state.established)
    }

    /// Logs `message` unless a line was logged less than [`LOG_EVERY`] ago; then counts it, and
    /// the next line says how many went unlogged.
    fn note(state: &mut GateState, message: impl FnOnce() -> String) {
        let now = Instant::now();
        if state
            .last_log
            .is_some_and(|last| now.duration_since(last) < LOG_EVERY)
        {
            state.unlogged += 1;
            return;
        }
        let also = std::mem::take(&mut state.unlogged);
        state.last_log = Some(now);
        if also > 0 {
            tracing::warn!("{} (and {also} more such since the last report)", message());
        } else {
            tracing::warn!("{}", message());
        }
    }
}

/// A connection that holds a slot of the gate while it lives, and closes itself when the gate
/// says so or its deadline passes.
pub struct Gated {
    stream: TcpStream,
    peer: SocketAddr,
    standing: Arc<Standing>,
    gate: Arc<Gate>,
    /// The authentication deadline, then (once authenticated) the idle deadline, moved on
    /// lazily from [`Self::last_active`] when it fires.
    deadline: Pin<Box<Sleep>>,
    /// When a byte was last read or written.
    last_active: tokio::time::Instant,
}

impl Gated {
    /// Activity: noted, and the idle deadline is worked out from it only when the timer fires
    /// (no timer is moved per read or write).
    fn touched(&mut self) {
        self.last_active = tokio::time::Instant::now();
    }

    /// Whether the connection must end now: the gate closed it, or its deadline passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.standing.waker.register(cx.waker());
        if self.standing.is(CLOSED) {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed by the agent's connection gate",
            ));
        }
        while self.deadline.as_mut().poll(cx).is_ready() {
            if !self.standing.is(ESTABLISHED) {
                return Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "not authenticated in time",
                ));
            }
            let idle_until = self.last_active + self.gate.limits.idle;
            if idle_until <= tokio::time::Instant::now() {
                return Some(io::Error::new(io::ErrorKind::TimedOut, "idle for too long"));
            }
            self.deadline.as_mut().reset(idle_until);
        }
        None
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        self.gate.release(self.peer, &self.standing);
    }
}

impl Connected for Gated {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Gated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(err) = self.expired(cx) {
            return Poll::Ready(Err(err));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touched();
        }
        read
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.touched();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.touched();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Accepted connections, each admitted through the gate.
pub struct GatedIncoming {
    listener: TcpListener,
    gate: Arc<Gate>,
    /// Set while accepting pauses (out of file descriptors).
    paused: Option<Pin<Box<Sleep>>>,
}

impl GatedIncoming {
    /// Accepts from `listener` through `gate`.
    pub fn new(listener: TcpListener, gate: Arc<Gate>) -> Self {
        Self {
            listener,
            gate,
            paused: None,
        }
    }
}

impl Stream for GatedIncoming {
    type Item = io::Result<Gated>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = this.paused.as_mut() {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.paused = None;
            }
            let (stream, peer) = match this.listener.poll_accept(cx) {
                Poll::Ready(Ok(accepted)) => accepted,
                // A failed accept (e.g. out of file descriptors) is not the end of serving.
                Poll::Ready(Err(err)) => {
                    let mut state = this.gate.lock();
                    Gate::note(&mut state, || format!("accept failed: {err}"));
                    drop(state);
                    // EMFILE and ENFILE (24 and 23 on Linux): out of file descriptors. The
                    // connection waits in the listen queue; try again after a pause, not in
                    // a spin.
                    if matches!(err.raw_os_error(), Some(23 | 24)) {
                        this.paused = Some(Box::pin(tokio::time::sleep(FULL_PAUSE)));
                    }
                    continue;
                }
                Poll::Pending => return Poll::Pending,
            };
            let standing = this.gate.admit(peer);
            let deadline = Box::pin(tokio::time::sleep(this.gate.limits.auth_deadline));
            return Poll::Ready(Some(Ok(Gated {
                stream,
                peer,
                standing,
                gate: Arc::clone(&this.gate),
                deadline,
                last_active: tokio::time::Instant::now(),
            })));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    const SMALL: Limits = Limits {
        pending: 2,
        established: 2,
        auth_deadline: Duration::from_secs(10),
        idle: Duration::from_secs(300),
    };

    #[test]
    fn a_full_pending_budget_pushes_out_the_oldest_and_never_an_established_one() {
        let gate = Gate::new(SMALL);
        let a = gate.admit(addr(1));
        gate.authenticate(addr(1)).unwrap();
        let b = gate.admit(addr(2));
        let c = gate.admit(addr(3));
        assert_eq!(gate.counts(), (2, 1));
        // A flood of strangers: each pushes out the oldest stranger, never the controller.
        let d = gate.admit(addr(4));
        assert!(b.is(CLOSED) && !c.is(CLOSED) && !d.is(CLOSED));
        assert!(a.is(ESTABLISHED));
        assert_eq!(gate.counts(), (2, 1));
        // The newest connection (a controller's) authenticates before it is oldest.
        gate.authenticate(addr(4)).unwrap();
        assert_eq!(gate.counts(), (1, 2));
        // A closed connection's calls are refused with the reason.
        let err = gate.authenticate(addr(2)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
    }

    #[test]
    fn the_established_budget_is_bounded_and_slots_come_back() {
        let gate = Gate::new(Limits {
            pending: 3,
            ..SMALL
        });
        let streams: Vec<_> = (1..=3).map(|p| gate.admit(addr(p))).collect();
        gate.authenticate(addr(1)).unwrap();
        gate.authenticate(addr(2)).unwrap();
        let err = gate.authenticate(addr(3)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        // Calls on an established connection pass again without counting twice.
        gate.authenticate(addr(1)).unwrap();
        assert_eq!(gate.counts(), (1, 2));
        gate.release(addr(1), &streams[0]);
        gate.release(addr(3), &streams[2]);
        assert_eq!(gate.counts(), (0, 1));
        let again = gate.admit(addr(1));
        gate.authenticate(addr(1)).unwrap();
        assert_eq!(gate.counts(), (0, 2));
        gate.release(addr(1), &again);
        gate.release(addr(2), &streams[1]);
        assert_eq!(gate.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unauthenticated_connection_is_closed_at_its_deadline() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(SMALL));
        let mut incoming = GatedIncoming::new(listener, Arc::clone(&gate));
        let _client = TcpStream::connect(local).await.unwrap();
        let mut conn = tokio_stream::StreamExt::next(&mut incoming)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(gate.counts(), (1, 0));
        let mut buf = [0u8; 8];
        // Paused time: the read waits for the deadline, which the runtime advances to.
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        drop(conn);
        assert_eq!(gate.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_authenticated_connection_lives_while_used_and_closes_when_idle() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(SMALL));
        let mut incoming = GatedIncoming::new(listener, Arc::clone(&gate));
        let mut client = TcpStream::connect(local).await.unwrap();
        let mut conn = tokio_stream::StreamExt::next(&mut incoming)
            .await
            .unwrap()
            .unwrap();
        gate.authenticate(conn.peer).unwrap();
        let mut buf = [0u8; 8];
        // Past the authentication deadline, kept alive by traffic.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            client.write_all(b"ping").await.unwrap();
            assert_eq!(conn.read(&mut buf).await.unwrap(), 4);
        }
        let started = tokio::time::Instant::now();
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(298) && waited <= Duration::from_secs(301),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_pushed_out_connection_ends_at_once() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::new(SMALL));
        let mut incoming = GatedIncoming::new(listener, Arc::clone(&gate));
        let mut clients = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(local).await.unwrap());
            conns.push(
                tokio_stream::StreamExt::next(&mut incoming)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let mut buf = [0u8; 8];
        let err = tokio::time::timeout(Duration::from_secs(5), conns[0].read(&mut buf))
            .await
            .expect("the oldest ends at once, not at its deadline")
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    }
}
