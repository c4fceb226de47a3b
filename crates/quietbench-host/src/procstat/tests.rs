use super::*;

const KVM_STAT: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/stat");
const KVM_STAT_T0: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc-samples/stat-t0");
const KVM_STAT_T1: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc-samples/stat-t1");
const KVM_SOFTIRQS: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/softirqs");
const KVM_SOFTIRQS_T0: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc-samples/softirqs-t0");
const KVM_SOFTIRQS_T1: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc-samples/softirqs-t1");
const VM8_STAT: &str = include_str!("../../tests/fixtures/public/goprocinfo-8vcpu-vm/proc/stat");
const SELF_STATUS: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/self-sample/status");
const SELF_STAT: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/self-sample/stat");
const SELF_SCHED: &str = include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/self-sample/sched");
const ODD_STAT: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/28607/task/28607/stat");
const ODD_STATUS: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/28607/task/28607/status");
const ODD_SCHED: &str =
    include_str!("../../tests/fixtures/kvm-2vcpu-xeon/proc/28607/task/28607/sched");

use crate::test_fixtures::{dev_vm, fixture_root};

#[test]
fn parses_the_kvm_proc_stat() {
    let s = parse_proc_stat(KVM_STAT).unwrap();
    assert_eq!(s.total.cpu, None);
    assert_eq!(
        s.per_cpu.iter().map(|t| t.cpu).collect::<Vec<_>>(),
        vec![Some(0), Some(1)]
    );
    assert_eq!(s.total.user, 114060);
    assert_eq!(s.total.steal, Some(260));
    assert_eq!(s.total.guest_nice, Some(0));
    assert_eq!(s.cpu(1).unwrap().idle, 88541);
    assert_eq!(s.ctxt, Some(767529));
    assert_eq!(s.btime, Some(1795362644));
    assert_eq!(s.processes, Some(28211));
    assert_eq!(s.procs_running, Some(1));
    // The per-CPU lines add up to the aggregate within a few ticks (a live read).
    let sum: u64 = s.per_cpu.iter().map(CpuTimes::total).sum();
    assert!(
        s.total.total().abs_diff(sum) < 10,
        "{sum} vs {}",
        s.total.total()
    );
}

#[test]
fn reads_steal_on_the_8_cpu_vm() {
    let s = read_proc_stat(&fixture_root("public/goprocinfo-8vcpu-vm")).unwrap();
    assert_eq!(s.per_cpu.len(), 8);
    let steal: Vec<u64> = s.per_cpu.iter().map(|t| t.steal.unwrap()).collect();
    assert_eq!(steal, vec![865, 868, 837, 842, 879, 872, 881, 885]);
    assert_eq!(s.total.steal, Some(6932));
    assert_eq!(s.total.iowait, Some(7484));
    assert_eq!(s.total.busy(), 10301 + 4212 + 1 + 51);
    assert_eq!(
        s.total.total(),
        10301 + 4212 + 2473164 + 7484 + 1 + 51 + 6932
    );
    assert_eq!((s.ctxt, s.procs_running), (Some(544064), Some(1)));
    // Since boot, steal is 0.28% of this VM's time: from a zero sample to this one.
    let zero = CpuTimes {
        cpu: None,
        user: 0,
        nice: 0,
        system: 0,
        idle: 0,
        iowait: Some(0),
        irq: Some(0),
        softirq: Some(0),
        steal: Some(0),
        guest: Some(0),
        guest_nice: Some(0),
    };
    let f = steal_fraction(&zero, &s.total).unwrap();
    assert!((f - 6932.0 / 2502145.0).abs() < 1e-12, "{f}");
}

#[test]
fn steal_fraction_between_two_real_samples() {
    let t0 = parse_proc_stat(KVM_STAT_T0).unwrap();
    let t1 = parse_proc_stat(KVM_STAT_T1).unwrap();
    // Steal did not move during the capture on the development VM.
    assert_eq!(steal_fraction(&t0.total, &t1.total), Some(0.0));
    assert!(t1.total.total() > t0.total.total());
    assert_eq!(steal_fraction(&t1.total, &t1.total), None, "no time passed");
    let mut old = t1.total;
    old.steal = None;
    old.iowait = None;
    assert_eq!(steal_fraction(&old, &t1.total), None, "no steal column");
    // Samples in the wrong order saturate instead of wrapping.
    assert_eq!(steal_fraction(&t1.total, &t0.total), None);
}

#[test]
fn older_kernels_columns_are_none() {
    let s = parse_proc_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
    assert_eq!(
        (s.total.iowait, s.total.steal, s.total.guest_nice),
        (None, None, None)
    );
    assert_eq!((s.ctxt, s.btime), (None, None));
    let s = parse_proc_stat("cpu 1 2 3 4 5 6 7 8\n").unwrap();
    assert_eq!((s.total.steal, s.total.guest), (Some(8), None));
}

#[test]
fn bad_proc_stat_names_the_line() {
    let e = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 x 4\n").unwrap_err();
    assert!(
        e.to_string().contains("line 2") && e.to_string().contains("'x'"),
        "{e}"
    );
    assert!(
        parse_proc_stat("")
            .unwrap_err()
            .to_string()
            .contains("no aggregate")
    );
    assert!(parse_proc_stat("cpu 1 2 3\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4\ncpu 1 2 3 4\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\ncpu0 1 2 3 4\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4\ncpuX 1 2 3 4\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4\nctxt\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4\nctxt -5\n").is_err());
    assert!(parse_proc_stat("cpu 1 2 3 4 99999999999999999999999\n").is_err());
}

#[test]
fn parses_softirqs_and_their_deltas() {
    let t = parse_softirqs(KVM_SOFTIRQS).unwrap();
    assert_eq!(t.cpus, vec![0, 1]);
    let names: Vec<&str> = t.rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
            "RCU"
        ]
    );
    let t0 = parse_softirqs(KVM_SOFTIRQS_T0).unwrap();
    let t1 = parse_softirqs(KVM_SOFTIRQS_T1).unwrap();
    let on = |cpus: &[u32]| softirqs_on_cpus(&t0, &t1, cpus).unwrap();
    let get = |rows: &[(String, u64)], name: &str| rows.iter().find(|(n, _)| n == name).unwrap().1;
    // Network traffic was made between the captures: NET_RX ran on both CPUs.
    assert_eq!(get(&on(&[0]), "NET_RX"), 6);
    assert_eq!(get(&on(&[1]), "NET_RX"), 6);
    assert_eq!(get(&on(&[0, 1]), "BLOCK"), 48);
    assert_eq!(get(&on(&[]), "TIMER"), 0);
    assert_eq!(on(&[0]).len(), 10);
    assert!(
        softirqs_on_cpus(&t1, &t0, &[0, 1])
            .unwrap()
            .iter()
            .all(|r| r.1 == 0)
    );
    let mut other = t1.clone();
    other.cpus = vec![0, 2];
    assert!(softirqs_on_cpus(&t0, &other, &[0]).is_err());
    assert_eq!(read_softirqs(&dev_vm()).unwrap(), t);
}

#[test]
fn bad_softirqs_name_the_line() {
    assert!(parse_softirqs("").is_err());
    let e = parse_softirqs("CPU0 CPU1\nHI: 0 0\nTIMER: 1\n").unwrap_err();
    assert!(e.to_string().contains("line 3"), "{e}");
    assert!(parse_softirqs("CPU0\nHI: 0\nHI: 0\n").is_err());
    assert!(parse_softirqs("CPU0\nHI 0\n").is_err());
    assert!(parse_softirqs("CPU0\nHI: 0 extra\n").is_err());
}

#[test]
fn parses_captured_task_files() {
    // `cat` reading its own files: a fresh process that has not switched yet.
    assert_eq!(
        parse_task_status(SELF_STATUS).unwrap(),
        TaskSwitches {
            voluntary: Some(0),
            nonvoluntary: Some(0)
        }
    );
    let st = parse_task_stat(SELF_STAT).unwrap();
    assert_eq!((st.utime_ticks, st.stime_ticks), (0, 0));
    assert!(st.processor.is_some_and(|p| p < 2));
    assert_eq!(parse_task_sched_migrations(SELF_SCHED), Some(0));
}

#[test]
fn a_command_name_with_spaces_and_parentheses_is_skipped_whole() {
    // A real process whose executable was named "q) x (y": its stat line reads
    // "28607 (q) x (y) S 28606 …", so splitting at the first ')' would misread every field.
    assert!(ODD_STAT.starts_with("28607 (q) x (y) S "));
    let st = parse_task_stat(ODD_STAT).unwrap();
    assert_eq!(
        st,
        TaskStat {
            utime_ticks: 108,
            stime_ticks: 8,
            processor: Some(1)
        }
    );
    assert_eq!(
        parse_task_status(ODD_STATUS).unwrap(),
        TaskSwitches {
            voluntary: Some(148),
            nonvoluntary: Some(222)
        }
    );
    assert_eq!(parse_task_sched_migrations(ODD_SCHED), Some(7));
}

#[test]
fn task_readers_take_pid_and_tid() {
    let root = dev_vm();
    assert_eq!(
        read_task_stat(&root, 28607, 28607).unwrap().utime_ticks,
        108
    );
    assert_eq!(
        read_task_switches(&root, 28607, 28607)
            .unwrap()
            .nonvoluntary,
        Some(222)
    );
    assert_eq!(
        read_task_sched_migrations(&root, 28607, 28607).unwrap(),
        Some(7)
    );
    // A kernel without CONFIG_SCHED_DEBUG has no sched file: unknown, not an error.
    assert_eq!(read_task_sched_migrations(&root, 1, 1).unwrap(), None);
    assert!(matches!(
        read_task_stat(&root, 1, 1),
        Err(ProcStatError::Read(_))
    ));
}

#[test]
fn bad_task_files() {
    assert!(parse_task_stat("").is_err());
    assert!(parse_task_stat("1 (x) S 1 2").is_err());
    let short = "1 (x) S 0 0 0 0 0 0 0 0 0 0 5 6";
    assert_eq!(
        parse_task_stat(short).unwrap(),
        TaskStat {
            utime_ticks: 5,
            stime_ticks: 6,
            processor: None
        }
    );
    assert!(parse_task_stat("1 (x) S 0 0 0 0 0 0 0 0 0 0 -5 6").is_err());
    let e = parse_task_status("Name:\tx\nvoluntary_ctxt_switches:\tmany\n").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert_eq!(
        parse_task_status("Name:\tx\n").unwrap(),
        TaskSwitches {
            voluntary: None,
            nonvoluntary: None
        }
    );
    assert_eq!(parse_task_sched_migrations("se.nr_migrations : x\n"), None);
    assert_eq!(parse_task_sched_migrations(""), None);
}

#[test]
fn truncated_and_garbled_input_never_panics() {
    let texts = [
        KVM_STAT,
        VM8_STAT,
        KVM_SOFTIRQS,
        SELF_STATUS,
        ODD_STAT,
        ODD_STATUS,
        ODD_SCHED,
    ];
    let all = |t: &str| {
        let _ = parse_proc_stat(t);
        let _ = parse_softirqs(t);
        let _ = parse_task_status(t);
        let _ = parse_task_stat(t);
        let _ = parse_task_sched_migrations(t);
    };
    for text in texts {
        for cut in (0..=text.len())
            .step_by(7)
            .filter(|&i| text.is_char_boundary(i))
        {
            all(&text[..cut]);
        }
    }
    // Deterministic pseudo-random corruption from a fixed seed.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let alphabet = b" \t\n:()-0123456789cpuCPUx";
    for text in texts {
        for _ in 0..100 {
            let mut bytes = text.as_bytes().to_vec();
            for _ in 0..6 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let at = (state >> 33) as usize % bytes.len();
                bytes[at] = alphabet[(state >> 17) as usize % alphabet.len()];
            }
            let text = String::from_utf8_lossy(&bytes);
            all(&text);
            if let Ok(s) = parse_proc_stat(&text) {
                let _ = s.total.total();
                let _ = steal_fraction(&s.total, &s.total);
            }
        }
    }
    all("cpu 18446744073709551615 18446744073709551615 18446744073709551615 1\n");
    let huge = parse_proc_stat("cpu 18446744073709551615 1 1 1 1 1 1 1\n").unwrap();
    assert_eq!(huge.total.total(), u64::MAX);
}

#[test]
fn reads_a_process_start_time_and_tells_an_exited_one() {
    assert_eq!(parse_process_start_ticks(SELF_STAT).unwrap(), 164197);
    let root = dev_vm();
    // 14782 has no stat file in the fixture, as an exited process has none.
    match read_process_start_ticks(&root, 14782) {
        Err(ProcStatError::Read(e)) => assert_eq!(e.source.kind(), ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    assert!(parse_process_start_ticks("12 (x) S 1 2").is_err());
    assert!(parse_process_start_ticks("no parenthesis").is_err());
}
