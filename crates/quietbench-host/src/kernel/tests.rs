use super::*;

use crate::test_fixtures::{dev_vm, dev_vm_file};

#[test]
fn the_development_vm_cmdline_has_no_isolation_and_stops_at_the_init_arguments() {
    let text = dev_vm_file("proc/cmdline");
    assert!(
        text.contains(" -- "),
        "the capture has init arguments after --"
    );
    let (params, errors) = parse_cmdline(&text);
    assert_eq!(params, BootParams::default());
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn parses_isolation_parameters_appended_to_the_captured_cmdline() {
    let real = dev_vm_file("proc/cmdline");
    let (kernel, init) = real.split_once(" -- ").unwrap();
    let text = format!(
        "{kernel} isolcpus=nohz,domain,managed_irq,1,3-4 nohz_full=1 rcu_nocbs irqaffinity=0 -- isolcpus=9 {init}"
    );
    let (p, errors) = parse_cmdline(&text);
    assert!(errors.is_empty(), "{errors:?}");
    let iso = p.isolcpus.unwrap();
    assert_eq!(iso.flags, vec!["nohz", "domain", "managed_irq"]);
    assert_eq!(
        iso.cpus,
        Some(vec![1, 3, 4]),
        "the isolcpus after -- is init's"
    );
    assert_eq!(p.nohz_full.unwrap().cpus, Some(vec![1]));
    let rcu = p.rcu_nocbs.unwrap();
    assert_eq!((rcu.raw.as_str(), rcu.cpus), ("", Some(vec![])));
    assert_eq!(p.irqaffinity.unwrap().cpus, Some(vec![0]));
}

#[test]
fn a_list_it_cannot_parse_is_kept_raw_with_an_error() {
    let (p, errors) = parse_cmdline("quiet isolcpus=1-N nohz_full=\"2-3\"\n");
    let iso = p.isolcpus.unwrap();
    assert_eq!((iso.raw.as_str(), iso.cpus), ("1-N", None));
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].to_string().contains("isolcpus=1-N"),
        "{}",
        errors[0]
    );
    assert_eq!(p.nohz_full.unwrap().cpus, Some(vec![2, 3]));
    // Flags with no list, unbalanced quotes, odd bytes: no panic.
    for odd in [
        "isolcpus=domain",
        "isolcpus=\"",
        "\"",
        "isolcpus=,,",
        "=\u{0}",
        "isolcpus=é,1",
    ] {
        let _ = parse_cmdline(odd);
    }
}

#[test]
fn the_cmdline_parser_survives_arbitrary_text() {
    let pieces = [
        "isolcpus=",
        "nohz_full=",
        "\"",
        ",",
        "-",
        "--",
        " ",
        "1",
        "N",
        "é",
        "domain",
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3000 {
        let mut text = String::new();
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(pieces[(x % pieces.len() as u64) as usize]);
        }
        let _ = parse_cmdline(&text);
        let _ = bracketed_choice(&text);
        let _ = has_hypervisor_flag(&text);
    }
}

#[test]
fn parses_aslr_and_thp_from_the_captures() {
    let aslr = dev_vm_file("proc/sys/kernel/randomize_va_space");
    assert_eq!(parse_randomize_va_space(&aslr).unwrap(), Aslr::Full);
    assert!(parse_randomize_va_space("3").is_err());
    let enabled = dev_vm_file("sys/kernel/mm/transparent_hugepage/enabled");
    assert_eq!(bracketed_choice(&enabled).as_deref(), Some("madvise"));
    let defrag = dev_vm_file("sys/kernel/mm/transparent_hugepage/defrag");
    assert_eq!(defrag.split_whitespace().count(), 5);
    assert_eq!(bracketed_choice(&defrag).as_deref(), Some("madvise"));
    for odd in ["", "[", "]", "[]", "a ] [b", "[ ]"] {
        assert_eq!(bracketed_choice(odd), None, "{odd:?}");
    }
}

#[test]
fn the_captured_cpuinfo_has_the_hypervisor_flag() {
    assert!(has_hypervisor_flag(&dev_vm_file("proc/cpuinfo")));
    let metal = include_str!("../../tests/fixtures/public/ec2-t4g-small-graviton2/proc/cpuinfo");
    assert!(!has_hypervisor_flag(metal), "Arm has no such flag");
    assert!(has_hypervisor_flag("fpu hypervisor lahf_lm"));
    assert!(!has_hypervisor_flag("flags : fpu hypervisorx"));
}

#[test]
fn slow_clocksources() {
    for slow in ["xen", "hpet", "acpi_pm\n"] {
        assert!(is_slow_clocksource(slow));
    }
    for fast in ["tsc", "kvm-clock", "arch_sys_counter"] {
        assert!(!is_slow_clocksource(fast));
    }
}

#[test]
fn names_hypervisors_only_from_evidence() {
    let none = HypervisorEvidence::default();
    assert_eq!(identify_hypervisor(&none), None);
    let flag = HypervisorEvidence {
        cpu_flag: true,
        ..none.clone()
    };
    assert_eq!(identify_hypervisor(&flag).unwrap().0, "unknown hypervisor");
    let nitro = HypervisorEvidence {
        dmi_sys_vendor: Some("Amazon EC2".into()),
        dmi_product_name: Some("m5.large".into()),
        ..flag.clone()
    };
    assert_eq!(identify_hypervisor(&nitro).unwrap().0, "Amazon EC2 (Nitro)");
    let metal = HypervisorEvidence {
        cpu_flag: false,
        dmi_product_name: Some("c6g.metal".into()),
        ..nitro.clone()
    };
    assert_eq!(identify_hypervisor(&metal), None);
    let xen_ec2 = HypervisorEvidence {
        sys_hypervisor_type: Some("xen\n".into()),
        sys_hypervisor_uuid: Some("ec2e1916-9099-7caf-fd21-012345abcdef".into()),
        ..flag.clone()
    };
    assert_eq!(identify_hypervisor(&xen_ec2).unwrap().0, "Amazon EC2 (Xen)");
    let xen = HypervisorEvidence {
        sys_hypervisor_uuid: None,
        ..xen_ec2
    };
    assert_eq!(identify_hypervisor(&xen).unwrap().0, "Xen");
}

#[test]
fn reads_the_development_vm() {
    let (k, notes) = read_kernel_settings(&dev_vm(), &[0, 1]);
    assert_eq!(notes, Vec::<String>::new());
    assert_eq!(k.aslr, Some(Aslr::Full));
    assert_eq!(k.thp_enabled.as_deref(), Some("madvise"));
    assert_eq!(k.thp_defrag.as_deref(), Some("madvise"));
    // No cpufreq in this guest: every field None, turbo unknown, never zero or false.
    assert_eq!(k.cpufreq.len(), 2);
    assert!(
        k.cpufreq
            .iter()
            .all(|f| f.governor.is_none() && f.driver.is_none() && f.cur_khz.is_none())
    );
    assert_eq!(k.turbo, None);
    assert_eq!(k.cpuidle_governor.as_deref(), Some("haltpoll"));
    assert_eq!(k.cpuidle_driver.as_deref(), Some("haltpoll"));
    assert_eq!(k.clocksource.as_deref(), Some("tsc"));
    assert_eq!(k.available_clocksources, vec!["tsc", "kvm-clock"]);
    assert_eq!(k.hypervisor.as_deref(), Some("KVM"));
    assert!(k.hypervisor_evidence.unwrap().contains("kvm-clock"));
}

#[test]
fn a_missing_root_notes_the_cmdline_and_invents_nothing() {
    let (k, notes) = read_kernel_settings(&HostRoot::at("/nonexistent/qb"), &[0]);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("/proc/cmdline"));
    assert_eq!((k.aslr, k.turbo, k.hypervisor), (None, None, None));
}
