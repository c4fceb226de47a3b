use super::*;
use crate::test_fixtures::read_fixture;

/// Every captured per-CPU table, with the CPU columns its header names.
const TABLES: [(&str, u32); 9] = [
    ("kvm-2vcpu-xeon/proc/interrupts", 2),
    ("kvm-2vcpu-xeon/proc/softirqs", 2),
    ("kvm-2vcpu-xeon/proc-samples/interrupts-t0", 2),
    ("kvm-2vcpu-xeon/proc-samples/softirqs-t1", 2),
    ("public/ec2-ena-3nic-4vcpu/proc/interrupts", 4),
    ("public/liblnxproc-8cpu-old-kernel/proc/interrupts", 8),
    ("public/qemu-2vcpu-pci-msi/proc/interrupts", 2),
    ("public/zynq-arm-2cpu/proc/interrupts", 2),
    ("public/ec2-xen-1vcpu/proc/interrupts", 1),
];

#[test]
fn reads_the_header_and_keeps_every_other_line_of_each_captured_table() {
    for (path, ncpus) in TABLES {
        let text = read_fixture(path);
        let (cpus, lines) = cpu_table("/proc/x", &text).unwrap();
        assert_eq!(cpus, (0..ncpus).collect::<Vec<u32>>(), "{path}");
        let lines: Vec<(usize, &str)> = lines.collect();
        let non_empty = text.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(lines.len(), non_empty - 1, "{path}");
        // Line numbers count from 1 and the header is line 1 in every capture.
        assert_eq!(lines[0].0, 2, "{path}");
        assert_eq!(lines[0].1, text.lines().nth(1).unwrap(), "{path}");
    }
}

#[test]
fn splits_the_leading_counts_of_captured_lines() {
    // From public/qemu-2vcpu-pci-msi: two CPU columns, then the chip.
    let rest = "         45          0   IO-APIC   2-edge      timer";
    let (counts, text) = split_counts(rest, 2).unwrap();
    assert_eq!(counts, vec![45, 0]);
    assert_eq!(text, "IO-APIC   2-edge      timer");
    // At most `max` counts are taken; the rest stays text.
    let (counts, text) = split_counts(rest, 1).unwrap();
    assert_eq!(counts, vec![45]);
    assert_eq!(text, "0   IO-APIC   2-edge      timer");
    // x86 ERR: one count on a two-column table, and no text.
    assert_eq!(split_counts("          0", 2).unwrap(), (vec![0], ""));
    // A token that is not all digits ends the counts ("-event" of a Xen line).
    let xen = "        266   xen-dyn    -event     xenbus";
    assert_eq!(split_counts(xen, 1).unwrap().0, vec![266]);
    let err = split_counts(" 99999999999999999999999 a", 1).unwrap_err();
    assert!(err.contains("64 bits"), "{err}");
}

#[test]
fn digits_only_means_digits_only() {
    assert_eq!(parse_digits::<u32>("12"), Some(12));
    assert_eq!(parse_digits::<u32>("0"), Some(0));
    for bad in ["", "+5", "-5", "1a", " 1", "1 ", "4294967296"] {
        assert_eq!(parse_digits::<u32>(bad), None, "{bad:?}");
    }
}

#[test]
fn header_errors_name_the_file_and_line() {
    let e = cpu_table("/proc/x", "").map(|_| ()).unwrap_err();
    assert!(
        matches!(
            e,
            ParseError::File {
                file: "/proc/x",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("empty"), "{e}");
    // Leading blank lines are skipped, and the header keeps its line number.
    let e = cpu_table("/proc/x", "\n\nhello world\n")
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.to_string().split(':').next(), Some("/proc/x line 3"));
    assert!(e.to_string().contains("'hello'"), "{e}");
    for (header, reason) in [
        ("CPU1 CPU0", "not ascending"),
        ("CPU0 CPU0", "not ascending"),
        ("CPU0 CPU+1", "'CPU+1'"),
        ("   ", "names no CPU"),
    ] {
        let got = parse_cpu_header(header).unwrap_err();
        assert!(got.contains(reason), "{header:?}: {got}");
    }
}

/// The captured files all have every CPU online, so the gap is typed (see the fixtures README:
/// synthetic inputs).
#[test]
fn synthetic_header_with_hotplug_gaps() {
    assert_eq!(parse_cpu_header("  CPU0  CPU2  CPU3"), Ok(vec![0, 2, 3]));
    let (cpus, lines) = cpu_table("/proc/x", "  CPU0  CPU2\n  5:  1  2  x\n").unwrap();
    assert_eq!(cpus, vec![0, 2]);
    assert_eq!(lines.collect::<Vec<_>>(), vec![(2, "  5:  1  2  x")]);
}
