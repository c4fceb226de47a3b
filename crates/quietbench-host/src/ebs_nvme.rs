//! Amazon EBS detailed performance statistics, read from the volume's NVMe device.
//!
//! A disk benchmark on an EBS volume can end up measuring the volume's provisioned limit, or the
//! instance's EBS limit, instead of the code under test. On Nitro instances each EBS volume counts
//! the microseconds during which demand exceeded either limit; sampled at interval boundaries
//! ([`read_ebs_stats`], then [`exceeded_between`]), those counters say whether an interval was
//! throttled by EBS.
//!
//! The statistics are a vendor-specific NVMe log page (Get Log Page, log id 0xD0) of 4096 bytes.
//! AWS does not publish the layout as a document; it is published as code, and this module follows
//! the CloudWatch agent's reader:
//!
//! - `aws/amazon-cloudwatch-agent`, `receiver/awsebsnvmereceiver/internal/nvme/metrics.go`
//!   (commit 3faef8dcd27e778d0713add4994492ec5bfa0b82) and `…/ebs_metrics.go` (commit
//!   eab6b5961e6fcf38d0b38fff26e7e94b7446ec1c): the `EBSMetrics` struct, decoded with Go's
//!   `binary.Read(…, binary.LittleEndian, …)`, and the ioctl that fetches it. That code says it
//!   is based on `kubernetes-sigs/aws-ebs-csi-driver`, `pkg/metrics/nvme.go`, which has the same
//!   struct and ioctl.
//!
//! Three other public readers agree on every offset: `amazonlinux/amazon-ec2-utils`, `ebsnvme`
//! (commit 066b044c89cd81c308dced9d9f2777711ecd5472, Python ctypes), `linux-nvme/nvme-cli`,
//! `plugins/amzn/amzn-nvme.c` (`nvme amzn stats`, `struct amzn_latency_log_page`), and
//! FreeBSD's `ebsnvme` tool (`struct nvme_amzn_stats_data`, which asserts the struct is 4096
//! bytes). They differ from the CloudWatch agent in the width of two fields, and this module
//! follows the CloudWatch agent in both:
//!
//! - the magic: the CloudWatch agent reads bytes 0–7 as one u64 and compares it with
//!   0x3C23B510; the others read a u32 at byte 0 followed by 4 reserved bytes. They agree
//!   whenever the reserved bytes are zero. The newest nvme-cli (`struct
//!   amzn_latency_log_page_base`) names bytes 4–7 `version` and shows per-I/O-size histograms
//!   when it is 1; a page with a non-zero version is refused here, as by the CloudWatch agent,
//!   and the error says so ([`EbsStatsError::BadMagic`]).
//! - a histogram bin's count: the CloudWatch agent reads a u64 at bin offset 16; the others read
//!   a u32 count followed by a u32 reserved. Same agreement.
//!
//! Instance-store NVMe volumes answer the same log page with another magic (0xEC2C0D7E in
//! nvme-cli and the CloudWatch agent) and another layout; they are refused, not decoded.
//!
//! All values are little-endian. Byte offsets (from the Go struct's field order, every field 8
//! bytes):
//!
//! | offset | field | unit |
//! | --- | --- | --- |
//! | 0 | magic, 0x3C23B510 | |
//! | 8, 16 | total read ops, total write ops | operations |
//! | 24, 32 | total read bytes, total write bytes | bytes |
//! | 40, 48 | total read time, total write time | µs |
//! | 56, 64 | `ebs_volume_performance_exceeded_iops`, `_tp` | µs |
//! | 72, 80 | `ec2_instance_ebs_performance_exceeded_iops`, `_tp` | µs |
//! | 88 | volume queue length (point in time) | operations |
//! | 96 | reserved, 416 bytes | |
//! | 512 | read latency histogram: bin count, then 64 bins of {lower, upper, count} | µs |
//! | 2056 | write latency histogram, same shape | µs |
//! | 3600 | reserved to the end of the 4096-byte page (496 bytes) | |

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use serde::Serialize;

/// The vendor-specific log page that holds the statistics.
pub const EBS_STATS_LOG_PAGE_ID: u8 = 0xD0;
/// What an EBS volume writes in the page's first 8 bytes (read as one little-endian u64, as the
/// CloudWatch agent does).
pub const EBS_STATS_MAGIC: u64 = 0x3C23_B510;
/// The size of the log page the device returns.
pub const EBS_STATS_LOG_PAGE_BYTES: usize = 4096;
/// The bytes of the page the layout uses: everything up to the end of the write histogram. Go's
/// `binary.Read` in the CloudWatch agent needs exactly these; the rest is reserved.
pub const EBS_STATS_USED_BYTES: usize = WRITE_HISTOGRAM + HISTOGRAM_BYTES;

/// Slots per histogram in the layout; `num_bins` says how many are in use.
const MAX_BINS: usize = 64;
/// One bin: lower, upper, count, each a u64.
const BIN_BYTES: usize = 24;
/// The bin count, then the bins.
const HISTOGRAM_BYTES: usize = 8 + MAX_BINS * BIN_BYTES;

// Byte offsets of the fields, in the order of the CloudWatch agent's `EBSMetrics` struct.
const MAGIC: usize = 0;
const READ_OPS: usize = 8;
const WRITE_OPS: usize = 16;
const READ_BYTES: usize = 24;
const WRITE_BYTES: usize = 32;
const READ_TIME: usize = 40;
const WRITE_TIME: usize = 48;
const VOLUME_EXCEEDED_IOPS: usize = 56;
const VOLUME_EXCEEDED_TP: usize = 64;
const INSTANCE_EXCEEDED_IOPS: usize = 72;
const INSTANCE_EXCEEDED_TP: usize = 80;
const QUEUE_LENGTH: usize = 88;
/// `ReservedArea [416]byte` follows the queue length.
const READ_HISTOGRAM: usize = QUEUE_LENGTH + 8 + 416;
const WRITE_HISTOGRAM: usize = READ_HISTOGRAM + HISTOGRAM_BYTES;

/// The statistics of one EBS volume at an instant: cumulative counters since the volume was
/// attached, the queue length at that instant, and cumulative latency histograms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EbsNvmeStats {
    /// Completed read operations.
    pub total_read_ops: u64,
    /// Completed write operations.
    pub total_write_ops: u64,
    /// Bytes read.
    pub total_read_bytes: u64,
    /// Bytes written.
    pub total_write_bytes: u64,
    /// Time spent by all completed reads, µs.
    pub total_read_time_us: u64,
    /// Time spent by all completed writes, µs.
    pub total_write_time_us: u64,
    /// Time during which IOPS demand exceeded the volume's provisioned IOPS, µs.
    pub ebs_volume_performance_exceeded_iops_us: u64,
    /// Time during which throughput demand exceeded the volume's provisioned throughput, µs.
    pub ebs_volume_performance_exceeded_tp_us: u64,
    /// Time during which the volume's IOPS demand exceeded the instance's EBS IOPS limit, µs.
    pub ec2_instance_ebs_performance_exceeded_iops_us: u64,
    /// Time during which the volume's throughput demand exceeded the instance's EBS throughput
    /// limit, µs.
    pub ec2_instance_ebs_performance_exceeded_tp_us: u64,
    /// Read and write operations waiting to complete, at the instant of the read (a gauge, not a
    /// counter).
    pub volume_queue_length_ops: u64,
    /// Read latency histogram.
    pub read_latency: EbsLatencyHistogram,
    /// Write latency histogram.
    pub write_latency: EbsLatencyHistogram,
}

/// A cumulative latency histogram as the volume reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EbsLatencyHistogram {
    /// The bins in use, in the device's order.
    pub bins: Vec<EbsLatencyBin>,
    /// The bin count the device wrote. The layout has room for 64 bins, so a larger count is
    /// clamped to 64 (as every public reader does) and kept here, so the clamp is visible
    /// rather than hidden: `bins.len() as u64 != declared_bins` means the page claimed more.
    pub declared_bins: u64,
}

/// One histogram bin: operations whose latency fell between the bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EbsLatencyBin {
    /// Lower bound, µs.
    pub lower_us: u64,
    /// Upper bound, µs.
    pub upper_us: u64,
    /// Operations in the bin.
    pub count: u64,
}

/// Why EBS statistics could not be read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum EbsStatsError {
    /// The page is shorter than the published layout.
    #[error(
        "the EBS statistics log page is {len} bytes, shorter than the {EBS_STATS_USED_BYTES} \
         bytes of the published layout: pass the whole {EBS_STATS_LOG_PAGE_BYTES}-byte page"
    )]
    Truncated {
        /// Bytes given.
        len: usize,
    },
    /// The page does not start with the EBS magic number (8 bytes, as the CloudWatch agent
    /// reads it).
    #[error(
        "log page 0xD0 starts with {found:#x}, not the EBS statistics magic \
         {EBS_STATS_MAGIC:#x}: {why}",
        why = magic_mismatch(*.found)
    )]
    BadMagic {
        /// The first 8 bytes, as a little-endian u64.
        found: u64,
    },
    /// The device node could not be opened.
    #[error(
        "cannot open {device} to read EBS statistics: {source}{hint}",
        hint = open_hint(.source)
    )]
    Open {
        /// The device node.
        device: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The device is not an NVMe device: its driver does not know the NVMe admin-command ioctl
    /// (a regular file, a virtio disk, a character device such as /dev/null).
    #[error(
        "{device} is not an NVMe device (the NVMe admin-command ioctl gave {errno}): EBS \
         statistics exist only on the NVMe block devices of EBS volumes on Nitro instances \
         (/dev/nvme<N>n<M>, model \"Amazon Elastic Block Store\")"
    )]
    NotNvme {
        /// The device node.
        device: PathBuf,
        /// What the ioctl gave.
        errno: Errno,
    },
    /// The kernel refused the admin command for lack of privilege.
    #[error(
        "not allowed to send NVMe admin commands to {device} ({errno}): reading EBS statistics \
         needs CAP_SYS_ADMIN; run the agent as root"
    )]
    PermissionDenied {
        /// The device node.
        device: PathBuf,
        /// What the ioctl gave.
        errno: Errno,
    },
    /// The ioctl failed for another reason.
    #[error(
        "the NVMe Get Log Page (0xD0) ioctl on {device} failed: {errno}{hint}",
        hint = ioctl_hint(*.errno)
    )]
    Ioctl {
        /// The device node.
        device: PathBuf,
        /// What the ioctl gave.
        errno: Errno,
    },
    /// The device completed the command with an NVMe error status: it has no log page 0xD0.
    #[error(
        "{device} rejected Get Log Page 0xD0 with NVMe status {status:#x}: it is an NVMe device \
         without EBS statistics (not an EBS volume, or an EBS volume on an instance or driver \
         that does not expose them)"
    )]
    NvmeStatus {
        /// The status the ioctl returned (the NVMe completion status field).
        status: i32,
        /// The device node.
        device: PathBuf,
    },
    /// The device returned log page 0xD0 without the EBS magic: another vendor's page, or
    /// another kind of Amazon NVMe device.
    #[error(
        "{device} answered log page 0xD0 with magic {found:#x}, not the EBS statistics magic \
         {EBS_STATS_MAGIC:#x}: {why}",
        why = magic_mismatch(*.found)
    )]
    NotEbs {
        /// The device node.
        device: PathBuf,
        /// The first 8 bytes of the page, as a little-endian u64.
        found: u64,
    },
}

fn open_hint(err: &std::io::Error) -> &'static str {
    match err.kind() {
        std::io::ErrorKind::PermissionDenied => {
            " (NVMe namespace nodes belong to root and the disk group: run the agent as root; \
             in a container, also give it the device)"
        }
        std::io::ErrorKind::NotFound => {
            " (pass the namespace node of an EBS volume, such as /dev/nvme1n1)"
        }
        _ => "",
    }
}

/// Why a page's first 8 bytes are not the EBS magic, in words.
fn magic_mismatch(found: u64) -> String {
    let (low, high) = (found & 0xFFFF_FFFF, found >> 32);
    if low == EBS_STATS_MAGIC {
        // nvme-cli's newer layout calls these bytes `version`.
        format!(
            "the EBS magic is there, but bytes 4-7 (reserved in the CloudWatch agent's layout, \
             `version` in newer nvme-cli) are {high}: a newer EBS statistics layout this reader \
             does not know; update quietbench"
        )
    } else if low == 0xEC2C_0D7E {
        "that is the instance-store magic: an instance-store volume, not an EBS volume".into()
    } else {
        "not an EBS volume".into()
    }
}

fn ioctl_hint(errno: Errno) -> &'static str {
    match errno {
        // Some non-NVMe disk drivers answer EINVAL, not ENOTTY, to ioctls they do not know.
        Errno::EINVAL => {
            " (the driver found the command malformed, or the device is not an NVMe device: \
             EBS volumes are the NVMe namespace nodes /dev/nvme<N>n1)"
        }
        _ => "; check that the volume is still attached and the NVMe driver is healthy (dmesg)",
    }
}

/// The little-endian u64 at `at`.
fn le_u64(bytes: &[u8], at: usize) -> Result<u64, EbsStatsError> {
    let field = bytes
        .get(at..at.saturating_add(8))
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .ok_or(EbsStatsError::Truncated { len: bytes.len() })?;
    Ok(u64::from_le_bytes(field))
}

fn decode_histogram(bytes: &[u8], at: usize) -> Result<EbsLatencyHistogram, EbsStatsError> {
    let declared_bins = le_u64(bytes, at)?;
    let used = usize::try_from(declared_bins).map_or(MAX_BINS, |n| n.min(MAX_BINS));
    let bins = (0..used)
        .map(|i| {
            let bin = at + 8 + i * BIN_BYTES;
            Ok(EbsLatencyBin {
                lower_us: le_u64(bytes, bin)?,
                upper_us: le_u64(bytes, bin + 8)?,
                count: le_u64(bytes, bin + 16)?,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(EbsLatencyHistogram {
        bins,
        declared_bins,
    })
}

/// Decodes an EBS statistics log page (log id 0xD0). Takes the whole 4096-byte page; only the
/// first [`EBS_STATS_USED_BYTES`] are read, and anything shorter is [`EbsStatsError::Truncated`].
/// A page without the EBS magic is [`EbsStatsError::BadMagic`]. Never panics.
pub fn decode_ebs_log_page(bytes: &[u8]) -> Result<EbsNvmeStats, EbsStatsError> {
    if bytes.len() < EBS_STATS_USED_BYTES {
        return Err(EbsStatsError::Truncated { len: bytes.len() });
    }
    let magic = le_u64(bytes, MAGIC)?;
    if magic != EBS_STATS_MAGIC {
        return Err(EbsStatsError::BadMagic { found: magic });
    }
    let at = |offset| le_u64(bytes, offset);
    Ok(EbsNvmeStats {
        total_read_ops: at(READ_OPS)?,
        total_write_ops: at(WRITE_OPS)?,
        total_read_bytes: at(READ_BYTES)?,
        total_write_bytes: at(WRITE_BYTES)?,
        total_read_time_us: at(READ_TIME)?,
        total_write_time_us: at(WRITE_TIME)?,
        ebs_volume_performance_exceeded_iops_us: at(VOLUME_EXCEEDED_IOPS)?,
        ebs_volume_performance_exceeded_tp_us: at(VOLUME_EXCEEDED_TP)?,
        ec2_instance_ebs_performance_exceeded_iops_us: at(INSTANCE_EXCEEDED_IOPS)?,
        ec2_instance_ebs_performance_exceeded_tp_us: at(INSTANCE_EXCEEDED_TP)?,
        volume_queue_length_ops: at(QUEUE_LENGTH)?,
        read_latency: decode_histogram(bytes, READ_HISTOGRAM)?,
        write_latency: decode_histogram(bytes, WRITE_HISTOGRAM)?,
    })
}

/// What one EBS volume did between two samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum EbsInterval {
    /// Every counter moved forward (or stayed): the deltas.
    Deltas(EbsDeltas),
    /// At least one cumulative counter went backwards, so the counters were reset between the
    /// samples (the volume was detached and attached again, or the device behind the node
    /// changed). Nothing about the interval can be known: the counts before the reset are lost,
    /// and reporting zero would claim "not throttled". Lists the counters that went backwards.
    Reset {
        /// Names of the counters that went backwards, as in [`EbsNvmeStats`].
        counters: Vec<&'static str>,
    },
}

/// Increases of the cumulative counters over an interval. The histograms are left out: the
/// exceeded counters are what tells a throttled interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EbsDeltas {
    /// Read operations completed.
    pub read_ops: u64,
    /// Write operations completed.
    pub write_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Time spent by completed reads, µs.
    pub read_time_us: u64,
    /// Time spent by completed writes, µs.
    pub write_time_us: u64,
    /// Time IOPS demand exceeded the volume's provisioned IOPS, µs.
    pub ebs_volume_performance_exceeded_iops_us: u64,
    /// Time throughput demand exceeded the volume's provisioned throughput, µs.
    pub ebs_volume_performance_exceeded_tp_us: u64,
    /// Time the volume's IOPS demand exceeded the instance's EBS IOPS limit, µs.
    pub ec2_instance_ebs_performance_exceeded_iops_us: u64,
    /// Time the volume's throughput demand exceeded the instance's EBS throughput limit, µs.
    pub ec2_instance_ebs_performance_exceeded_tp_us: u64,
}

impl EbsDeltas {
    /// Whether demand exceeded any of the four limits at some point in the interval.
    pub fn any_exceeded(&self) -> bool {
        self.ebs_volume_performance_exceeded_iops_us > 0
            || self.ebs_volume_performance_exceeded_tp_us > 0
            || self.ec2_instance_ebs_performance_exceeded_iops_us > 0
            || self.ec2_instance_ebs_performance_exceeded_tp_us > 0
    }
}

/// The counter deltas from `before` to `after`, two samples of the same volume.
///
/// A counter that went backwards means the counters were reset in between, and the whole pair is
/// [`EbsInterval::Reset`] rather than a wrapped or saturated number: the counters reset
/// together, so even those that did not go backwards count from the reset, not from `before`.
/// The queue length is a gauge and has no delta.
pub fn exceeded_between(before: &EbsNvmeStats, after: &EbsNvmeStats) -> EbsInterval {
    let pairs: [(&'static str, u64, u64); 10] = [
        (
            "total_read_ops",
            before.total_read_ops,
            after.total_read_ops,
        ),
        (
            "total_write_ops",
            before.total_write_ops,
            after.total_write_ops,
        ),
        (
            "total_read_bytes",
            before.total_read_bytes,
            after.total_read_bytes,
        ),
        (
            "total_write_bytes",
            before.total_write_bytes,
            after.total_write_bytes,
        ),
        (
            "total_read_time_us",
            before.total_read_time_us,
            after.total_read_time_us,
        ),
        (
            "total_write_time_us",
            before.total_write_time_us,
            after.total_write_time_us,
        ),
        (
            "ebs_volume_performance_exceeded_iops_us",
            before.ebs_volume_performance_exceeded_iops_us,
            after.ebs_volume_performance_exceeded_iops_us,
        ),
        (
            "ebs_volume_performance_exceeded_tp_us",
            before.ebs_volume_performance_exceeded_tp_us,
            after.ebs_volume_performance_exceeded_tp_us,
        ),
        (
            "ec2_instance_ebs_performance_exceeded_iops_us",
            before.ec2_instance_ebs_performance_exceeded_iops_us,
            after.ec2_instance_ebs_performance_exceeded_iops_us,
        ),
        (
            "ec2_instance_ebs_performance_exceeded_tp_us",
            before.ec2_instance_ebs_performance_exceeded_tp_us,
            after.ec2_instance_ebs_performance_exceeded_tp_us,
        ),
    ];
    let backwards: Vec<&'static str> = pairs
        .iter()
        .filter(|(_, b, a)| a < b)
        .map(|(name, _, _)| *name)
        .collect();
    if !backwards.is_empty() {
        return EbsInterval::Reset {
            counters: backwards,
        };
    }
    // No counter went backwards, so none of these subtractions can underflow; saturating keeps
    // that true without a panic path.
    let [
        read_ops,
        write_ops,
        read_bytes,
        write_bytes,
        read_time_us,
        write_time_us,
        volume_iops,
        volume_tp,
        instance_iops,
        instance_tp,
    ] = pairs.map(|(_, b, a)| a.saturating_sub(b));
    EbsInterval::Deltas(EbsDeltas {
        read_ops,
        write_ops,
        read_bytes,
        write_bytes,
        read_time_us,
        write_time_us,
        ebs_volume_performance_exceeded_iops_us: volume_iops,
        ebs_volume_performance_exceeded_tp_us: volume_tp,
        ec2_instance_ebs_performance_exceeded_iops_us: instance_iops,
        ec2_instance_ebs_performance_exceeded_tp_us: instance_tp,
    })
}

/// The NVMe admin command as the kernel takes it: `struct nvme_passthru_cmd` (alias
/// `nvme_admin_cmd`) from `<linux/nvme_ioctl.h>`, 72 bytes.
#[repr(C)]
#[derive(Debug, Default)]
struct NvmePassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<NvmePassthruCmd>() == 72);

mod sys {
    // NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, struct nvme_admin_cmd), 0xC0484E41: the value
    // the CloudWatch agent passes as a literal. Private so the unsafe wrapper stays here.
    nix::ioctl_readwrite!(nvme_ioctl_admin_cmd, b'N', 0x41, super::NvmePassthruCmd);
}

/// NVMe admin opcode Get Log Page.
const NVME_ADMIN_GET_LOG_PAGE: u8 = 0x02;

/// Command dword 10 of Get Log Page: the log id in bits 0–7 and, in bits 16–31, the number of
/// dwords to transfer minus one (NUMDL is zero-based in the NVMe specification).
///
/// Most AWS readers (the CloudWatch agent's `awsebsnvmereceiver`, the EBS CSI driver,
/// amazon-ec2-utils `ebsnvme`) put `1024 << 16` there: 1025 dwords, 4 bytes more than the
/// 4096-byte buffer they pass as `data_len`. nvme-cli (through libnvme's `nvme_get_log`,
/// `numd = len / 4 - 1`), FreeBSD's `ebsnvme`, and one later CloudWatch agent revision
/// (`receiver/awsnvmereceiver/internal/nvme/metrics_unix.go` at
/// 2557e4099666c1042acf9588059e444a227edea1, commented "Correct dword count -1") put
/// `1023 << 16`, exactly the page. Both are used against real EBS volumes; this takes the
/// exact count because it cannot ask the device to write past the buffer. (That same revision
/// also sent namespace id 0xFFFFFFFF; every other reader sends 1, and so does this.)
const GET_LOG_PAGE_CDW10: u32 =
    EBS_STATS_LOG_PAGE_ID as u32 | ((EBS_STATS_LOG_PAGE_BYTES as u32 / 4 - 1) << 16);

/// The buffer the device writes the page into. Page-aligned, so the 4096 bytes are one
/// physical page for the DMA.
#[repr(C, align(4096))]
struct PageBuffer([u8; EBS_STATS_LOG_PAGE_BYTES]);

/// Reads the EBS statistics of the volume behind `device`, the namespace node of an EBS volume
/// (`/dev/nvme1n1`; `/dev/` plus the name of a [`crate::devices::BlockDevice`] whose
/// `ebs_volume_id` is set). The CloudWatch agent sends the command to the namespace node and
/// skips the controller nodes (`/dev/nvme1`, owned by root alone), so this does too; namespace
/// id 1, as every public reader does.
///
/// Opens the node read-only. The kernel lets only CAP_SYS_ADMIN send this admin command, so the
/// agent must run as root. The ioctl blocks until the device answers (the kernel's admin
/// time-out, 60 s by default, bounds it), so call it from the supervisor thread, never a probe
/// thread. AWS documents a granularity of up to one sample per second; sample at interval
/// boundaries, not faster.
pub fn read_ebs_stats(device: &Path) -> Result<EbsNvmeStats, EbsStatsError> {
    let file = std::fs::File::open(device).map_err(|source| EbsStatsError::Open {
        device: device.to_path_buf(),
        source,
    })?;
    let mut page = Box::new(PageBuffer([0; EBS_STATS_LOG_PAGE_BYTES]));
    let mut cmd = NvmePassthruCmd {
        opcode: NVME_ADMIN_GET_LOG_PAGE,
        nsid: 1,
        addr: page.0.as_mut_ptr().expose_provenance() as u64,
        data_len: EBS_STATS_LOG_PAGE_BYTES as u32,
        cdw10: GET_LOG_PAGE_CDW10,
        ..NvmePassthruCmd::default()
    };
    // SAFETY: `file` is open for the whole call, so the descriptor is valid. `cmd` is a
    // `struct nvme_passthru_cmd` with the header's layout (size asserted above), which is what
    // NVME_IOCTL_ADMIN_CMD reads and writes back (`result`). Its `addr`/`data_len` describe
    // `page`, a live, exclusively borrowed 4096-byte buffer that outlives the ioctl (which is
    // synchronous), and the command asks for exactly 4096 bytes (GET_LOG_PAGE_CDW10), so the
    // kernel and device write nothing outside it. On a node that is not NVMe, a driver that
    // does not know the request code rejects it; one that did would, by the _IOWR encoding,
    // read and write the 72 bytes of `cmd` and nothing else of ours.
    let status = unsafe { sys::nvme_ioctl_admin_cmd(file.as_raw_fd(), &mut cmd) };
    let device = device.to_path_buf();
    match status {
        Ok(0) => {}
        Ok(status) => return Err(EbsStatsError::NvmeStatus { status, device }),
        // ENOTTY is "inappropriate ioctl for device": regular files, virtio disks, /dev/null.
        Err(errno @ (Errno::ENOTTY | Errno::EOPNOTSUPP)) => {
            return Err(EbsStatsError::NotNvme { device, errno });
        }
        Err(errno @ (Errno::EACCES | Errno::EPERM)) => {
            return Err(EbsStatsError::PermissionDenied { device, errno });
        }
        Err(errno) => return Err(EbsStatsError::Ioctl { device, errno }),
    }
    decode_ebs_log_page(&page.0).map_err(|err| match err {
        EbsStatsError::BadMagic { found } => EbsStatsError::NotEbs { device, found },
        other => other,
    })
}

#[cfg(test)]
mod tests;
