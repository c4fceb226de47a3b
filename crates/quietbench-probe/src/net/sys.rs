//! The socket options std does not offer (buffers, pacing, TCP_INFO, a non-blocking poll) and
//! the one question about the route: is the interface's qdisc fq, so SO_MAX_PACING_RATE is
//! enforced by fq rather than by TCP's own pacing? Read over rtnetlink, so no tool (tc) is
//! needed on the host.

use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use nix::libc;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed; the kernel only reads it.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are live locals; the kernel writes at most `len` bytes.
    check(unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &raw mut len) })?;
    Ok(value)
}

/// Sets a socket's send or receive buffer, which also turns the kernel's autotuning off for
/// it. SO_SNDBUFFORCE first (root, CAP_NET_ADMIN) so net.core.wmem_max does not silently cap
/// it, then the plain option. Returns the size the kernel reports (twice what was set: its
/// bookkeeping overhead).
pub fn set_buffer(socket: &impl AsRawFd, send: bool, bytes: u32) -> io::Result<u32> {
    let fd = socket.as_raw_fd();
    let (force, plain) = if send {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    } else {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    };
    let value = bytes.min(i32::MAX as u32 / 2) as libc::c_int;
    if setsockopt(fd, libc::SOL_SOCKET, force, &value).is_err() {
        setsockopt(fd, libc::SOL_SOCKET, plain, &value)?;
    }
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, plain)?.max(0) as u32)
}

/// Lets a blocking read (and poll's readable) wait until `bytes` have arrived, or the stream
/// ends, rather than waking for each burst of segments (SO_RCVLOWAT). A throughput reader
/// asks for whole reads: fewer wake-ups on a CPU it shares with a sender (across veth on 2
/// vCPUs, 4 flows moved 30.4-34.6 Gbit/s with it against 29.7-32.1 without, in 4 alternating
/// runs).
pub fn set_rcvlowat(socket: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        &value,
    )
}

/// The CPU whose network stack handled the socket's most recent packet (SO_INCOMING_CPU):
/// with RSS, the CPU of the queue the flow hashes to; across veth or loopback, the CPU that
/// sent it.
pub fn incoming_cpu(socket: &impl AsRawFd) -> io::Result<u32> {
    let cpu = getsockopt_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_INCOMING_CPU)?;
    u32::try_from(cpu).map_err(|_| io::Error::other(format!("SO_INCOMING_CPU gave {cpu}")))
}

/// Caps the socket's sending rate (SO_MAX_PACING_RATE, bytes per second). Enforced by the fq
/// qdisc where the interface has one, else by TCP's internal pacing (Linux 4.13 and later).
pub fn set_pacing(socket: &impl AsRawFd, mbit: u32) -> io::Result<()> {
    let bytes_per_sec = u64::from(mbit) * 125_000;
    let fd = socket.as_raw_fd();
    // The option took a u32 before Linux 5.0 (u64 since); a u32 works on every kernel.
    match u32::try_from(bytes_per_sec) {
        Ok(rate) => setsockopt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &rate),
        Err(_) => setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &bytes_per_sec,
        ),
    }
}

/// The TCP_INFO figures the probes report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpStats {
    /// tcpi_total_retrans: segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// tcpi_rtt: smoothed round-trip time, microseconds.
    pub rtt_us: u32,
}

/// Reads TCP_INFO.
pub fn tcp_stats(socket: &impl AsRawFd) -> io::Result<TcpStats> {
    // SAFETY: tcp_info is plain integers: all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: info and len are live locals; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    })?;
    // tcpi_total_retrans ends at byte 104; older kernels may return less.
    if (len as usize) < 104 {
        return Err(io::Error::other(format!(
            "TCP_INFO returned {len} bytes, too few for tcpi_total_retrans"
        )));
    }
    Ok(TcpStats {
        total_retrans: info.tcpi_total_retrans,
        rtt_us: info.tcpi_rtt,
    })
}

/// One non-blocking receive into `buf` (MSG_DONTWAIT): Ok(None) when nothing is waiting,
/// Ok(Some(0)) at end of stream.
pub fn recv_nowait(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is a live, writable slice of the length passed.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let err = io::Error::last_os_error();
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(err),
    }
}

/// shutdown(SHUT_RDWR), for sockets std cannot shut down (UDP). On Linux it wakes a thread
/// blocked receiving on the socket, also an unconnected UDP one (its recv then returns at once,
/// for good); the error that an unconnected socket reports (ENOTCONN) is expected and ignored.
pub fn shutdown(socket: &impl AsRawFd) {
    // SAFETY: plain shutdown(2) on a descriptor the caller owns.
    unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
}

/// Waits until one of the sockets is ready for what is asked (`events`: POLLIN, POLLOUT) or
/// `timeout` passes; returns which are ready (`revents`), all zero on timeout.
pub fn poll2(fds: [(RawFd, libc::c_short); 2], timeout: Duration) -> io::Result<[bool; 2]> {
    let mut pollfds = fds.map(|(fd, events)| libc::pollfd {
        fd,
        events,
        revents: 0,
    });
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: pollfds is a live array of the length passed.
    let ret = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, ms) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok([false; 2]);
        }
        return Err(err);
    }
    Ok(pollfds.map(|p| p.revents != 0))
}

/// Waits until one of `fds` is ready or `timeout` passes: false only when the time ran out (a
/// signal returns true early, and the caller simply tries again). Allocates nothing: the
/// caller keeps the array.
pub fn poll_all(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<bool> {
    for p in fds.iter_mut() {
        p.revents = 0;
    }
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: fds is a live, writable slice of the length passed.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(true);
        }
        return Err(err);
    }
    Ok(ret > 0)
}

/// Waits until `fd` is readable or `timeout` passes.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    Ok(poll2([(fd, libc::POLLIN), (-1, 0)], timeout)?[0])
}

/// Whether fq paces the traffic a socket from `local` to `peer` sends: Some(true) when the
/// interface it leaves by has an fq qdisc, Some(false) when it has another (TCP then paces
/// itself), None when that cannot be told.
///
/// The interface is the one that holds `local`, or loopback when `peer` is an address of
/// this host (the kernel then routes through lo whatever interface holds it).
pub fn fq_paces(local: IpAddr, peer: IpAddr) -> Option<bool> {
    let addresses = interface_addresses().ok()?;
    let local_peer = peer.is_loopback() || addresses.iter().any(|(_, ip)| *ip == peer);
    let interface = if local_peer {
        addresses
            .iter()
            .find(|(_, ip)| ip.is_loopback())
            .map(|(name, _)| name.clone())?
    } else {
        addresses
            .iter()
            .find(|(_, ip)| *ip == local)
            .map(|(name, _)| name.clone())?
    };
    let name = std::ffi::CString::new(interface).ok()?;
    // SAFETY: name is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return None;
    }
    let kinds = qdisc_kinds(index as i32).ok()?;
    if kinds.is_empty() {
        return None;
    }
    Some(kinds.iter().any(|k| k == "fq"))
}

/// Every (interface, address) of this host, from getifaddrs.
fn interface_addresses() -> io::Result<Vec<(String, IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    check(unsafe { libc::getifaddrs(&raw mut head) })?;
    let mut out = Vec::new();
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: cursor is a node of the list getifaddrs returned, not yet freed.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_addr.is_null() || entry.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let ip = unsafe {
            match i32::from((*entry.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*entry.ifa_addr.cast::<libc::sockaddr_in>();
                    IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    let sin6 = &*entry.ifa_addr.cast::<libc::sockaddr_in6>();
                    IpAddr::from(sin6.sin6_addr.s6_addr)
                }
                _ => continue,
            }
        };
        // SAFETY: ifa_name is a non-null NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) };
        out.push((name.to_string_lossy().into_owned(), ip));
    }
    // SAFETY: head came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The kinds of every qdisc on interface `ifindex` (root and children), from an rtnetlink
/// RTM_GETQDISC dump.
pub fn qdisc_kinds(ifindex: i32) -> io::Result<Vec<String>> {
    // SAFETY: plain socket(2); the descriptor is owned by the OwnedFd right after.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        &timeout,
    )?;
    // nlmsghdr (16 bytes) + tcmsg (20 bytes, all zero: every family and interface).
    let mut request = [0u8; 36];
    request[0..4].copy_from_slice(&36u32.to_ne_bytes());
    request[4..6].copy_from_slice(&libc::RTM_GETQDISC.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    request[6..8].copy_from_slice(&flags.to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: request is a live buffer of the length passed; the kernel only reads it.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 << 10];
    let mut kinds = Vec::new();
    loop {
        // SAFETY: buf is a live, writable buffer of the length passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        match parse_qdisc_dump(&buf[..n as usize], ifindex, &mut kinds) {
            DumpPart::More => {}
            DumpPart::Done => return Ok(kinds),
            DumpPart::Error(errno) => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// What one datagram of a netlink dump said.
#[derive(Debug, PartialEq, Eq)]
pub enum DumpPart {
    /// More datagrams follow.
    More,
    /// NLMSG_DONE seen (or the datagram was malformed: stop reading).
    Done,
    /// NLMSG_ERROR with this errno.
    Error(i32),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends the TCA_KIND of every RTM_NEWQDISC message for `ifindex` in one netlink datagram.
/// Bounds-checked throughout: a malformed datagram ends the dump rather than panicking.
pub fn parse_qdisc_dump(datagram: &[u8], ifindex: i32, kinds: &mut Vec<String>) -> DumpPart {
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const RTM_NEWQDISC: u16 = 36;
    const NLMSG_HDR: usize = 16;
    const TCMSG: usize = 20;
    let mut at = 0;
    while at + NLMSG_HDR <= datagram.len() {
        let len = u32_at(datagram, at) as usize;
        let kind = u16_at(datagram, at + 4);
        if len < NLMSG_HDR || at + len > datagram.len() {
            return DumpPart::Done;
        }
        let message = &datagram[at..at + len];
        match kind {
            NLMSG_DONE => return DumpPart::Done,
            NLMSG_ERROR => {
                let errno = if len >= NLMSG_HDR + 4 {
                    -(u32_at(message, NLMSG_HDR) as i32)
                } else {
                    libc::EIO
                };
                return if errno == 0 {
                    DumpPart::Done
                } else {
                    DumpPart::Error(errno)
                };
            }
            RTM_NEWQDISC if len >= NLMSG_HDR + TCMSG => {
                let index = u32_at(message, NLMSG_HDR + 4) as i32;
                let mut attr = NLMSG_HDR + TCMSG;
                while index == ifindex && attr + 4 <= len {
                    let attr_len = usize::from(u16_at(message, attr));
                    let attr_type = u16_at(message, attr + 2);
                    if attr_len < 4 || attr + attr_len > len {
                        break;
                    }
                    if attr_type == libc::TCA_KIND {
                        let value = &message[attr + 4..attr + attr_len];
                        let value = value.split(|&b| b == 0).next().unwrap_or_default();
                        kinds.push(String::from_utf8_lossy(value).into_owned());
                    }
                    attr += align4(attr_len);
                }
            }
            _ => {}
        }
        at += align4(len);
    }
    DumpPart::More
}

#[cfg(test)]
mod tests;
