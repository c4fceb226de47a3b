//! What machine quietbench runs on.
//!
//! Two engineers timing the same code on two "identical" cloud instances can be fooled by the
//! machines: one instance type ships with different CPUs, clocksources differ, kernels differ.
//! This crate reads what the machine is, so every result can be split by it.
//!
//! Every OS-facing piece is split in two: a pure `parse_*(&str)` function, tested on files captured
//! from real machines (tests/fixtures), and a thin reader that takes a root directory, so tests
//! point it at a fixture tree instead of `/`.

pub mod cpuinfo;
pub mod cpulist;
pub mod device_noise;
pub mod devices;
pub mod ebs_nvme;
pub mod ethtool;
pub mod fingerprint;
pub mod imds;
pub mod input;
pub mod interrupts;
pub mod journal;
pub mod kernel;
pub mod noise;
mod proc_table;
pub mod procstat;
mod root;
pub mod smaps;
pub mod sockets;
#[cfg(test)]
mod test_fixtures;
pub mod topology;
pub mod tuning;

pub use cpuinfo::{CpuIdentity, parse_cpuinfo};
pub use cpulist::{CpuListError, format_cpu_list, parse_cpu_list};
pub use fingerprint::{Fingerprint, read_fingerprint};
pub use root::{HostRoot, ReadError};
