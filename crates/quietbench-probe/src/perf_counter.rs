//! Retired instructions of a child process, in user mode, through perf_event_open(2): the
//! figure with almost no machine noise. A neighbour that steals the CPU, a slower clock or a
//! cold cache changes how long the instructions take, not how many retire.
//!
//! Only where the CPU's performance counters are exposed: bare metal and the larger Nitro sizes
//! do; most VMs (this project's KVM guest among them) have no virtual PMU, and the kernel then
//! has no `cpu` event source (`/sys/bus/event_source/devices/cpu`). [`check_available`] says
//! which, in words a user can act on, before anything is measured; nothing ever reads as zero.
//!
//! The counter follows the child from its exec (`enable_on_exec`), so the fork and the
//! exec's own work in the parent are not counted, and includes the child's own children
//! (`inherit`): a command that is a shell script counts what it runs.
//!
//! Hand-written rather than through a perf crate: one event, one syscall, one read; the
//! attribute layout is linux/perf_event.h's first published size (PERF_ATTR_SIZE_VER0, 64
//! bytes), which every kernel accepts.

use std::os::fd::{FromRawFd, OwnedFd};

/// PERF_TYPE_HARDWARE.
const TYPE_HARDWARE: u32 = 0;
/// PERF_COUNT_HW_INSTRUCTIONS.
const HW_INSTRUCTIONS: u64 = 1;
/// The attribute's bit flags (linux/perf_event.h, in declaration order from bit 0).
const DISABLED: u64 = 1 << 0;
const INHERIT: u64 = 1 << 1;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const ENABLE_ON_EXEC: u64 = 1 << 12;
/// PERF_FLAG_FD_CLOEXEC: the counter's descriptor must not leak into the measured command.
const FLAG_FD_CLOEXEC: nix::libc::c_ulong = 1 << 3;
/// The kernel's event source of the CPU's own counters, present only where they are exposed.
pub const CPU_EVENT_SOURCE: &str = "/sys/bus/event_source/devices/cpu";
/// Where the kernel says who may count.
const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

/// struct perf_event_attr up to PERF_ATTR_SIZE_VER0.
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// Why instructions cannot be counted here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retired instructions are not available on this machine: {0}")]
pub struct Unavailable(pub String);

/// An open counter of one process's user-mode instructions.
pub struct InstructionCounter {
    fd: OwnedFd,
}

fn open(pid: nix::libc::pid_t, flags: u64) -> std::io::Result<OwnedFd> {
    let attr = Attr {
        kind: TYPE_HARDWARE,
        size: std::mem::size_of::<Attr>() as u32,
        config: HW_INSTRUCTIONS,
        flags: flags | EXCLUDE_KERNEL | EXCLUDE_HV,
        ..Attr::default()
    };
    // SAFETY: perf_event_open reads `size` bytes of a valid, initialised attribute; the other
    // arguments are plain integers (cpu -1: wherever the process runs; no group).
    let fd = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_perf_event_open,
            &attr as *const Attr,
            pid,
            -1 as nix::libc::c_int,
            -1 as nix::libc::c_int,
            FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as nix::libc::c_int) })
}

/// Explains a failed perf_event_open in words a user can act on. Pure, so every branch is
/// tested: `has_cpu_source` is whether [`CPU_EVENT_SOURCE`] exists, `paranoid` the content of
/// perf_event_paranoid.
pub fn explain(error: &std::io::Error, has_cpu_source: bool, paranoid: Option<&str>) -> String {
    let errno = error.raw_os_error().unwrap_or(0);
    if !has_cpu_source || errno == nix::libc::ENOENT || errno == nix::libc::EOPNOTSUPP {
        return format!(
            "the CPU's performance counters are not exposed ({CPU_EVENT_SOURCE} {}; \
             perf_event_open: {error}). Virtual machines without a virtual PMU have none; bare \
             metal and the larger Nitro sizes do. Use --figure cpu, which a neighbour's steal \
             does not move either",
            if has_cpu_source {
                "exists"
            } else {
                "is missing"
            }
        );
    }
    if errno == nix::libc::EACCES || errno == nix::libc::EPERM {
        return format!(
            "perf_event_open was refused ({error}); {PARANOID} is {}: run the agent as root, or \
             allow user-mode counting with `sysctl -w kernel.perf_event_paranoid=2`",
            paranoid.map(str::trim).unwrap_or("unreadable")
        );
    }
    format!("perf_event_open failed: {error}")
}

/// Whether this process may count retired instructions: opens and closes a counter on itself.
pub fn check_available() -> Result<(), Unavailable> {
    open(0, DISABLED).map(drop).map_err(|e| {
        let has_source = std::path::Path::new(CPU_EVENT_SOURCE).exists();
        let paranoid = std::fs::read_to_string(PARANOID).ok();
        Unavailable(explain(&e, has_source, paranoid.as_deref()))
    })
}

impl InstructionCounter {
    /// Attaches a counter to `child`, which must not have exec'd yet: it starts counting at the
    /// child's exec and follows the child's own children.
    pub fn attach(child: nix::libc::pid_t) -> std::io::Result<Self> {
        open(child, DISABLED | INHERIT | ENABLE_ON_EXEC).map(|fd| Self { fd })
    }

    /// The count so far: after the child was reaped, its whole count.
    pub fn read(&self) -> std::io::Result<u64> {
        use std::os::fd::AsRawFd;
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a valid u64 from a descriptor we own.
        let n = unsafe {
            nix::libc::read(
                self.fd.as_raw_fd(),
                (&mut value as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if n == std::mem::size_of::<u64>() as isize {
            Ok(value)
        } else if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Err(std::io::Error::other(format!(
                "a short read of the counter ({n} bytes)"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_has_the_first_published_size() {
        assert_eq!(std::mem::size_of::<Attr>(), 64);
    }

    #[test]
    fn explanations_say_what_to_do() {
        let enoent = std::io::Error::from_raw_os_error(nix::libc::ENOENT);
        let text = explain(&enoent, false, Some("2\n"));
        assert!(
            text.contains("is missing") && text.contains("--figure cpu"),
            "{text}"
        );
        let eacces = std::io::Error::from_raw_os_error(nix::libc::EACCES);
        let text = explain(&eacces, true, Some("3\n"));
        assert!(text.contains("perf_event_paranoid is 3"), "{text}");
        assert!(text.contains("sysctl -w"), "{text}");
        let einval = std::io::Error::from_raw_os_error(nix::libc::EINVAL);
        assert!(explain(&einval, true, None).starts_with("perf_event_open failed"));
    }

    /// Here (no `cpu` event source) the check must fail with the explanation; where the
    /// source exists it must succeed. (exec's tests count a real child's instructions.)
    #[test]
    fn the_check_agrees_with_the_event_source() {
        let has_source = std::path::Path::new(CPU_EVENT_SOURCE).exists();
        match check_available() {
            Err(Unavailable(why)) => {
                println!("no counter here: {why}");
                if !has_source {
                    assert!(why.contains("is missing"), "{why}");
                } else {
                    // A PMU is exposed but counting was refused: the reason must name the fix.
                    assert!(why.contains("perf_event"), "{why}");
                }
            }
            Ok(()) => assert!(has_source, "a counter opened without a cpu event source"),
        }
    }
}
