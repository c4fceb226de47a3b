//! The machine's fingerprint: what every result is reported against.

use serde::Serialize;

use crate::{CpuIdentity, HostRoot, parse_cpu_list, parse_cpuinfo};

/// What machine this is. Fields that could not be read are `None` (or empty) and explained in
/// `unreadable`; a fingerprint never invents a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    /// The processor, from /proc/cpuinfo.
    pub cpu: Option<CpuIdentity>,
    /// Online CPU ids, from /sys/devices/system/cpu/online.
    pub online_cpus: Vec<u32>,
    /// Kernel release, from /proc/sys/kernel/osrelease.
    pub kernel_release: Option<String>,
    /// Current clocksource (tsc, kvm-clock, xen, …).
    pub clocksource: Option<String>,
    /// Host name, from /proc/sys/kernel/hostname.
    pub hostname: Option<String>,
    /// One line per file that could not be read or parsed: which, and why.
    pub unreadable: Vec<String>,
}

const CPUINFO: &str = "/proc/cpuinfo";
const ONLINE: &str = "/sys/devices/system/cpu/online";
const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
const HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// Reads the fingerprint below `root`. Never fails: what cannot be read is listed in
/// `unreadable`, so a partial fingerprint still travels with the results.
pub fn read_fingerprint(root: &HostRoot) -> Fingerprint {
    let mut unreadable = Vec::new();
    let mut read = |path: &str| match root.read(path) {
        Ok(text) => Some(text),
        Err(err) => {
            unreadable.push(err.to_string());
            None
        }
    };
    let cpuinfo = read(CPUINFO);
    let online = read(ONLINE);
    let kernel_release = read(OSRELEASE).map(|s| s.trim().to_string());
    let clocksource = read(CLOCKSOURCE).map(|s| s.trim().to_string());
    let hostname = read(HOSTNAME).map(|s| s.trim().to_string());

    let cpu = cpuinfo.and_then(|text| match parse_cpuinfo(&text) {
        Ok(cpu) => Some(cpu),
        Err(err) => {
            unreadable.push(err.to_string());
            None
        }
    });
    let online_cpus = match online.as_deref().map(parse_cpu_list) {
        Some(Ok(cpus)) => cpus,
        Some(Err(err)) => {
            unreadable.push(format!("{ONLINE}: {err}"));
            Vec::new()
        }
        None => Vec::new(),
    };
    Fingerprint {
        cpu,
        online_cpus,
        kernel_release,
        clocksource,
        hostname,
        unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_fixtures::dev_vm;

    #[test]
    fn reads_the_development_vm_fixture_tree() {
        let fp = read_fingerprint(&dev_vm());
        assert_eq!(fp.unreadable, Vec::<String>::new());
        assert_eq!(fp.cpu.unwrap().model_name, "Intel(R) Xeon(R) Processor");
        assert_eq!(fp.online_cpus, vec![0, 1]);
        assert_eq!(fp.kernel_release.as_deref(), Some("6.18.44-fc-v470"));
        assert_eq!(fp.clocksource.as_deref(), Some("tsc"));
        assert!(fp.hostname.is_some_and(|h| !h.is_empty()));
    }

    #[test]
    fn a_missing_root_lists_every_file_instead_of_failing() {
        let fp = read_fingerprint(&HostRoot::at("/nonexistent/quietbench-root"));
        assert_eq!(fp.cpu, None);
        assert!(fp.online_cpus.is_empty());
        assert_eq!(fp.unreadable.len(), 5, "{:?}", fp.unreadable);
        assert!(fp.unreadable[0].contains("/proc/cpuinfo"));
    }

    #[test]
    fn reads_this_machine() {
        // The live reader on the machine running the tests: it must at least find the CPUs.
        let fp = read_fingerprint(&HostRoot::live());
        assert!(!fp.online_cpus.is_empty(), "{:?}", fp.unreadable);
        assert!(fp.cpu.is_some(), "{:?}", fp.unreadable);
    }
}
