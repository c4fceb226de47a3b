//! The system calls std does not offer: epoll, a sub-millisecond wait on it, a non-blocking
//! connect, and the open-file limit.
//!
//! Straight over libc rather than nix's wrappers: nix's epoll needs its "event" feature, and
//! turning a feature of the workspace's nix on rebuilds every crate that uses nix, for four
//! calls that are simple to wrap here.

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::libc;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Readable (or closed, or failed).
pub(crate) const READABLE: u32 = libc::EPOLLIN as u32;
/// Writable (or a connect finished).
pub(crate) const WRITABLE: u32 = libc::EPOLLOUT as u32;
/// An error or a hang-up: reported whatever was asked.
pub(crate) const BROKEN: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// One ready event: what happened, and the token it was registered with.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Event(libc::epoll_event);

impl Event {
    pub(crate) const EMPTY: Event = Event(libc::epoll_event { events: 0, u64: 0 });

    pub(crate) fn flags(&self) -> u32 {
        self.0.events
    }

    pub(crate) fn token(&self) -> u64 {
        self.0.u64
    }
}

/// An epoll instance (level-triggered).
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: no pointers; the result is checked, and a new descriptor is ours alone.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, flags: u32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: flags,
            u64: token,
        };
        // SAFETY: `event` is a live local the kernel only reads.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &raw mut event) }).map(drop)
    }

    /// Watches `socket` for `flags`, reporting `token`. A socket leaves the set when it closes.
    pub(crate) fn add(&self, socket: &impl AsRawFd, flags: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, socket.as_raw_fd(), flags, token)
    }

    /// Changes what `socket` is watched for.
    pub(crate) fn modify(&self, socket: &impl AsRawFd, flags: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, socket.as_raw_fd(), flags, token)
    }

    /// The events ready now, without waiting: how many of `events` were filled.
    pub(crate) fn ready(&self, events: &mut [Event]) -> usize {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `events` is a live slice of `max` epoll_event-sized entries (Event is a
        // transparent newtype in layout: one field) the kernel writes at most `max` of.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr().cast::<libc::epoll_event>(),
                max,
                0,
            )
        };
        // EINTR is the only error a valid call can get: nothing was ready.
        usize::try_from(n).unwrap_or(0)
    }

    /// Waits until an event is ready or `timeout` has passed, to the nanosecond: poll on the
    /// epoll descriptor (readable when an event is), where epoll_wait itself takes whole
    /// milliseconds and a request due in 0.9 ms would have to be spun for. Then [`Self::ready`].
    pub(crate) fn wait(&self, timeout: Duration) {
        let mut fds = [libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` and `ts` are live locals of the sizes given; no signal mask is passed.
        // The result (ready, timed out, interrupted) needs no handling: the caller looks.
        let _ = unsafe { libc::ppoll(fds.as_mut_ptr(), 1, &raw const ts, std::ptr::null()) };
    }
}

/// Starts a TCP connection to `addr` without waiting for it: a non-blocking socket with
/// TCP_NODELAY (each request is one write; Nagle would hold a second one back for the ACK).
/// Done when the socket reports writable; [`TcpStream::take_error`] then says how.
pub(crate) fn start_connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: no pointers; the result is checked.
    let fd = check(unsafe { libc::socket(family, kind, 0) })?;
    // SAFETY: `fd` was just returned by socket() and nothing else owns it.
    let stream = TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    stream.set_nodelay(true)?;
    let ret = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_in is plain C data, valid all zero.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            // SAFETY: `sin` is a live sockaddr_in of the length given; the kernel reads it.
            unsafe {
                libc::connect(
                    fd,
                    (&raw const sin).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_in6 is plain C data, valid all zero.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            // SAFETY: `sin6` is a live sockaddr_in6 of the length given; the kernel reads it.
            unsafe {
                libc::connect(
                    fd,
                    (&raw const sin6).cast(),
                    size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if ret == 0 {
        return Ok(stream);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok(stream)
    } else {
        Err(err)
    }
}

/// Whether an error is the process running out of file descriptors.
pub(crate) fn out_of_descriptors(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Files the agent keeps open besides the probe's connections, with room to spare.
const OTHER_FILES: u64 = 1024;

/// Makes room for `connections` sockets: raises the soft limit (RLIMIT_NOFILE) up to the hard
/// one, as Go's runtime does for every program at start, since the soft default (1024) is a
/// guard for select(2) users, which this is not. Err when even the hard limit is too low.
pub(crate) fn ensure_open_files(connections: u64) -> Result<(), String> {
    let needed = connections.saturating_add(OTHER_FILES);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live local the kernel writes.
    if check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) }).is_err() {
        return Ok(()); // unknown: let the connects say
    }
    if limit.rlim_cur >= needed {
        return Ok(());
    }
    if limit.rlim_max < needed {
        return Err(format!(
            "connections={connections} and the agent's own files need {needed} file \
             descriptors; its hard limit is {} (ulimit -Hn): raise it (LimitNOFILE= in the \
             agent's systemd unit) or lower connections",
            limit.rlim_max
        ));
    }
    let raised = libc::rlimit {
        rlim_cur: needed.max(limit.rlim_cur),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `raised` is a live local the kernel reads.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) })
        .map(drop)
        .map_err(|e| format!("cannot raise the open-file limit to {needed}: {e}"))
}
