//! NIC driver statistics (`ethtool -S`), and what EC2's ENA driver says in them about shaping.
//!
//! EC2 caps each instance's bandwidth, packets per second, tracked connections and link-local
//! traffic. When a workload goes over one of these allowances, EC2 queues and then drops its
//! packets, and the ENA driver counts them in its statistics (`bw_in_allowance_exceeded`,
//! `pps_allowance_exceeded`…). A counter that grew during a trial means the result was capped by
//! EC2, not by the code under test: worth sampling at every interval boundary.
//!
//! The reader asks the kernel directly (the SIOCETHTOOL ioctl, as `ethtool -S` itself does)
//! rather than running the `ethtool` binary: no process per sample, no dependency on a package
//! that minimal AMIs leave out, and no text format to trust. [`parse_ethtool_s`] reads that text
//! format anyway, for tests: published ENA output is only available as text.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;
use serde::Serialize;

mod text;
pub use text::{EthtoolParseError, parse_ethtool_s};

/// A NIC's driver statistics in the driver's order: `(name, value)`. Names are the driver's own
/// and may repeat (a few drivers print the same name for two counters), so this is a list, not
/// a map.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NicStats {
    /// The statistics, in the order the driver reports them.
    pub entries: Vec<(String, u64)>,
}

impl NicStats {
    /// The value of the first statistic called `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// The statistics' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// How many statistics there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One of the network allowances EC2 enforces, each with its ENA "exceeded" counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Allowance {
    /// Inbound aggregate bandwidth of the instance.
    BandwidthIn,
    /// Outbound aggregate bandwidth of the instance.
    BandwidthOut,
    /// Packets per second, both directions, of the instance.
    PacketsPerSecond,
    /// Connections tracked by security groups, of the instance.
    Conntrack,
    /// Packets per second to link-local services (DNS, instance metadata, Time Sync), of the
    /// network interface.
    LinkLocal,
}

impl Allowance {
    /// Every allowance, in the ENA driver's order.
    pub const ALL: [Allowance; 5] = [
        Allowance::BandwidthIn,
        Allowance::BandwidthOut,
        Allowance::PacketsPerSecond,
        Allowance::Conntrack,
        Allowance::LinkLocal,
    ];

    /// The ENA statistic that counts packets shaped for this allowance.
    pub fn counter_name(self) -> &'static str {
        match self {
            Allowance::BandwidthIn => "bw_in_allowance_exceeded",
            Allowance::BandwidthOut => "bw_out_allowance_exceeded",
            Allowance::PacketsPerSecond => "pps_allowance_exceeded",
            Allowance::Conntrack => "conntrack_allowance_exceeded",
            Allowance::LinkLocal => "linklocal_allowance_exceeded",
        }
    }

    /// What it means when the counter grows, in words for a report. Wording after AWS's
    /// "Monitor network performance for ENA settings on your EC2 instance".
    pub fn meaning(self) -> &'static str {
        match self {
            Allowance::BandwidthIn => {
                "inbound bandwidth above the instance's allowance: EC2 queued or dropped packets"
            }
            Allowance::BandwidthOut => {
                "outbound bandwidth above the instance's allowance: EC2 queued or dropped packets"
            }
            Allowance::PacketsPerSecond => {
                "packets per second (both directions) above the instance's allowance: EC2 \
                 queued or dropped packets"
            }
            Allowance::Conntrack => {
                "more connections than the instance can track (security groups): EC2 dropped \
                 packets and new connections could not be established"
            }
            Allowance::LinkLocal => {
                "packets per second to link-local services (Amazon DNS, instance metadata, Time \
                 Sync) above the interface's allowance: EC2 dropped packets"
            }
        }
    }
}

/// The ENA driver's allowance counters at one instant. Each is `None` where the driver does not
/// report it (older drivers have some of them, not all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EnaAllowances {
    /// Packets shaped since the last driver reset: inbound bandwidth allowance exceeded.
    pub bw_in_allowance_exceeded: Option<u64>,
    /// Packets shaped since the last driver reset: outbound bandwidth allowance exceeded.
    pub bw_out_allowance_exceeded: Option<u64>,
    /// Packets shaped since the last driver reset: PPS allowance exceeded.
    pub pps_allowance_exceeded: Option<u64>,
    /// Packets shaped since the last driver reset: connection-tracking allowance exceeded.
    pub conntrack_allowance_exceeded: Option<u64>,
    /// Packets shaped since the last driver reset: link-local PPS allowance exceeded.
    pub linklocal_allowance_exceeded: Option<u64>,
    /// Tracked connections the instance can still open (a level, not a counter; Nitro
    /// instances, ENA 2.8.1 and later).
    pub conntrack_allowance_available: Option<u64>,
}

impl EnaAllowances {
    /// The "exceeded" counter of `allowance`.
    pub fn exceeded(&self, allowance: Allowance) -> Option<u64> {
        match allowance {
            Allowance::BandwidthIn => self.bw_in_allowance_exceeded,
            Allowance::BandwidthOut => self.bw_out_allowance_exceeded,
            Allowance::PacketsPerSecond => self.pps_allowance_exceeded,
            Allowance::Conntrack => self.conntrack_allowance_exceeded,
            Allowance::LinkLocal => self.linklocal_allowance_exceeded,
        }
    }
}

/// The ENA allowance counters in `stats`; `None` when it has none of them (not ENA, or an ENA
/// driver older than 2.2.10, which had none).
pub fn ena_allowances(stats: &NicStats) -> Option<EnaAllowances> {
    let a = EnaAllowances {
        bw_in_allowance_exceeded: stats.get(Allowance::BandwidthIn.counter_name()),
        bw_out_allowance_exceeded: stats.get(Allowance::BandwidthOut.counter_name()),
        pps_allowance_exceeded: stats.get(Allowance::PacketsPerSecond.counter_name()),
        conntrack_allowance_exceeded: stats.get(Allowance::Conntrack.counter_name()),
        linklocal_allowance_exceeded: stats.get(Allowance::LinkLocal.counter_name()),
        conntrack_allowance_available: stats.get("conntrack_allowance_available"),
    };
    (a != EnaAllowances::default()).then_some(a)
}

/// Packets EC2 shaped between two samples of the same NIC, per allowance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnaAllowancesExceeded {
    /// Packets shaped per allowance in the interval; `None` where a sample lacks the counter.
    /// After a driver reset (the counter went down) this is the value after the reset: a lower
    /// bound, since everything counted after the reset happened in the interval.
    pub packets: Vec<(Allowance, Option<u64>)>,
    /// Allowances whose counter went down (the driver or device was reset in the interval).
    pub reset: Vec<Allowance>,
    /// Tracked connections still available at the end of the interval.
    pub conntrack_allowance_available: Option<u64>,
}

impl EnaAllowancesExceeded {
    /// Whether EC2 shaped any packet in the interval.
    pub fn any_grew(&self) -> bool {
        self.packets.iter().any(|(_, n)| n.is_some_and(|n| n > 0))
    }

    /// The allowances EC2 enforced in the interval, with the packets shaped.
    pub fn grown(&self) -> Vec<(Allowance, u64)> {
        self.packets
            .iter()
            .filter_map(|&(a, n)| n.filter(|&n| n > 0).map(|n| (a, n)))
            .collect()
    }

    /// One line per allowance exceeded in the interval, for a report: the counter, the packets,
    /// and what it means. Empty when none grew.
    pub fn describe(&self) -> Vec<String> {
        self.grown()
            .into_iter()
            .map(|(a, n)| {
                let at_least = if self.reset.contains(&a) {
                    "at least "
                } else {
                    ""
                };
                format!(
                    "{}: {at_least}{n} packets shaped: {}",
                    a.counter_name(),
                    a.meaning()
                )
            })
            .collect()
    }
}

/// What EC2 shaped between two samples of the same NIC's allowances.
pub fn allowances_between(before: &EnaAllowances, after: &EnaAllowances) -> EnaAllowancesExceeded {
    let mut reset = Vec::new();
    let packets = Allowance::ALL
        .iter()
        .map(|&a| {
            let n = match (before.exceeded(a), after.exceeded(a)) {
                (Some(b), Some(x)) if x >= b => Some(x - b),
                (Some(_), Some(x)) => {
                    reset.push(a);
                    Some(x)
                }
                _ => None,
            };
            (a, n)
        })
        .collect();
    EnaAllowancesExceeded {
        packets,
        reset,
        conntrack_allowance_available: after.conntrack_allowance_available,
    }
}

/// Reading a NIC's driver statistics failed.
#[derive(Debug, thiserror::Error)]
pub enum EthtoolError {
    /// The name does not fit the kernel's interface-name field.
    #[error(
        "interface name {name:?} is {} bytes long; Linux interface names are at most {} bytes",
        name.len(),
        IFNAMSIZ - 1
    )]
    NameTooLong {
        /// The name given.
        name: String,
    },
    /// The name is empty or holds a NUL byte.
    #[error("{name:?} is not an interface name: it is empty or holds a NUL byte")]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// No interface has that name in the calling thread's network namespace.
    #[error("no network interface {ifname:?} in this network namespace (`ip -o link` lists them)")]
    NoSuchInterface {
        /// The interface name.
        ifname: String,
    },
    /// The driver has no statistics: `ethtool -S` says "no stats available" (loopback, and
    /// drivers without `get_ethtool_stats`).
    #[error(
        "{ifname}: the driver has no statistics (`ethtool -S {ifname}` says \"no stats \
         available\"); loopback and some virtual interfaces have none"
    )]
    NoDriverStatistics {
        /// The interface name.
        ifname: String,
    },
    /// The driver's number of statistics changed during every attempt: the NIC is being
    /// reconfigured (`ethtool -L` changing its queues, a device reset).
    #[error(
        "{ifname}: the number of driver statistics changed during each of {attempts} reads \
         (the NIC is being reconfigured, e.g. its queues); read again later"
    )]
    CountChanged {
        /// The interface name.
        ifname: String,
        /// Reads attempted.
        attempts: u32,
    },
    /// The socket that carries the ioctl could not be opened.
    #[error("cannot open an AF_INET datagram socket for SIOCETHTOOL: {0}")]
    Socket(#[source] io::Error),
    /// The kernel refused an ethtool request for another reason.
    #[error("{ifname}: SIOCETHTOOL {request} failed: {source}")]
    Ioctl {
        /// The interface name.
        ifname: String,
        /// The ethtool command (`ETHTOOL_GSTATS`…).
        request: &'static str,
        /// The error the kernel returned.
        #[source]
        source: io::Error,
    },
}

/// Reads the driver statistics of `ifname` in the calling thread's network namespace.
pub fn read_nic_stats(ifname: &str) -> Result<NicStats, EthtoolError> {
    let mut stats = NicStats::default();
    NicStatsReader::open(ifname)?.read_into(&mut stats)?;
    Ok(stats)
}

// From /usr/include/linux/ethtool.h, sockios.h and if.h (linux-libc-dev 6.1). The libc crate
// has SIOCETHTOOL and IFNAMSIZ but none of the ethtool commands or structures.
const ETHTOOL_GSTRINGS: u32 = 0x0000_001b;
const ETHTOOL_GSTATS: u32 = 0x0000_001d;
const ETHTOOL_GSSET_INFO: u32 = 0x0000_0037;
/// `enum ethtool_stringset`: the names that go with ETHTOOL_GSTATS.
const ETH_SS_STATS: u32 = 1;
/// Each name is NUL-padded to this size, and not NUL-terminated when it fills it.
const ETH_GSTRING_LEN: usize = 32;
const IFNAMSIZ: usize = libc::IFNAMSIZ;
/// `struct ethtool_gstrings` before its `data[]`: cmd, string_set, len.
const GSTRINGS_HEADER: usize = 12;
/// Attempts before [`EthtoolError::CountChanged`].
const ATTEMPTS: u32 = 4;

/// `struct ethtool_sset_info` asking for one string set: the kernel writes the header and one
/// `u32` count after it.
#[repr(C)]
#[derive(Debug, Default)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// Room for how many statistics a driver reporting `count` of them gets. Each of the three
/// calls asks the driver for its count afresh, and a NIC reconfigured between them (queues
/// changed with `ethtool -L`, a device reset) has a new one. Kernels since commit 7b07be1ff1cb
/// ("ethtool: Avoid overflowing userspace buffer on stats query", 6.19; in the stable series
/// from 6.18.3, and queued for 5.15) then write nothing and report a length of 0, which is why
/// we pass the exact count, not the room we have. Older kernels write as many entries as the
/// driver has now, whatever length we pass (net/ethtool/ioctl.c, `ethtool_get_strings` and
/// `ethtool_get_stats`), so an exact-size buffer would be overrun. Twice as many plus 64 covers
/// any queue change between two system calls; the length the kernel reports is checked after
/// each call, and a read whose lengths disagree is started again.
fn capacity_for(count: usize) -> usize {
    count.saturating_mul(2).saturating_add(64)
}

/// Reads one NIC's driver statistics again and again, reusing its socket and buffers: after the
/// first read, a read allocates nothing unless the driver's statistics change. For the agent's
/// supervisor thread, which samples every interval.
///
/// The socket belongs to the network namespace of the thread that opened the reader; reads go
/// to the interface of that name in that namespace.
#[derive(Debug)]
pub struct NicStatsReader {
    ifname: String,
    socket: OwnedFd,
    /// `struct ethtool_gstrings` and its names, as bytes (its fields are written and read with
    /// `to_ne_bytes`, so the buffer needs no alignment).
    strings: Vec<u8>,
    /// `struct ethtool_stats` and its values: element 0 holds `cmd` and `n_stats`.
    values: Vec<u64>,
}

impl NicStatsReader {
    /// Checks the name and opens the socket. The interface is not looked up until the first
    /// read.
    pub fn open(ifname: &str) -> Result<Self, EthtoolError> {
        if ifname.is_empty() || ifname.contains('\0') {
            return Err(EthtoolError::InvalidName {
                name: ifname.to_string(),
            });
        }
        if ifname.len() >= IFNAMSIZ {
            return Err(EthtoolError::NameTooLong {
                name: ifname.to_string(),
            });
        }
        // ethtool(8) uses the same socket; any socket works, the ioctl names the interface.
        // SAFETY: socket(2) with constant arguments has no memory-safety preconditions.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(EthtoolError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by socket(2), is open, and nothing else owns it.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            ifname: ifname.to_string(),
            socket,
            strings: Vec::new(),
            values: Vec::new(),
        })
    }

    /// The interface this reader reads.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Reads the statistics into `out`, replacing what it held. When the driver reports the
    /// same names as `out` already holds (every read after the first, usually), only the values
    /// are written and nothing is allocated.
    pub fn read_into(&mut self, out: &mut NicStats) -> Result<(), EthtoolError> {
        for _ in 0..ATTEMPTS {
            let count = self.stats_count()?;
            self.reserve(count);
            let names = self.read_strings(count)?;
            let values = self.read_values(count)?;
            if names == count && values == count {
                self.decode_into(count, out);
                return Ok(());
            }
            // The driver's count changed between two of the three calls: start again.
        }
        Err(EthtoolError::CountChanged {
            ifname: self.ifname.clone(),
            attempts: ATTEMPTS,
        })
    }

    /// ETHTOOL_GSSET_INFO for ETH_SS_STATS: how many statistics the driver has now.
    fn stats_count(&mut self) -> Result<usize, EthtoolError> {
        let mut info = SsetInfo {
            cmd: ETHTOOL_GSSET_INFO,
            sset_mask: 1 << ETH_SS_STATS,
            ..SsetInfo::default()
        };
        let ptr = std::ptr::from_mut(&mut info).cast::<libc::c_char>();
        // The kernel writes the 16-byte header and one u32 per string set asked for (one):
        // exactly size_of::<SsetInfo>() less its padding.
        self.ioctl("ETHTOOL_GSSET_INFO", ptr)?;
        let count = usize::try_from(info.data[0]).unwrap_or(usize::MAX);
        // A driver without a stats set clears its bit; one with zero statistics has nothing
        // to report either (ethtool prints "no stats available" for both).
        if info.sset_mask & (1 << ETH_SS_STATS) == 0 || count == 0 {
            return Err(self.no_statistics());
        }
        Ok(count)
    }

    /// Makes both buffers hold `capacity_for(count)` entries, zeroed.
    fn reserve(&mut self, count: usize) {
        let capacity = capacity_for(count);
        let strings_len = GSTRINGS_HEADER + capacity * ETH_GSTRING_LEN;
        if self.strings.len() < strings_len {
            self.strings = vec![0; strings_len];
        }
        if self.values.len() < 1 + capacity {
            self.values = vec![0; 1 + capacity];
        }
    }

    /// Entries the buffers have room for.
    fn capacity(&self) -> usize {
        let strings = (self.strings.len() - GSTRINGS_HEADER) / ETH_GSTRING_LEN;
        strings.min(self.values.len() - 1)
    }

    /// ETHTOOL_GSTRINGS for ETH_SS_STATS into `self.strings`, expecting `count` names; returns
    /// the number of names the kernel wrote (0 from newer kernels when the driver no longer
    /// has `count`).
    fn read_strings(&mut self, count: usize) -> Result<usize, EthtoolError> {
        let capacity = self.capacity();
        // The exact count, not the room: newer kernels write nothing unless it matches.
        let expected = u32::try_from(count).unwrap_or(u32::MAX);
        self.strings[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        self.strings[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        self.strings[8..12].copy_from_slice(&expected.to_ne_bytes());
        let ptr = self.strings.as_mut_ptr().cast::<libc::c_char>();
        self.ioctl("ETHTOOL_GSTRINGS", ptr)?;
        let len = u32::from_ne_bytes([
            self.strings[8],
            self.strings[9],
            self.strings[10],
            self.strings[11],
        ]);
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        check_room("ETHTOOL_GSTRINGS", len, capacity);
        Ok(len)
    }

    /// ETHTOOL_GSTATS into `self.values`, expecting `count` values; returns the number of
    /// values the kernel wrote (0 from newer kernels when the driver no longer has `count`).
    fn read_values(&mut self, count: usize) -> Result<usize, EthtoolError> {
        let capacity = self.capacity();
        let expected = u32::try_from(count).unwrap_or(u32::MAX);
        self.values[0] = header(ETHTOOL_GSTATS, expected);
        let ptr = self.values.as_mut_ptr().cast::<libc::c_char>();
        self.ioctl("ETHTOOL_GSTATS", ptr)?;
        let n = self.values[0].to_ne_bytes();
        let n = u32::from_ne_bytes([n[4], n[5], n[6], n[7]]);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        check_room("ETHTOOL_GSTATS", n, capacity);
        Ok(n)
    }

    /// Copies `count` names and values from the buffers into `out`, allocating only where a
    /// name differs from the one `out` holds at that position.
    fn decode_into(&self, count: usize, out: &mut NicStats) {
        out.entries.truncate(count);
        let slots = self.strings[GSTRINGS_HEADER..].chunks_exact(ETH_GSTRING_LEN);
        for (i, (slot, &value)) in slots.zip(&self.values[1..]).take(count).enumerate() {
            let name = slot.split(|&b| b == 0).next().unwrap_or_default();
            match out.entries.get_mut(i) {
                Some(entry) if entry.0.as_bytes() == name => entry.1 = value,
                Some(entry) => *entry = (String::from_utf8_lossy(name).into_owned(), value),
                None => out
                    .entries
                    .push((String::from_utf8_lossy(name).into_owned(), value)),
            }
        }
    }

    /// SIOCETHTOOL with `data` as `ifr_data`. `data` must point at a live buffer, with the
    /// command's header filled in, large enough for what the command writes (each caller says
    /// why it is).
    fn ioctl(&self, request: &'static str, data: *mut libc::c_char) -> Result<(), EthtoolError> {
        // SAFETY: `ifreq` is plain old data (byte arrays, integers, a raw pointer and a union of
        // those), for which all-zero bytes are a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, &src) in ifr.ifr_name.iter_mut().zip(self.ifname.as_bytes()) {
            *dst = src as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = data;
        // SAFETY: the socket is open for the reader's lifetime; `ifr` is a valid ifreq whose name
        // is NUL-terminated (shorter than IFNAMSIZ, checked in `open`) and which lives across
        // the call; `data` points at a live buffer the caller sized for the command: the
        // GSSET_INFO struct on its stack, or this reader's `strings`/`values`, which the kernel
        // overruns only if a driver's statistics more than double between two of our calls (see
        // `capacity_for`; `check_room` stops the process if it ever did).
        let rc = unsafe {
            libc::ioctl(
                self.socket.as_raw_fd(),
                libc::SIOCETHTOOL as libc::Ioctl,
                &raw mut ifr,
            )
        };
        if rc >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        Err(match err.raw_os_error() {
            Some(libc::ENODEV) => EthtoolError::NoSuchInterface {
                ifname: self.ifname.clone(),
            },
            Some(libc::EOPNOTSUPP) => self.no_statistics(),
            _ => EthtoolError::Ioctl {
                ifname: self.ifname.clone(),
                request,
                source: err,
            },
        })
    }

    fn no_statistics(&self) -> EthtoolError {
        EthtoolError::NoDriverStatistics {
            ifname: self.ifname.clone(),
        }
    }
}

/// The first 8 bytes of `struct ethtool_stats`, `cmd` then `n_stats`, as the u64 that holds them
/// in memory.
fn header(cmd: u32, n: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&cmd.to_ne_bytes());
    bytes[4..].copy_from_slice(&n.to_ne_bytes());
    u64::from_ne_bytes(bytes)
}

/// Stops the process if the kernel reports writing more entries than the buffer holds: it has
/// then already written past the buffer (kernels without the fix named in `capacity_for`), the
/// heap is corrupt, and unwinding through it would be undefined behaviour. Not expected ever
/// to happen: it takes a driver whose statistics more than double between two system calls.
fn check_room(request: &str, written: usize, capacity: usize) {
    if written > capacity {
        eprintln!(
            "quietbench: SIOCETHTOOL {request} wrote {written} entries into a buffer of \
             {capacity}: the NIC's statistics grew between two calls; memory is corrupt, \
             aborting"
        );
        std::process::abort();
    }
}

#[cfg(test)]
mod tests;
