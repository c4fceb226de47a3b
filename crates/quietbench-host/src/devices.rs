//! Network interfaces and block devices from sysfs: what network and disk probes run on.
//!
//! Placement needs each NIC's queues, interrupts and NUMA node; reports need each disk's model
//! and, on EC2, the EBS volume id, so two runs on the same volume can be recognised.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::HostRoot;
use crate::kernel::bracketed_choice;
use crate::topology::{list_dir, read_present};

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Interface name (`eth0`, `ens5`).
    pub name: String,
    /// No `device` link: a software interface (ifb, veth, bridge, tun…).
    pub is_virtual: bool,
    /// The driver bound to the device (`ena`, `virtio_net`, `ixgbevf`).
    pub driver: Option<String>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// `operstate` (up, down, unknown…).
    pub operstate: Option<String>,
    /// Link speed in Mbit/s; `None` where the driver does not report one (virtio says -1).
    pub speed_mbps: Option<u32>,
    /// Receive queues (`queues/rx-*`).
    pub rx_queues: Option<u32>,
    /// Transmit queues (`queues/tx-*`).
    pub tx_queues: Option<u32>,
    /// The device's NUMA node; `None` where the firmware gives none (-1).
    pub numa_node: Option<u32>,
    /// MSI/MSI-X interrupt numbers of the device (of its PCI function, for virtio), ascending.
    pub msi_irqs: Vec<u32>,
    /// The PCI address, e.g. `0000:00:05.0`.
    pub pci_address: Option<String>,
}

/// A block device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockDevice {
    /// Kernel name (`nvme0n1`, `vda`).
    pub name: String,
    /// loop, ram or zram: memory- or file-backed, skipped by [`read_block_devices`].
    pub pseudo: bool,
    /// `device/model`, trimmed (NVMe pads it with spaces).
    pub model: Option<String>,
    /// `device/vendor` as the device reports it: a name for SCSI, a PCI id such as `0x1af4`
    /// for virtio.
    pub vendor: Option<String>,
    /// `queue/rotational`. Virtual disks often claim to rotate; it is reported, not believed.
    pub rotational: Option<bool>,
    /// The active I/O scheduler (`none`, `mq-deadline`…).
    pub scheduler: Option<String>,
    /// Capacity in bytes (`size` is in 512-byte sectors whatever the logical block size).
    pub size_bytes: Option<u64>,
    /// Serial number (`device/serial`, or the disk's own `serial` for virtio), trimmed.
    pub serial: Option<String>,
    /// The EBS volume id, from an EBS NVMe device's serial.
    pub ebs_volume_id: Option<String>,
}

/// Whether a block device is memory- or file-backed (loop, ram, zram) rather than a disk.
pub fn is_pseudo_block_device(name: &str) -> bool {
    ["loop", "ram", "zram"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The EBS volume id of an NVMe device, from its model and serial: EBS reports model
/// "Amazon Elastic Block Store" and the volume id without its dash as the serial
/// (`vol0123456789abcdef0` for `vol-0123456789abcdef0`). `None` for anything else, instance
/// store included (model "Amazon EC2 NVMe Instance Storage", serial `AWS…`).
pub fn ebs_volume_id(model: &str, serial: &str) -> Option<String> {
    if model.trim() != "Amazon Elastic Block Store" {
        return None;
    }
    let serial = serial.trim();
    let hex = serial
        .strip_prefix("vol-")
        .or_else(|| serial.strip_prefix("vol"))?;
    // Volume ids are 17 hex digits since 2016 and 8 before.
    let valid = matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| format!("vol-{}", hex.to_ascii_lowercase()))
}

/// Parses a whole number, `None` for anything else (including the `-1` of "unknown").
fn parse_non_negative<T: std::str::FromStr>(text: &str) -> Option<T> {
    let t = text.trim();
    if t.starts_with('-') {
        return None;
    }
    t.parse().ok()
}

/// Whether `name` is a PCI address `DDDD:BB:DD.F`.
fn is_pci_address(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b':',
            10 => c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The file name of a symlink's target (a driver name), read without following it, so it
/// works on a fixture tree where the target does not exist.
fn link_name(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    target.file_name()?.to_str().map(str::to_string)
}

/// A machine path for a real path below the root (for reading files with `HostRoot::read`).
fn machine_path(root: &HostRoot, real: &Path) -> Option<String> {
    let base = std::fs::canonicalize(root.path()).ok()?;
    let rel = real.strip_prefix(&base).ok()?;
    Some(format!("/{}", rel.to_str()?))
}

/// The device directory and, when it is not itself a PCI function (virtio sits under one), the
/// PCI function above it, both as machine paths.
fn device_and_pci(root: &HostRoot, device_link: &str) -> Option<(String, Option<String>)> {
    let real: PathBuf = std::fs::canonicalize(root.resolve(device_link)).ok()?;
    let device = machine_path(root, &real)?;
    let pci = [real.as_path(), real.parent()?]
        .into_iter()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_pci_address)
        })
        .and_then(|p| machine_path(root, p));
    Some((device, pci))
}

fn count_queues(names: &[String], prefix: &str) -> u32 {
    let n = names.iter().filter(|n| n.starts_with(prefix)).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn msi_irqs(root: &HostRoot, dir: &str) -> Option<Vec<u32>> {
    let names = list_dir(root, &format!("{dir}/msi_irqs")).ok()?;
    let mut irqs: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    irqs.sort_unstable();
    Some(irqs)
}

fn numa_node(root: &HostRoot, dir: &str, notes: &mut Vec<String>) -> Option<Option<u32>> {
    read_present(root, &format!("{dir}/numa_node"), notes).map(|t| parse_non_negative(&t))
}

/// Reads every network interface except `lo` below `root`. Never fails: the second value has one
/// line per interface or file that could not be read.
pub fn read_nics(root: &HostRoot) -> (Vec<Nic>, Vec<String>) {
    let mut notes = Vec::new();
    let names = match list_dir(root, "/sys/class/net") {
        Ok(names) => names,
        Err(err) => {
            notes.push(format!("cannot list /sys/class/net: {err}"));
            return (Vec::new(), notes);
        }
    };
    let nics = names
        .into_iter()
        .filter(|n| n != "lo")
        .map(|name| read_nic(root, name, &mut notes))
        .collect();
    (nics, notes)
}

fn read_nic(root: &HostRoot, name: String, notes: &mut Vec<String>) -> Nic {
    let dir = format!("/sys/class/net/{name}");
    let device_link = format!("{dir}/device");
    let is_virtual = std::fs::symlink_metadata(root.resolve(&device_link)).is_err();
    let mtu = read_present(root, &format!("{dir}/mtu"), notes).and_then(|t| parse_non_negative(&t));
    let operstate =
        read_present(root, &format!("{dir}/operstate"), notes).map(|t| t.trim().to_string());
    // Reading `speed` fails with EINVAL when the link is down or the driver has no speed, and
    // reads -1 on virtio: all mean "unknown", none is worth a note.
    let speed_mbps = root
        .read(&format!("{dir}/speed"))
        .ok()
        .and_then(|t| parse_non_negative(&t));
    let (rx_queues, tx_queues) = match list_dir(root, &format!("{dir}/queues")) {
        Ok(q) => (Some(count_queues(&q, "rx-")), Some(count_queues(&q, "tx-"))),
        Err(err) => {
            notes.push(format!("cannot list {dir}/queues: {err}"));
            (None, None)
        }
    };
    let mut nic = Nic {
        name,
        is_virtual,
        driver: None,
        mtu,
        operstate,
        speed_mbps,
        rx_queues,
        tx_queues,
        numa_node: None,
        msi_irqs: Vec::new(),
        pci_address: None,
    };
    if is_virtual {
        return nic;
    }
    nic.driver = link_name(&root.resolve(&format!("{device_link}/driver")));
    let Some((device, pci)) = device_and_pci(root, &device_link) else {
        notes.push(format!("{device_link}: cannot resolve the device link"));
        return nic;
    };
    // virtio devices have neither numa_node nor msi_irqs: those belong to the PCI function.
    nic.numa_node = numa_node(root, &device, notes)
        .or_else(|| pci.as_deref().and_then(|p| numa_node(root, p, notes)))
        .flatten();
    nic.msi_irqs = msi_irqs(root, &device)
        .or_else(|| pci.as_deref().and_then(|p| msi_irqs(root, p)))
        .unwrap_or_default();
    nic.pci_address = pci.and_then(|p| p.rsplit('/').next().map(str::to_string));
    nic
}

/// Reads the block devices below `root`, skipping loop, ram and zram devices (see
/// [`is_pseudo_block_device`]). Never fails: the second value has one line per file that could
/// not be read.
pub fn read_block_devices(root: &HostRoot) -> (Vec<BlockDevice>, Vec<String>) {
    read_block_devices_with(root, false)
}

/// Like [`read_block_devices`], keeping the pseudo devices (marked `pseudo`) when
/// `include_pseudo` is true.
pub fn read_block_devices_with(
    root: &HostRoot,
    include_pseudo: bool,
) -> (Vec<BlockDevice>, Vec<String>) {
    let mut notes = Vec::new();
    let names = match list_dir(root, "/sys/block") {
        Ok(names) => names,
        Err(err) => {
            notes.push(format!("cannot list /sys/block: {err}"));
            return (Vec::new(), notes);
        }
    };
    let devices = names
        .into_iter()
        .filter(|n| include_pseudo || !is_pseudo_block_device(n))
        .map(|name| read_block_device(root, name, &mut notes))
        .collect();
    (devices, notes)
}

fn read_block_device(root: &HostRoot, name: String, notes: &mut Vec<String>) -> BlockDevice {
    let dir = format!("/sys/block/{name}");
    let mut text = |path: &str| {
        read_present(root, &format!("{dir}/{path}"), notes)
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    };
    let model = text("device/model");
    let vendor = text("device/vendor");
    let rotational = text("queue/rotational").and_then(|t| match t.as_str() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    });
    // Devices without an elevator print a bare `none`.
    let scheduler = text("queue/scheduler").and_then(|t| {
        bracketed_choice(&t).or_else(|| (t.split_whitespace().count() == 1).then_some(t))
    });
    let size_bytes = text("size")
        .and_then(|t| parse_non_negative::<u64>(&t))
        .and_then(|sectors| sectors.checked_mul(512));
    // NVMe and SCSI put the serial on the device; virtio-blk puts it on the disk.
    let serial = text("device/serial").or_else(|| text("serial"));
    let ebs_volume_id = match (&model, &serial) {
        (Some(m), Some(s)) => ebs_volume_id(m, s),
        _ => None,
    };
    BlockDevice {
        pseudo: is_pseudo_block_device(&name),
        name,
        model,
        vendor,
        rotational,
        scheduler,
        size_bytes,
        serial,
        ebs_volume_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_fixtures::dev_vm;

    #[test]
    fn reads_the_development_vm_nics() {
        let (nics, notes) = read_nics(&dev_vm());
        assert_eq!(notes, Vec::<String>::new());
        let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, vec!["eth0", "ifb0", "ifb1"], "lo is skipped");
        let eth0 = &nics[0];
        assert!(!eth0.is_virtual);
        assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
        assert_eq!(eth0.mtu, Some(1400));
        assert_eq!(eth0.operstate.as_deref(), Some("up"));
        assert_eq!(eth0.speed_mbps, None, "virtio reports -1");
        assert_eq!((eth0.rx_queues, eth0.tx_queues), (Some(1), Some(1)));
        assert_eq!(eth0.numa_node, None, "the PCI function says -1");
        assert_eq!(
            eth0.msi_irqs,
            vec![37, 38, 39],
            "from the PCI parent of virtio2"
        );
        assert_eq!(eth0.pci_address.as_deref(), Some("0000:00:03.0"));
        let ifb0 = &nics[1];
        assert!(ifb0.is_virtual);
        assert_eq!(
            (ifb0.driver.as_deref(), ifb0.pci_address.as_deref()),
            (None, None)
        );
        assert_eq!(ifb0.operstate.as_deref(), Some("down"));
        assert_eq!(ifb0.speed_mbps, None);
    }

    #[test]
    fn reads_the_development_vm_disks() {
        let (disks, notes) = read_block_devices(&dev_vm());
        assert_eq!(notes, Vec::<String>::new());
        assert_eq!(disks.len(), 1, "loop0-7 and zram0 are skipped: {disks:?}");
        let vda = &disks[0];
        assert_eq!(vda.name, "vda");
        assert!(!vda.pseudo);
        assert_eq!(vda.model, None, "virtio-blk has no model");
        assert_eq!(vda.vendor.as_deref(), Some("0x1af4"));
        assert_eq!(vda.rotational, Some(true));
        assert_eq!(vda.scheduler.as_deref(), Some("mq-deadline"));
        assert_eq!(vda.size_bytes, Some(536_870_912 * 512));
        assert_eq!(vda.serial.as_deref(), Some("overlayblk"));
        assert_eq!(vda.ebs_volume_id, None);

        let (all, notes) = read_block_devices_with(&dev_vm(), true);
        assert_eq!(notes, Vec::<String>::new());
        assert_eq!(all.len(), 10);
        let zram = all.iter().find(|d| d.name == "zram0").unwrap();
        assert!(zram.pseudo);
        assert_eq!(zram.scheduler, None, "zram has no queue/scheduler");
    }

    #[test]
    fn recognises_pseudo_devices() {
        for pseudo in ["loop0", "loop12", "ram0", "zram0"] {
            assert!(is_pseudo_block_device(pseudo), "{pseudo}");
        }
        for disk in ["vda", "nvme0n1", "xvda", "loopback", "ramdisk", "sda"] {
            assert!(!is_pseudo_block_device(disk), "{disk}");
        }
    }

    #[test]
    fn ebs_volume_ids_from_published_nvme_serials() {
        // Serials and the space-padded 40-character model as `nvme list` printed them on EC2,
        // from https://github.com/libopenstorage/openstorage/pull/578 (2018) and
        // https://github.com/coreos/bugs/issues/2399 (`nvme id-ctrl -v`, 2019).
        let model = "Amazon Elastic Block Store              ";
        assert_eq!(model.len(), 40);
        for (serial, id) in [
            ("vol05ce9829d6b2d3a21", "vol-05ce9829d6b2d3a21"),
            ("vol067baf02ad3ecd9fd", "vol-067baf02ad3ecd9fd"),
            ("vol0691209dc9ce0c7e4", "vol-0691209dc9ce0c7e4"),
        ] {
            assert_eq!(ebs_volume_id(model, serial).as_deref(), Some(id));
            assert_eq!(
                ebs_volume_id(model.trim(), &format!("{serial}\n")).as_deref(),
                Some(id)
            );
        }
        // Instance store, as in https://github.com/transferwise/ansible-ebs-automatic-nvme-mapping/pull/5
        // (the serial there was anonymised by its author).
        assert_eq!(
            ebs_volume_id("Amazon EC2 NVMe Instance Storage", "AWS22222222222222222"),
            None
        );
        // The development VM's virtio disk, and malformed serials.
        assert_eq!(ebs_volume_id("", "overlayblk"), None);
        for bad in [
            "vol",
            "vol-",
            "volxyz",
            "vol05ce9829d6b2d3a2",
            "vol05ce9829d6b2d3a21a",
            "vol05ce9829d6b2d3a2é",
        ] {
            assert_eq!(ebs_volume_id(model, bad), None, "{bad}");
        }
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:00:03.0"));
        assert!(!is_pci_address("virtio2"));
        assert!(!is_pci_address("0000:00:03:0"));
        assert!(!is_pci_address("pci0000:00"));
    }

    #[test]
    fn a_missing_root_is_noted() {
        let root = HostRoot::at("/nonexistent/qb");
        let (nics, notes) = read_nics(&root);
        assert!(nics.is_empty() && notes.len() == 1, "{notes:?}");
        let (disks, notes) = read_block_devices(&root);
        assert!(disks.is_empty() && notes.len() == 1, "{notes:?}");
    }

    #[test]
    fn reads_this_machine() {
        let (_nics, notes) = read_nics(&HostRoot::live());
        assert!(
            notes.iter().all(|n| !n.contains("/sys/class/net:")),
            "{notes:?}"
        );
    }
}
