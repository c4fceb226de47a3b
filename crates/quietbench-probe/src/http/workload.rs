//! One probe thread's load: its connections, its share of the schedule, and the event loop
//! that drives them, one pass per [`Workload::step`].
//!
//! A pass: reopen connections whose backoff is over and expire requests past their timeout
//! (only when the earliest such time has come: no scan per request); send every due request
//! on an idle connection, oldest idle first; sleep until ~200 µs before the next request is
//! due, or until a socket is ready, whichever is first (then spin the last 200 µs, since a
//! sleep wakes tens of microseconds late); read what is ready.
//!
//! Per request, nothing allocates, locks or logs: every request's bytes were formatted once
//! into one shared buffer and a send picks one by index (arithmetic, or one draw of a
//! SplitMix64), each connection reads into its own fixed buffer, the schedule is arithmetic and
//! the idle connections wait in a queue sized for all of them.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quietbench_vocab::metrics;

use super::framing::{Framing, Reader, Verdict};
use super::h2;
use super::tls::{TlsClient, TlsConn};

// TLS's part of the loop (tls=true): the handshake, and sending and reading through TlsConn.
mod secure;
use super::requests::{Picker, RequestSet};
use super::schedule::{Schedule, backoff};
use super::sys::{self, BROKEN, Epoll, Event, READABLE, WRITABLE};
use super::{HttpConfig, LAG, LATENCY, SERVICE, metric_sets};
use crate::{Counter, Merge, MetricSet, Samples, Step, Workload};

/// Waits longer than this sleep; the rest is spun.
const SPIN_BELOW: Duration = Duration::from_micros(200);
/// A pass sleeps at most this long, so the harness sees the trial's end promptly.
const MAX_WAIT: Duration = Duration::from_millis(5);
/// Events taken per pass; more stay ready for the next (epoll is level-triggered).
const MAX_EVENTS: usize = 1024;
/// "No timer armed": a time that never comes within a trial.
const NO_TIMER: Duration = Duration::from_secs(24 * 3600);

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket: reopened at `deadline`.
    Closed,
    /// Connect in progress; failed if not done by `deadline`.
    Connecting,
    /// TLS handshake in progress (`tls=true`); failed, as a connect, if not done by `deadline`.
    Handshaking,
    /// Open, nothing in flight: in the idle queue.
    Idle,
    /// A request partly written; timed out at `deadline`.
    Sending,
    /// A request written, its response awaited; timed out at `deadline`.
    Awaiting,
}

struct Conn {
    stream: Option<TcpStream>,
    /// Bumped at every close, and part of the epoll token: an event for a socket closed earlier
    /// in the same batch is recognized and dropped.
    generation: u32,
    state: State,
    reader: Reader,
    /// The request in flight: its index in the request set.
    request: usize,
    /// Bytes of the request written.
    written: usize,
    /// `tls=true`: the connection's TLS, made at each connect (an allocation per connection,
    /// none per request).
    tls: Option<Box<TlsConn>>,
    /// HTTP/2: what a send writes (the connection's opening, acknowledgements, the request's
    /// frames with their stream id), made at the send in room reserved at the start. Empty
    /// otherwise: HTTP/1.1 and raw requests are written from the request set itself.
    out: Vec<u8>,
    /// EPOLLOUT is asked for (connecting, or a write that would block).
    watching_writes: bool,
    /// The request in flight: when it was due, when it was sent, whether it is recorded.
    due: Instant,
    sent: Instant,
    recorded: bool,
    /// The connect or response timeout; when Closed, when to reopen.
    deadline: Instant,
    /// When it last became idle.
    idle_since: Instant,
    /// Failures in a row, for the backoff; a complete response resets it.
    failures: u32,
}

impl Conn {
    /// `longest`: the longest request's bytes, for HTTP/2's room.
    fn new(now: Instant, framing: Framing, longest: usize) -> Self {
        Self {
            stream: None,
            generation: 0,
            state: State::Closed,
            reader: Reader::new(framing),
            request: 0,
            written: 0,
            tls: None,
            out: match framing {
                Framing::Http2 | Framing::Grpc => Vec::with_capacity(longest + h2::ROOM_BYTES),
                _ => Vec::new(),
            },
            watching_writes: false,
            due: now,
            sent: now,
            recorded: false,
            deadline: now,
            idle_since: now,
            failures: 0,
        }
    }

    fn in_flight(&self) -> bool {
        matches!(self.state, State::Sending | State::Awaiting)
    }

    /// A state with a time attached: a timeout, or when to reopen.
    fn timed(&self) -> bool {
        self.state != State::Idle
    }
}

/// What ended a request without a response to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Timeout,
    Io,
}

/// A complete response of a recorded request (http: 2xx/3xx).
struct Answer {
    latency_ns: u64,
    service_ns: u64,
}

/// Whole-trial counts (after the warm-up).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    errors_connect: u64,
    errors_timeout: u64,
    errors_4xx: u64,
    errors_5xx: u64,
    errors_io: u64,
    /// `grpc=`: calls by their grpc-status, `errors_grpc[code - 1]`.
    errors_grpc: [u64; 16],
    reconnects: u64,
    sent: u64,
    answered: u64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn token(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | index as u64
}

/// The load of one probe thread: `http`'s, or `tcp`'s with raw framing.
pub struct HttpWorkload {
    /// The probe's name, for messages.
    probe: &'static str,
    framing: Framing,
    target: SocketAddr,
    /// In a duet, a thread that loads server B (odd threads do) puts its samples this many
    /// metric sets on, in B's, and gives its counters B's names; 0 for A's threads.
    lane_offset: usize,
    /// The load is a duet's.
    duet: bool,
    /// `tls=true`: the settings every connection's TLS is made from.
    tls: Option<TlsClient>,
    /// A TLS handshake's failure, kept to say why when no connection could be made.
    tls_failure: Option<String>,
    requests: Arc<RequestSet>,
    /// Which request goes next.
    picker: Picker,
    timeout: Duration,
    max_lag: Duration,
    warmup: Duration,
    /// None: closed loop.
    schedule: Option<Schedule>,
    epoll: Epoll,
    events: Box<[Event]>,
    conns: Vec<Conn>,
    /// Idle connections, longest idle first. Holds each connection at most once, so its
    /// capacity (all of them) is never exceeded.
    idle: VecDeque<usize>,
    /// The trial's start (the first step) and the warm-up's end.
    start: Option<Instant>,
    warmup_end: Option<Instant>,
    /// Open loop: the next request to send, when it is due, and the first one recorded.
    next: u64,
    next_due: Instant,
    first_recorded: u64,
    /// The earliest deadline of any connection: timers are scanned only then.
    next_timer: Instant,
    tally: Tally,
    lag_max: Duration,
    /// When the last step ended: the trial's end as the harness times it (finish runs after).
    last_step_end: Option<Instant>,
    error: Option<String>,
    counters: Vec<Counter>,
}

impl HttpWorkload {
    /// Opens thread `thread`'s share of the connections, waiting up to the timeout for them.
    /// Runs on the pinned probe thread, before measuring. A server that refuses does not fail
    /// it: the failed attempts are counted, and retried during the trial.
    pub fn new(config: &HttpConfig, thread: usize) -> Result<Self, String> {
        let probe = config.probe;
        sys::ensure_open_files(config.connections as u64)?;
        let epoll = Epoll::new().map_err(|e| format!("{probe}: cannot create an epoll: {e}"))?;
        let now = Instant::now();
        let n = config.connections_of(thread);
        let lane_b = config.duet_target.is_some() && (thread % 2 == 1) != config.duet_b_first;
        let sets_per_lane = metric_sets(config.rate > 0, false).len();
        let mut workload = Self {
            probe,
            framing: config.framing,
            target: match config.duet_target {
                Some(b) if lane_b => b,
                _ => config.target,
            },
            lane_offset: if lane_b { sets_per_lane } else { 0 },
            duet: config.duet_target.is_some(),
            tls: match &config.tls_host {
                Some(host) => Some(
                    TlsClient::new(
                        config.framing.alpn(),
                        host,
                        config.requests.longest() + h2::ROOM_BYTES,
                    )
                    .map_err(|e| format!("{probe}: {e}"))?,
                ),
                None => None,
            },
            tls_failure: None,
            requests: Arc::clone(&config.requests),
            picker: Picker::new(config.order, config.requests.len(), config.threads, thread),
            timeout: config.timeout,
            max_lag: config.max_lag,
            warmup: config.warmup,
            schedule: (config.rate > 0).then(|| Schedule::new(config.rate, config.threads, thread)),
            epoll,
            events: vec![Event::EMPTY; n.clamp(1, MAX_EVENTS)].into_boxed_slice(),
            conns: (0..n)
                .map(|_| Conn::new(now, config.framing, config.requests.longest()))
                .collect(),
            idle: VecDeque::with_capacity(n),
            start: None,
            warmup_end: None,
            next: 0,
            next_due: now,
            first_recorded: 0,
            next_timer: now + NO_TIMER,
            tally: Tally::default(),
            lag_max: Duration::ZERO,
            last_step_end: None,
            error: None,
            counters: Vec::new(),
        };
        workload.open_all(now)?;
        Ok(workload)
    }

    fn open_all(&mut self, now: Instant) -> Result<(), String> {
        for i in 0..self.conns.len() {
            if let Err(e) = self.start_connect(i, now)
                && sys::out_of_descriptors(&e)
            {
                return Err(format!(
                    "{}: cannot open connection {} of {} to {}: {e}; raise the agent's \
                     open-file limit (LimitNOFILE=) or lower connections",
                    self.probe,
                    i + 1,
                    self.conns.len(),
                    self.target
                ));
            }
        }
        let deadline = now + self.timeout;
        while self
            .conns
            .iter()
            .any(|c| matches!(c.state, State::Connecting | State::Handshaking))
        {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            self.epoll.wait(deadline - now);
            self.poll_events(None);
        }
        // A server that does not speak TLS (or not HTTP/2 over it) fails every handshake: said
        // now, with the reason, rather than as a trial of connect errors.
        if let Some(why) = &self.tls_failure
            && self.conns.iter().all(|c| c.state != State::Idle)
        {
            return Err(format!(
                "{}: no TLS connection to {} could be made: {why}",
                self.probe, self.target
            ));
        }
        Ok(())
    }

    /// Whether what happens at `now` is counted: after the warm-up (before the trial starts,
    /// as if at its start).
    fn counting(&self, now: Instant) -> bool {
        match self.warmup_end {
            Some(end) => now >= end,
            None => self.warmup.is_zero(),
        }
    }

    fn arm(&mut self, at: Instant) {
        self.next_timer = self.next_timer.min(at);
    }

    fn begin(&mut self, now: Instant) {
        self.start = Some(now);
        self.warmup_end = Some(now + self.warmup);
        if let Some(schedule) = self.schedule {
            self.next = 0;
            self.next_due = now + Duration::from_nanos(schedule.due_ns(0));
            self.first_recorded = schedule.first_due_from(ns(self.warmup));
        }
    }

    /// Opens connection `i`'s socket and starts its connect. A failure is counted (and
    /// retried after the backoff) here; the error is returned for the set-up to judge.
    fn start_connect(&mut self, i: usize, now: Instant) -> io::Result<()> {
        let opened = sys::start_connect(self.target).and_then(|stream| {
            let c = &self.conns[i];
            self.epoll
                .add(&stream, READABLE | WRITABLE, token(i, c.generation))
                .map(|()| stream)
        });
        match opened {
            Ok(stream) => {
                let c = &mut self.conns[i];
                c.stream = Some(stream);
                c.tls = None;
                c.reader.connected();
                c.state = State::Connecting;
                c.watching_writes = true;
                c.deadline = now + self.timeout;
                let at = c.deadline;
                self.arm(at);
                Ok(())
            }
            Err(e) => {
                self.connect_failed(i, now);
                Err(e)
            }
        }
    }

    /// A connect attempt failed (refused, unreachable, timed out): counted once, retried after
    /// the backoff.
    fn connect_failed(&mut self, i: usize, now: Instant) {
        if self.counting(now) {
            self.tally.errors_connect += 1;
        }
        let c = &mut self.conns[i];
        c.stream = None;
        c.tls = None;
        c.generation = c.generation.wrapping_add(1);
        c.state = State::Closed;
        c.watching_writes = false;
        c.failures = c.failures.saturating_add(1);
        c.deadline = now + backoff(c.failures);
        let at = c.deadline;
        self.arm(at);
    }

    /// Closes an open connection and reopens it: at once after a clean close, after the
    /// backoff after a failure.
    fn close(&mut self, i: usize, now: Instant, failure: bool) {
        let counting = self.counting(now);
        let c = &mut self.conns[i];
        if c.state == State::Idle
            && let Some(at) = self.idle.iter().position(|&j| j == i)
        {
            self.idle.remove(at);
        }
        c.stream = None;
        c.tls = None;
        c.generation = c.generation.wrapping_add(1);
        c.state = State::Closed;
        c.watching_writes = false;
        if failure {
            c.failures = c.failures.saturating_add(1);
        }
        if counting {
            self.tally.reconnects += 1;
        }
        let wait = backoff(c.failures);
        if wait.is_zero() {
            let _ = self.start_connect(i, now);
        } else {
            c.deadline = now + wait;
            let at = c.deadline;
            self.arm(at);
        }
    }

    /// The request in flight on `i` failed: counted (if recorded), the connection reopened.
    fn fail_request(&mut self, i: usize, now: Instant, failure: Failure) {
        if self.conns[i].recorded {
            match failure {
                Failure::Timeout => self.tally.errors_timeout += 1,
                Failure::Io => self.tally.errors_io += 1,
            }
        }
        self.close(i, now, true);
    }

    fn send(&mut self, i: usize, due: Instant, now: Instant, recorded: bool) {
        let request = self.picker.next();
        let c = &mut self.conns[i];
        c.request = request;
        c.due = due;
        c.sent = now;
        c.recorded = recorded;
        c.written = 0;
        if let Reader::Http2(r) = &mut c.reader {
            r.prepare(&mut c.out, self.requests.bytes(request));
        }
        c.reader.reset_for(self.requests.is_head(request));
        if let Some(tls) = c.tls.as_mut() {
            let plaintext = match c.reader {
                Reader::Http2(_) => &c.out[..],
                _ => self.requests.bytes(request),
            };
            if tls.seal(plaintext).is_err() {
                c.state = State::Sending;
                if recorded {
                    self.tally.sent += 1;
                }
                return self.fail_request(i, now, Failure::Io);
            }
        }
        c.state = State::Sending;
        c.deadline = now + self.timeout;
        let at = c.deadline;
        self.arm(at);
        if recorded {
            self.tally.sent += 1;
        }
        self.write_more(i, now);
    }

    /// Writes what is left of the request on `i`.
    fn write_more(&mut self, i: usize, now: Instant) {
        if self.conns[i].tls.is_some() {
            return self.write_more_tls(i, now);
        }
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_ref() else {
                return;
            };
            let request = match c.reader {
                Reader::Http2(_) => &c.out[..],
                _ => self.requests.bytes(c.request),
            };
            let result = (&*stream).write(&request[c.written..]);
            match result {
                Ok(0) => break,
                Ok(n) => {
                    c.written += n;
                    if c.written == request.len() {
                        c.state = State::Awaiting;
                        if c.watching_writes {
                            c.watching_writes = false;
                            if self
                                .epoll
                                .modify(stream, READABLE, token(i, c.generation))
                                .is_err()
                            {
                                break;
                            }
                        }
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !c.watching_writes {
                        c.watching_writes = true;
                        if self
                            .epoll
                            .modify(stream, READABLE | WRITABLE, token(i, c.generation))
                            .is_err()
                        {
                            break;
                        }
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.fail_request(i, now, Failure::Io);
    }

    /// Reads what has arrived of `i`'s response.
    fn read_response(&mut self, i: usize) -> Option<Answer> {
        if self.conns[i].tls.is_some() {
            return self.read_response_tls(i);
        }
        loop {
            let Conn { stream, reader, .. } = &mut self.conns[i];
            let stream = stream.as_ref()?;
            let step = match (&*stream).read(reader.spare()) {
                Ok(0) => reader.eof(),
                Ok(n) => reader.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => Err(super::response::Malformed::Eof),
            };
            match step {
                Ok(true) => return self.complete(i),
                Ok(false) => {
                    if self.conns[i].state == State::Awaiting && !self.write_control(i) {
                        self.fail_request(i, Instant::now(), Failure::Io);
                        return None;
                    }
                }
                Err(_) => {
                    self.fail_request(i, Instant::now(), Failure::Io);
                    return None;
                }
            }
        }
    }

    /// `i`'s response is complete: recorded (http: 2xx, 3xx) or counted, and the connection idle
    /// again, or reopened if the server closes it.
    fn complete(&mut self, i: usize) -> Option<Answer> {
        let done = Instant::now();
        let c = &mut self.conns[i];
        let mut answer = None;
        if c.recorded {
            match c.reader.verdict() {
                Verdict::Answered => {
                    self.tally.answered += 1;
                    answer = Some(Answer {
                        latency_ns: ns(done.saturating_duration_since(c.due)),
                        service_ns: ns(done.saturating_duration_since(c.sent)),
                    });
                }
                Verdict::ClientError => self.tally.errors_4xx += 1,
                Verdict::ServerError => self.tally.errors_5xx += 1,
                Verdict::Unexpected => self.tally.errors_io += 1,
                Verdict::Grpc(code) => self.tally.errors_grpc[usize::from(code - 1)] += 1,
            }
        }
        c.failures = 0;
        // A response before the whole request was written leaves the connection unusable.
        if c.reader.close() || c.state == State::Sending {
            self.close(i, done, false);
            return answer;
        }
        c.state = State::Idle;
        c.idle_since = done;
        if c.watching_writes {
            c.watching_writes = false;
            if let Some(stream) = &c.stream
                && self
                    .epoll
                    .modify(stream, READABLE, token(i, c.generation))
                    .is_err()
            {
                self.close(i, done, true);
                return answer;
            }
        }
        self.idle.push_back(i);
        answer
    }

    /// An idle connection is readable: the server closed or reset it, or sent something nobody
    /// asked for (a 408 before closing an idle connection, as some servers do). No request was
    /// affected, so it is no error: the connection is reopened (a reconnect), after the backoff
    /// in case the server does so at once every time.
    fn idle_readable(&mut self, i: usize, now: Instant) {
        if self.conns[i].tls.is_some() {
            return self.idle_readable_tls(i, now);
        }
        if matches!(self.conns[i].reader, Reader::Http2(_)) {
            return self.idle_readable_http2(i, now);
        }
        let Conn { stream, reader, .. } = &mut self.conns[i];
        let Some(stream) = stream.as_ref() else {
            return;
        };
        match (&*stream).read(reader.spare()) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            _ => self.close(i, now, true),
        }
    }

    /// An idle HTTP/2 connection is readable: frames of the connection (SETTINGS, PING,
    /// WINDOW_UPDATE, the end of a finished stream) are taken in and acknowledged, and it stays
    /// open; it is reopened as an HTTP/1.1 one would be when the server closes it, sends
    /// GOAWAY, or sends what cannot be read.
    fn idle_readable_http2(&mut self, i: usize, now: Instant) {
        loop {
            let Conn { stream, reader, .. } = &mut self.conns[i];
            let Some(stream) = stream.as_ref() else {
                return;
            };
            let taken = match (&*stream).read(reader.spare()) {
                Ok(0) => Err(()),
                Ok(n) => reader.advance(n).map_err(drop),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => Err(()),
            };
            if taken.is_err() {
                return self.close(i, now, true);
            }
            // A GOAWAY between requests: the server's graceful close, reopened at once.
            if reader.close() {
                return self.close(i, now, false);
            }
        }
        if !self.write_control(i) {
            self.close(i, now, true);
        }
    }

    /// Writes what an HTTP/2 connection owes the server (acknowledgements, window updates)
    /// while no request is being written on it; false when the connection broke. What would
    /// block waits for the next chance, or goes with the next request.
    fn write_control(&mut self, i: usize) -> bool {
        if self.conns[i].tls.is_some() {
            return self.write_control_tls(i);
        }
        let Conn { stream, reader, .. } = &mut self.conns[i];
        let (Some(stream), Reader::Http2(r)) = (stream.as_ref(), reader) else {
            return true;
        };
        while !r.control().is_empty() {
            match (&*stream).write(r.control()) {
                Ok(0) => return false,
                Ok(n) => r.control_written(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// `i`'s connect finished (writable) or failed (error, hang-up).
    fn finish_connect(&mut self, i: usize, flags: u32, now: Instant) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_ref() else {
            return;
        };
        let failed = !matches!(stream.take_error(), Ok(None)) || flags & BROKEN != 0;
        if failed {
            self.connect_failed(i, now);
            return;
        }
        if flags & WRITABLE == 0 {
            return;
        }
        if self
            .epoll
            .modify(stream, READABLE, token(i, c.generation))
            .is_err()
        {
            self.connect_failed(i, now);
            return;
        }
        c.watching_writes = false;
        if self.tls.is_some() {
            return self.start_handshake(i, now);
        }
        c.state = State::Idle;
        c.idle_since = now;
        self.idle.push_back(i);
    }

    fn on_event(&mut self, i: usize, flags: u32, now: Instant) -> Option<Answer> {
        let generation = self.conns[i].generation;
        match self.conns[i].state {
            State::Closed => None,
            State::Connecting => {
                self.finish_connect(i, flags, now);
                None
            }
            State::Handshaking => {
                self.continue_handshake(i, flags, now);
                None
            }
            State::Idle => {
                self.idle_readable(i, now);
                None
            }
            State::Sending | State::Awaiting => {
                if self.conns[i].state == State::Sending && flags & (WRITABLE | BROKEN) != 0 {
                    self.write_more(i, now);
                }
                let c = &self.conns[i];
                if c.generation == generation && c.in_flight() && flags & (READABLE | BROKEN) != 0 {
                    self.read_response(i)
                } else {
                    None
                }
            }
        }
    }

    /// Handles every ready event; records the answers when given samples.
    fn poll_events(&mut self, mut samples: Option<&mut Samples<'_>>) {
        let n = self.epoll.ready(&mut self.events);
        for e in 0..n {
            let event = self.events[e];
            let (i, generation) = (
                (event.token() & u64::from(u32::MAX)) as usize,
                (event.token() >> 32) as u32,
            );
            if self.conns.get(i).is_none_or(|c| c.generation != generation) {
                continue; // a socket closed earlier in this batch
            }
            let answer = self.on_event(i, event.flags(), Instant::now());
            if let (Some(answer), Some(samples)) = (answer, samples.as_deref_mut()) {
                samples.record(LATENCY + self.lane_offset, answer.latency_ns, 0);
                samples.record(SERVICE + self.lane_offset, answer.service_ns, 0);
            }
        }
    }

    /// Expires timeouts and reopens closed connections whose backoff is over; re-arms the
    /// timer at the earliest deadline left.
    fn run_timers(&mut self, now: Instant) {
        let mut next = now + NO_TIMER;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.timed() && c.deadline <= now {
                match c.state {
                    State::Connecting | State::Handshaking => self.connect_failed(i, now),
                    State::Sending | State::Awaiting => self.fail_request(i, now, Failure::Timeout),
                    State::Closed => {
                        let _ = self.start_connect(i, now);
                    }
                    State::Idle => {}
                }
            }
            let c = &self.conns[i];
            if c.timed() {
                next = next.min(c.deadline);
            }
        }
        self.next_timer = next;
    }

    /// Sends what is due on the idle connections. Err: the generator itself fell behind.
    fn dispatch(&mut self, samples: &mut Samples<'_>) -> Result<(), String> {
        let Some(schedule) = self.schedule else {
            // Closed loop: each idle connection sends at once.
            while let Some(i) = self.idle.pop_front() {
                let now = Instant::now();
                let recorded = self.counting(now);
                self.send(i, now, now, recorded);
            }
            return Ok(());
        };
        let start = self.start.unwrap_or_else(Instant::now);
        while let Some(&i) = self.idle.front() {
            let now = Instant::now();
            if self.next_due > now {
                break;
            }
            let due = self.next_due;
            let recorded = self.next >= self.first_recorded;
            if recorded {
                // It could have gone when it was due, or when this connection became idle if
                // later; anything past that is the loop's own lateness.
                let lag = now.saturating_duration_since(due.max(self.conns[i].idle_since));
                samples.record(LAG + self.lane_offset, ns(lag), 0);
                self.lag_max = self.lag_max.max(lag);
                if lag > self.max_lag {
                    return Err(format!(
                        "{}the load generator fell behind its schedule by {:.1} ms \
                         (max_lag_ms={}): it, not the server, was measured; lower rate= or give \
                         the load more threads/CPUs",
                        quietbench_vocab::VOID,
                        lag.as_secs_f64() * 1e3,
                        self.max_lag.as_millis()
                    ));
                }
            }
            self.idle.pop_front();
            self.next += 1;
            self.next_due = start + Duration::from_nanos(schedule.due_ns(self.next));
            self.send(i, due, now, recorded);
        }
        Ok(())
    }

    /// When the pass should wake at the latest: the next timer, a bounded wait, and (with an
    /// idle connection to send it on) a little before the next request is due.
    fn wake_at(&self, now: Instant) -> Instant {
        let mut wake = (now + MAX_WAIT).min(self.next_timer);
        if self.schedule.is_some() && !self.idle.is_empty() {
            wake = wake.min(self.next_due.checked_sub(SPIN_BELOW).unwrap_or(now));
        }
        wake
    }

    fn counter(name: &'static str, unit: &'static str, value: f64, merge: Merge) -> Counter {
        Counter {
            name,
            unit,
            value,
            merge,
        }
    }
}

impl Workload for HttpWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        metric_sets(self.schedule.is_some(), self.duet)
    }

    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        let now = Instant::now();
        if self.start.is_none() {
            self.begin(now);
        }
        if now >= self.next_timer {
            self.run_timers(now);
        }
        if let Err(message) = self.dispatch(samples) {
            self.error = Some(message);
            return Step::Failed;
        }
        let now = Instant::now();
        let wake = self.wake_at(now);
        if wake > now {
            self.epoll.wait(wake - now);
        }
        self.poll_events(Some(samples));
        self.last_step_end = Some(Instant::now());
        Step::Recorded
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    /// Closes every connection. Requests in flight are not recorded: counted as abandoned;
    /// requests due and never sent, as unsent.
    fn finish(&mut self) {
        let end = self.last_step_end.unwrap_or_else(Instant::now);
        let abandoned = self
            .conns
            .iter()
            .filter(|c| c.in_flight() && c.recorded)
            .count();
        for c in &mut self.conns {
            c.stream = None;
            c.state = State::Closed;
        }
        self.idle.clear();
        let t = self.tally;
        let sum = |name, unit, value: u64| Self::counter(name, unit, value as f64, Merge::Sum);
        let mut counters = vec![
            sum(metrics::ERRORS_CONNECT, "errors", t.errors_connect),
            sum(metrics::ERRORS_TIMEOUT, "errors", t.errors_timeout),
        ];
        // Raw responses have no status: no 4xx or 5xx to count, and none reported as zero.
        if !matches!(self.framing, Framing::Raw(_)) {
            counters.push(sum(metrics::ERRORS_4XX, "errors", t.errors_4xx));
            counters.push(sum(metrics::ERRORS_5XX, "errors", t.errors_5xx));
        }
        if self.framing == Framing::Grpc {
            for (name, &count) in metrics::GRPC_ERRORS.iter().zip(&t.errors_grpc) {
                counters.push(sum(name, "errors", count));
            }
        }
        counters.extend([
            sum(metrics::ERRORS_IO, "errors", t.errors_io),
            sum(metrics::RECONNECTS, "connections", t.reconnects),
            sum(metrics::REQUESTS_SENT, "requests", t.sent),
            sum(metrics::REQUESTS_ABANDONED, "requests", abandoned as u64),
        ]);
        if let (Some(schedule), Some(start)) = (self.schedule, self.start) {
            let due = schedule.due_by(ns(end.saturating_duration_since(start)));
            let unsent = due.saturating_sub(self.next.max(self.first_recorded));
            counters.push(sum(metrics::REQUESTS_UNSENT, "requests", unsent));
            counters.push(Self::counter(
                metrics::SEND_LAG_MAX_US,
                "us",
                self.lag_max.as_secs_f64() * 1e6,
                Merge::Max,
            ));
        }
        if let Some(warmup_end) = self.warmup_end
            && !self.warmup.is_zero()
            && end > warmup_end
        {
            let seconds = end.duration_since(warmup_end).as_secs_f64();
            counters.push(Self::counter(
                metrics::REQUESTS_PER_SEC_AFTER_WARMUP,
                "requests/s",
                t.answered as f64 / seconds,
                Merge::Sum,
            ));
        }
        if self.lane_offset > 0 {
            // Server B's counters under B's names; one without a B name would add into A's.
            counters.retain_mut(|c| metrics::duet_b(c.name).map(|b| c.name = b).is_some());
        }
        self.counters = counters;
    }

    fn counters(&mut self) -> Vec<Counter> {
        std::mem::take(&mut self.counters)
    }
}
