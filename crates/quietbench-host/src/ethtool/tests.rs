use std::process::Command;

use super::*;

/// AWS documentation, "Monitor network performance": the five allowance counters alone.
const AWS_MONITORING: &str =
    include_str!("../../tests/fixtures/public/ena-ethtool/aws-docs-monitoring-eth0.txt");
/// AWS documentation, "Troubleshoot the Elastic Network Adapter": the head of a full
/// `ethtool -S`, cut with `...`.
const AWS_TROUBLESHOOTING: &str =
    include_str!("../../tests/fixtures/public/ena-ethtool/aws-docs-troubleshooting-ethN.txt");
/// `ethtool -S ens5 | grep allowance` on a throttled instance (commonwarexyz/alto).
const ALTO_THROTTLED: &str =
    include_str!("../../tests/fixtures/public/ena-ethtool/alto-ens5-grep-allowance.txt");
/// ENA driver 1.2.0k, 4 queues, before the allowance counters existed (isc-projects/ethq).
const ETHQ_ENA_1_2: &str =
    include_str!("../../tests/fixtures/public/ena-ethtool/ethq-ena-1.2.0k.txt");
/// The development VM's virtio NIC (captured here, not published).
const DEV_VM_VIRTIO: &str =
    include_str!("../../tests/fixtures/public/ena-ethtool/captured-kvm-2vcpu-virtio_net-eth0.txt");

fn stats(entries: &[(&str, u64)]) -> NicStats {
    NicStats {
        entries: entries.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
    }
}

#[test]
fn finds_the_allowances_in_the_aws_monitoring_example() {
    let s = parse_ethtool_s(AWS_MONITORING).unwrap();
    assert_eq!(s.len(), 5);
    let a = ena_allowances(&s).unwrap();
    assert_eq!(
        a,
        EnaAllowances {
            bw_in_allowance_exceeded: Some(0),
            bw_out_allowance_exceeded: Some(0),
            pps_allowance_exceeded: Some(0),
            conntrack_allowance_exceeded: Some(0),
            linklocal_allowance_exceeded: Some(0),
            conntrack_allowance_available: None,
        }
    );
}

#[test]
fn finds_the_allowances_among_the_full_statistics_of_the_troubleshooting_example() {
    // The documentation elides the rest of the output with a `...` line: drop it, it is not
    // part of what ethtool prints.
    let cut: String = AWS_TROUBLESHOOTING
        .lines()
        .filter(|l| l.trim() != "...")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(cut.lines().count() + 1, AWS_TROUBLESHOOTING.lines().count());
    let s = parse_ethtool_s(&cut).unwrap();
    assert_eq!(s.len(), 15, "the header line is not a statistic");
    assert_eq!(s.entries[0], ("tx_timeout".to_string(), 0));
    assert_eq!(s.get("interface_up"), Some(1));
    assert_eq!(s.get("queue_0_tx_cnt"), Some(4329));
    assert_eq!(s.get("queue_0_tx_bytes"), Some(1_075_749));
    let a = ena_allowances(&s).unwrap();
    for allowance in Allowance::ALL {
        assert_eq!(a.exceeded(allowance), Some(0), "{allowance:?}");
    }
    assert_eq!(a.conntrack_allowance_available, None);
    // Unfiltered, the `...` line is reported, not skipped.
    let err = parse_ethtool_s(AWS_TROUBLESHOOTING).unwrap_err();
    assert_eq!((err.line, err.text.trim()), (17, "..."));
}

#[test]
fn a_throttled_instance_shows_its_outbound_bandwidth_shaped() {
    let a = ena_allowances(&parse_ethtool_s(ALTO_THROTTLED).unwrap()).unwrap();
    assert_eq!(a.bw_out_allowance_exceeded, Some(14_368));
    assert_eq!(a.bw_in_allowance_exceeded, Some(0));
    assert_eq!(a.pps_allowance_exceeded, Some(0));
    // Against the zeros of a fresh sample, bw_out is the one allowance exceeded.
    let zero = ena_allowances(&parse_ethtool_s(AWS_MONITORING).unwrap()).unwrap();
    let d = allowances_between(&zero, &a);
    assert!(d.any_grew());
    assert_eq!(d.grown(), vec![(Allowance::BandwidthOut, 14_368)]);
    assert_eq!(
        d.describe(),
        vec![
            "bw_out_allowance_exceeded: 14368 packets shaped: outbound bandwidth above the \
             instance's allowance: EC2 queued or dropped packets"
                .to_string()
        ]
    );
    let same = allowances_between(&a, &a);
    assert!(!same.any_grew());
    assert!(same.describe().is_empty());
}

#[test]
fn an_ena_driver_older_than_the_allowance_counters_has_none() {
    let s = parse_ethtool_s(ETHQ_ENA_1_2).unwrap();
    assert_eq!(s.len(), 104);
    assert_eq!(s.get("queue_3_rx_bytes"), Some(66_809_815_952));
    assert_eq!(s.get("ena_admin_q_completed_cmd"), Some(28));
    assert_eq!(ena_allowances(&s), None);
}

#[test]
fn the_virtio_nic_of_the_development_vm_is_not_ena() {
    let s = parse_ethtool_s(DEV_VM_VIRTIO).unwrap();
    assert_eq!(s.len(), 20);
    assert_eq!(s.get("rx_kicks"), Some(8206));
    assert_eq!(s.get("tx0_kicks"), Some(25_501));
    assert_eq!(ena_allowances(&s), None);
}

#[test]
fn conntrack_available_alone_is_still_ena() {
    let a = ena_allowances(&stats(&[("conntrack_allowance_available", 601_984)])).unwrap();
    assert_eq!(a.conntrack_allowance_available, Some(601_984));
    assert_eq!(a.bw_in_allowance_exceeded, None);
}

#[test]
fn deltas_per_allowance() {
    let before = EnaAllowances {
        bw_in_allowance_exceeded: Some(10),
        bw_out_allowance_exceeded: Some(5),
        pps_allowance_exceeded: Some(7),
        conntrack_allowance_exceeded: None,
        linklocal_allowance_exceeded: Some(0),
        conntrack_allowance_available: Some(1000),
    };
    let after = EnaAllowances {
        bw_in_allowance_exceeded: Some(10),
        bw_out_allowance_exceeded: Some(9),
        pps_allowance_exceeded: Some(3),
        conntrack_allowance_exceeded: Some(4),
        linklocal_allowance_exceeded: Some(2),
        conntrack_allowance_available: Some(0),
    };
    let d = allowances_between(&before, &after);
    assert_eq!(
        d.packets,
        vec![
            (Allowance::BandwidthIn, Some(0)),
            (Allowance::BandwidthOut, Some(4)),
            // Went down: the driver was reset; the 3 after the reset are a lower bound.
            (Allowance::PacketsPerSecond, Some(3)),
            // Missing before: unknown, not zero.
            (Allowance::Conntrack, None),
            (Allowance::LinkLocal, Some(2)),
        ]
    );
    assert_eq!(d.reset, vec![Allowance::PacketsPerSecond]);
    assert_eq!(d.conntrack_allowance_available, Some(0));
    let lines = d.describe();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[1]
            .starts_with("pps_allowance_exceeded: at least 3 packets shaped: packets per second")
    );
    assert!(lines[2].contains("link-local services"), "{lines:?}");
}

#[test]
fn every_allowance_has_its_driver_counter_and_a_meaning() {
    let names: Vec<&str> = Allowance::ALL.iter().map(|a| a.counter_name()).collect();
    // The driver's own order, as in the AWS monitoring example.
    assert_eq!(
        names,
        parse_ethtool_s(AWS_MONITORING)
            .unwrap()
            .names()
            .collect::<Vec<_>>()
    );
    for a in Allowance::ALL {
        assert!(a.meaning().contains("EC2"), "{a:?}");
    }
}

#[test]
fn parser_keeps_colons_inside_names_and_rejects_other_lines() {
    // be2net prints per-queue names with ": " inside them.
    let s = parse_ethtool_s("NIC statistics:\n     rxq0: rx_bytes: 176801830924270\n").unwrap();
    assert_eq!(
        s.entries,
        vec![("rxq0: rx_bytes".to_string(), 176_801_830_924_270)]
    );
    assert_eq!(parse_ethtool_s("").unwrap(), NicStats::default());
    assert_eq!(
        parse_ethtool_s("NIC statistics:\n").unwrap(),
        NicStats::default()
    );
    for (bad, reason) in [
        ("     rx_drops 0", "no \": \""),
        ("     rx_drops: -1", "the value is not a whole number"),
        (
            "     rx_drops: 18446744073709551616",
            "the value is not a whole number",
        ),
        ("     : 4", "empty name"),
        ("rx: 1\nNIC statistics:", "no \": \""),
    ] {
        let err = parse_ethtool_s(bad).unwrap_err();
        assert_eq!(err.reason, reason, "{bad:?}");
    }
    // A line cut anywhere never panics.
    for end in 0..=AWS_TROUBLESHOOTING.len() {
        if AWS_TROUBLESHOOTING.is_char_boundary(end) {
            let _ = parse_ethtool_s(&AWS_TROUBLESHOOTING[..end]);
        }
    }
}

#[test]
fn names_are_checked_before_the_kernel_sees_them() {
    let long = "abcdefghijklmnop";
    assert_eq!(long.len(), IFNAMSIZ);
    let err = read_nic_stats(long).unwrap_err();
    assert!(matches!(err, EthtoolError::NameTooLong { .. }), "{err}");
    assert!(err.to_string().contains("at most 15 bytes"), "{err}");
    for bad in ["", "eth\0"] {
        let err = read_nic_stats(bad).unwrap_err();
        assert!(
            matches!(err, EthtoolError::InvalidName { .. }),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn an_unknown_interface_is_no_such_interface() {
    // 15 bytes: the longest name that fits.
    let err = read_nic_stats("qb-no-such-nic0").unwrap_err();
    assert!(
        matches!(&err, EthtoolError::NoSuchInterface { ifname } if ifname == "qb-no-such-nic0"),
        "{err}"
    );
}

#[test]
fn loopback_has_no_driver_statistics() {
    let err = read_nic_stats("lo").unwrap_err();
    assert!(
        matches!(&err, EthtoolError::NoDriverStatistics { ifname } if ifname == "lo"),
        "{err}"
    );
    assert!(err.to_string().contains("no stats available"), "{err}");
}

/// `ethtool -S IFACE` on this machine: its statistics, or `None` for "no stats available".
fn ethtool_s(ifname: &str) -> Option<NicStats> {
    let out = Command::new("ethtool")
        .args(["-S", ifname])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "this test compares with the ethtool binary, which does not run ({e}): install \
                 it (`apt-get install -y ethtool`; CI does)"
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("no stats available") {
        return None;
    }
    assert!(out.status.success(), "ethtool -S {ifname}: {stderr}");
    Some(parse_ethtool_s(&String::from_utf8(out.stdout).unwrap()).unwrap())
}

#[test]
fn the_reader_agrees_with_ethtool_on_every_interface_of_this_machine() {
    let mut compared = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for ifname in &names {
        let ours = read_nic_stats(ifname);
        match (ethtool_s(ifname), ours) {
            (Some(theirs), Ok(ours)) => {
                // Values move between the two reads; names and order do not.
                assert_eq!(
                    ours.names().collect::<Vec<_>>(),
                    theirs.names().collect::<Vec<_>>(),
                    "{ifname}"
                );
                compared.push(ifname.clone());
            }
            (None, Err(EthtoolError::NoDriverStatistics { .. })) => {}
            (theirs, ours) => panic!("{ifname}: ethtool says {theirs:?}, the reader {ours:?}"),
        }
    }
    assert!(
        !compared.is_empty(),
        "no interface of {names:?} has driver statistics to compare"
    );
}

#[test]
fn a_reader_reads_again_into_the_same_buffers() {
    // The first interface with statistics (eth0, virtio, on the development VM).
    let ifname = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| read_nic_stats(n).is_ok())
        .expect("an interface with driver statistics");
    let mut reader = NicStatsReader::open(&ifname).unwrap();
    let mut s = NicStats::default();
    reader.read_into(&mut s).unwrap();
    let first = s.clone();
    let names_at = s.entries.as_ptr();
    reader.read_into(&mut s).unwrap();
    assert_eq!(
        s.names().collect::<Vec<_>>(),
        first.names().collect::<Vec<_>>()
    );
    assert_eq!(
        s.entries.as_ptr(),
        names_at,
        "the list was reused, not rebuilt"
    );
    assert_eq!(reader.ifname(), ifname);
}

/// A network namespace of this test's own, with a veth pair `qbe0`/`qbe1` (4 queues each)
/// inside; deleted when dropped, even when the test fails.
struct VethNamespace {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl VethNamespace {
    fn create(tag: &str) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root: it creates a network namespace and a veth pair (CI runs as \
             root)"
        );
        let name = format!("qb-eth-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Self { name };
        // `name` spelled out: `ip link add a …` would read `a` as `address`.
        ip(&[
            "-n",
            &ns.name,
            "link",
            "add",
            "name",
            "qbe0",
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            "qbe1",
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
        ]);
        ns
    }

    /// Runs `f` on a thread that has entered the namespace (sockets it opens belong there).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {path}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// `ethtool -L qbe0 rx N tx N` inside the namespace.
    fn set_queues(&self, n: u32) {
        let n = n.to_string();
        ip(&[
            "netns", "exec", &self.name, "ethtool", "-L", "qbe0", "rx", &n, "tx", &n,
        ]);
    }

    fn ifindex(&self, ifname: &str) -> u64 {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-o", "link", "show", "dev", ifname])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.split(':').next().unwrap().trim().parse().unwrap()
    }
}

impl Drop for VethNamespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair inside it.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The names veth reports with `n` queues (`veth_get_strings`).
fn veth_names(n: usize) -> Vec<String> {
    let mut names = vec!["peer_ifindex".to_string()];
    for q in 0..n {
        for s in [
            "xdp_packets",
            "xdp_bytes",
            "drops",
            "xdp_redirect",
            "xdp_drops",
            "xdp_tx",
            "xdp_tx_errors",
        ] {
            names.push(format!("rx_queue_{q}_{s}"));
        }
    }
    for q in 0..n {
        for s in ["xdp_xmit", "xdp_xmit_errors"] {
            names.push(format!("tx_queue_{q}_{s}"));
        }
    }
    names
}

#[test]
fn reads_a_veth_inside_a_network_namespace() {
    let ns = VethNamespace::create("read");
    let peer = ns.ifindex("qbe1");
    let (s, lo, outside) = ns.run(|| {
        (
            read_nic_stats("qbe0").unwrap(),
            read_nic_stats("lo").unwrap_err(),
            read_nic_stats("eth0").unwrap_err(),
        )
    });
    assert_eq!(s.get("peer_ifindex"), Some(peer));
    assert_eq!(s.names().collect::<Vec<_>>(), veth_names(4));
    assert_eq!(ena_allowances(&s), None);
    assert!(
        matches!(lo, EthtoolError::NoDriverStatistics { .. }),
        "{lo}"
    );
    // The machine's own interfaces are not in the namespace.
    assert!(
        matches!(outside, EthtoolError::NoSuchInterface { .. }),
        "{outside}"
    );
    // And the namespace's are not outside it.
    assert!(matches!(
        read_nic_stats("qbe0"),
        Err(EthtoolError::NoSuchInterface { .. })
    ));
}

#[test]
fn a_reader_follows_the_statistics_when_the_queues_change() {
    let ns = VethNamespace::create("queues");
    ns.run(|| {
        let mut reader = NicStatsReader::open("qbe0").unwrap();
        let mut s = NicStats::default();
        reader.read_into(&mut s).unwrap();
        assert_eq!(s.names().collect::<Vec<_>>(), veth_names(4));
        ns.set_queues(2);
        reader.read_into(&mut s).unwrap();
        assert_eq!(s.names().collect::<Vec<_>>(), veth_names(2));
        ns.set_queues(4);
        reader.read_into(&mut s).unwrap();
        assert_eq!(s.names().collect::<Vec<_>>(), veth_names(4));
    });
}

#[test]
fn reads_racing_a_queue_change_are_whole_or_refused() {
    // One thread flips qbe0 between 1 and 4 queues while another reads: every read must give
    // one of the two name lists in full, or CountChanged, never a mix or a crash.
    let ns = VethNamespace::create("race");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (whole, refused) = std::thread::scope(|s| {
        let flipper = s.spawn(|| {
            for i in 0..40 {
                ns.set_queues(if i % 2 == 0 { 1 } else { 4 });
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let counts = ns.run(|| {
            let (one, four) = (veth_names(1), veth_names(4));
            let mut reader = NicStatsReader::open("qbe0").unwrap();
            let mut s = NicStats::default();
            let (mut whole, mut refused) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match reader.read_into(&mut s) {
                    Ok(()) => {
                        let names: Vec<String> = s.names().map(str::to_string).collect();
                        assert!(names == one || names == four, "{names:?}");
                        whole += 1;
                    }
                    Err(EthtoolError::CountChanged { .. }) => refused += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            (whole, refused)
        });
        flipper.join().unwrap();
        counts
    });
    assert!(whole > 0, "no read completed ({refused} refused)");
}
