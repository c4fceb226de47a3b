use super::*;
use crate::ProbeSpec;
use crate::test_params as params;
use std::path::PathBuf;

#[test]
fn splits_words_like_a_shell_without_expanding() {
    assert_eq!(
        split_words("gzip -k  big.txt").unwrap(),
        ["gzip", "-k", "big.txt"]
    );
    assert_eq!(
        split_words(r#"echo 'a b' "c \"d\"" e\ f $HOME"#).unwrap(),
        ["echo", "a b", "c \"d\"", "e f", "$HOME"]
    );
    assert_eq!(split_words("''").unwrap(), [""]);
    assert!(split_words("echo 'open").is_err());
    assert!(split_words("echo \\").is_err());
}

#[test]
fn refuses_bad_parameters_with_reasons() {
    let err = resolve(&params(&[])).unwrap_err();
    assert!(err.to_string().contains("give the command"), "{err}");
    let err = resolve(&params(&[("cmd", "no-such-program-xyz")])).unwrap_err();
    assert!(
        err.to_string().contains("not an executable on PATH"),
        "{err}"
    );
    let err = resolve(&params(&[("cmd", "true"), ("aslr", "maybe")])).unwrap_err();
    assert!(err.to_string().contains("on or off"), "{err}");
    let err = resolve(&params(&[("cmd", "true"), ("cwd", "/nonexistent")])).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    let err = resolve(&params(&[("cmd", "true"), ("bogus", "1")])).unwrap_err();
    assert!(err.to_string().contains("no parameter 'bogus'"), "{err}");
}

fn one_run(pairs: &[(&str, &str)]) -> Result<(u64, u64), String> {
    let spec = resolve(&params(pairs)).unwrap();
    let mut w = ExecWorkload::new(
        &Command {
            program: PathBuf::from(&spec.resolved_params["program"]),
            argv: if spec.resolved_params["shell"] == "true" {
                vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    spec.resolved_params["cmd"].clone(),
                ]
            } else {
                split_words(&spec.resolved_params["cmd"]).unwrap()
            },
            b: None,
            cwd: spec.resolved_params.get("cwd").map(PathBuf::from),
            aslr_off: spec.resolved_params["aslr"] == "off",
            instructions: false,
        },
        &[("QB_TEST".into(), "7".into())],
    )?;
    w.run_once(0)
        .map(|one| (one.wall_ns, one.cpu_ns))
        .map_err(|halt| match halt {
            Halt::Failed(message) => message,
            Halt::Cancelled => "cancelled".into(),
        })
}

fn paired(a: &str, b: &str) -> ExecWorkload {
    let command = Command {
        program: PathBuf::from("/bin/sh"),
        argv: vec!["/bin/sh".into(), "-c".into(), a.into()],
        b: Some((
            PathBuf::from("/bin/sh"),
            vec!["/bin/sh".into(), "-c".into(), b.into()],
        )),
        cwd: None,
        aslr_off: false,
        instructions: false,
    };
    ExecWorkload::new(&command, &[]).unwrap()
}

#[test]
fn paired_mode_times_both_commands_and_each_pairs_ratio() {
    let spec = resolve(&params(&[("cmd", "true"), ("cmd_b", "sleep 0.02")])).unwrap();
    assert_eq!(spec.metric_sets, PAIRED_METRIC_SETS);
    assert_eq!(spec.resolved_params["cmd_b"], "sleep 0.02");

    let mut w = paired("true", "sleep 0.02");
    let mut rec = crate::worker::Recording::new(PAIRED_METRIC_SETS.len());
    for _ in 0..4 {
        assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Recorded);
    }
    for v in 0..6 {
        assert_eq!(rec.hists[v].len(), 4, "metric_set {v}");
    }
    // Each pair's ratios once more under the turn it had: the two turns hold every pair.
    for (a_first, b_first) in [(6, 7), (8, 9)] {
        assert_eq!(
            rec.hists[a_first].len() + rec.hists[b_first].len(),
            4,
            "turns {a_first}, {b_first}"
        );
    }
    // B sleeps 20 ms, so it never takes less, whatever the machine's speed.
    assert!(rec.hists[2].min() >= 20_000_000);
    // Each pair's ratio is its B wall time over its A wall time, so every ratio lies between
    // the slowest A against the fastest B and the fastest A against the slowest B (within the
    // histograms' 0.1% precision). How far above 1 it is depends on how fast the machine
    // starts `true`, so that is not asserted.
    let (a, b, ratio) = (&rec.hists[0], &rec.hists[2], &rec.hists[4]);
    let lowest = b.min() as f64 / a.max() as f64 * 1e6 * 0.99;
    let highest = b.max() as f64 / a.min().max(1) as f64 * 1e6 * 1.01;
    assert!(
        ratio.min() as f64 >= lowest && ratio.max() as f64 <= highest,
        "ratios {}..{} ppm outside {lowest:.0}..{highest:.0}",
        ratio.min(),
        ratio.max()
    );
}

#[test]
fn paired_mode_orders_pairs_at_random() {
    let mut w = paired("true", "true");
    let b_first = (0..1000).filter(|_| w.b_first()).count();
    assert!((400..=600).contains(&b_first), "{b_first} of 1000");
    assert_eq!(pair_ratio_ppm(1_000, 1_030), 1_030_000);
    assert_eq!(pair_ratio_ppm(0, 0), 1);
}

#[test]
fn paired_mode_names_the_command_that_failed() {
    let mut w = paired("true", "echo nope >&2; exit 4");
    let mut rec = crate::worker::Recording::new(PAIRED_METRIC_SETS.len());
    assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Failed);
    let err = w.take_error().unwrap();
    assert!(
        err.starts_with("command B exited with status 4") && err.contains("nope"),
        "{err}"
    );
    let err = resolve(&params(&[("cmd", "true"), ("cmd_b", "")])).unwrap_err();
    assert!(err.to_string().contains("cmd_b"), "{err}");
}

#[test]
fn times_a_real_command_wall_and_cpu() {
    let (wall, cpu) = one_run(&[("cmd", "true")]).unwrap();
    assert!(wall > 0 && cpu <= wall * 4, "wall {wall} cpu {cpu}");
}

#[test]
fn a_failing_command_fails_with_the_tail_of_its_stderr() {
    let err = one_run(&[("cmd", "echo broken >&2; exit 3"), ("shell", "true")]).unwrap_err();
    assert!(
        err.contains("exited with status 3") && err.contains("broken"),
        "{err}"
    );
}

#[test]
fn sets_the_environment_and_working_directory() {
    let dir = std::env::temp_dir();
    let ok = one_run(&[
        (
            "cmd",
            "test \"$QB_TEST\" = 7 -a \"$(pwd)\" = \"$(cd /tmp && pwd)\"",
        ),
        ("shell", "true"),
        ("cwd", dir.to_str().unwrap()),
    ]);
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn aslr_off_reaches_the_child_and_on_is_the_default() {
    // /proc/self/personality of grep is the child's own: 00040000 is ADDR_NO_RANDOMIZE.
    let probe = "grep -q 00040000 /proc/self/personality";
    assert!(one_run(&[("cmd", probe), ("aslr", "off")]).is_ok());
    let err = one_run(&[("cmd", probe)]).unwrap_err();
    assert!(err.contains("exited with status 1"), "{err}");
}

/// Makes personality(2) fail with EPERM in this thread and the processes it forks, as systemd's
/// LockPersonality= or a container's seccomp profile do: a four-instruction seccomp filter.
fn refuse_personality_in_this_thread() {
    use nix::libc;
    // Classic BPF opcodes from linux/filter.h (libc names them only on some targets):
    // BPF_LD|BPF_W|BPF_ABS = 0x00|0x00|0x20, BPF_JMP|BPF_JEQ|BPF_K = 0x05|0x10|0x00,
    // BPF_RET|BPF_K = 0x06|0x00.
    const LD_W_ABS: u16 = 0x20;
    const JMP_JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: JMP_JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_personality as u32,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with these arguments reads `program`, which outlives the calls; the filter
    // only denies personality(2), in this thread and what it forks.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog
            ),
            0,
            "installing the seccomp filter: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[test]
fn a_refused_personality_fails_aslr_off_rather_than_measuring_with_aslr_on() {
    // In a thread of its own: the filter stays with it.
    let (off, on) = std::thread::spawn(|| {
        refuse_personality_in_this_thread();
        (
            one_run(&[("cmd", "true"), ("aslr", "off")]),
            one_run(&[("cmd", "true")]),
        )
    })
    .join()
    .unwrap();
    let err = off.unwrap_err();
    assert!(err.contains("aslr=off cannot be measured here"), "{err}");
    assert!(on.is_ok(), "{on:?}");
    // A command's own exit status 125 is not mistaken for it.
    let err = one_run(&[("cmd", "exit 125"), ("shell", "true"), ("aslr", "off")]).unwrap_err();
    assert!(err.contains("exited with status 125"), "{err}");
}

/// Counting instructions: where the CPU's counters are exposed, a real child's count is
/// plausible and A's and B's are both recorded with their ratio; where they are not (this
/// project's VM), the probe refuses with the reason before anything runs. Whichever branch
/// the machine takes is printed, and each asserts.
#[test]
fn counts_instructions_where_the_pmu_is_exposed_and_refuses_with_the_reason_elsewhere() {
    let asked = resolve(&params(&[
        ("cmd", "true"),
        ("cmd_b", "true"),
        ("counters", "instructions"),
    ]));
    let has_source = std::path::Path::new(crate::perf_counter::CPU_EVENT_SOURCE).exists();
    match asked {
        Err(err) => {
            println!("skipping the counting half: {err}");
            assert!(
                err.to_string().contains("not available on this machine"),
                "{err}"
            );
            if !has_source {
                assert!(err.to_string().contains("is missing"), "{err}");
            }
        }
        Ok(spec) => {
            println!("{} exists: counting", crate::perf_counter::CPU_EVENT_SOURCE);
            assert_eq!(spec.metric_sets, PAIRED_COUNTED_METRIC_SETS);
            let mut w = spec.workload(0).unwrap();
            let mut rec = crate::worker::Recording::new(spec.metric_sets.len());
            for _ in 0..3 {
                assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Recorded);
            }
            for index in [6, 7, 8] {
                assert_eq!(rec.hists[index].len(), 3, "metric set {index}");
            }
            // /bin/true's start-up alone retires tens of thousands of user instructions.
            let a = &rec.hists[6];
            assert!(
                a.min() > 10_000 && a.max() < 100_000_000,
                "{}..{}",
                a.min(),
                a.max()
            );
            // The same program twice: the count barely moves, so the ratio is near 1.
            let ratio = &rec.hists[8];
            assert!(ratio.min() > 900_000 && ratio.max() < 1_100_000);
        }
    }
    let err = resolve(&params(&[("cmd", "true"), ("counters", "cycles")])).unwrap_err();
    assert!(err.to_string().contains("none or instructions"), "{err}");
}

#[test]
fn a_duet_needs_two_commands_and_one_thread() {
    let err = resolve(&params(&[("cmd", "true"), ("duet", "true")])).unwrap_err();
    assert!(err.to_string().contains("give cmd_b"), "{err}");
    let err = resolve(&params(&[
        ("cmd", "true"),
        ("cmd_b", "true"),
        ("duet", "true"),
        ("threads", "2"),
    ]))
    .unwrap_err();
    assert!(err.to_string().contains("threads at 1"), "{err}");
    let spec = resolve(&params(&[
        ("cmd", "true"),
        ("cmd_b", "true"),
        ("duet", "true"),
    ]))
    .unwrap();
    assert_eq!(spec.threads, 2);
    assert_eq!(spec.resolved_params["duet"], "true");
}

/// Runs `steps` steps of a duet spec on two threads, as the runner would.
fn run_duet(spec: &ProbeSpec, steps: usize) -> Vec<crate::worker::Recording> {
    let sets = spec.metric_sets.len();
    let threads: Vec<_> = (0..2)
        .map(|me| {
            let mut w = spec.workload(me).unwrap();
            std::thread::spawn(move || {
                let mut rec = crate::worker::Recording::new(sets);
                for _ in 0..steps {
                    assert_eq!(w.step(&mut Samples { rec: &mut rec }), Step::Recorded);
                }
                w.finish();
                rec
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A duet's sides run at the same time: each side marks a file and waits (up to 10 s) for the
/// other's mark, so run one after the other the first would fail. No clock is asserted.
#[test]
fn a_duet_runs_both_sides_at_the_same_time() {
    let dir = std::env::temp_dir().join(format!("qb-duet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let side = |mine: &str, theirs: &str| {
        format!(
            "touch {d}/{mine}; i=0; while [ ! -e {d}/{theirs} ]; do i=$((i+1)); \
             [ $i -gt 1000 ] && exit 1; sleep 0.01; done",
            d = dir.display()
        )
    };
    let spec = resolve(&params(&[
        ("cmd", &side("a", "b")),
        ("cmd_b", &side("b", "a")),
        ("shell", "true"),
        ("duet", "true"),
    ]))
    .unwrap();
    let recs = run_duet(&spec, 1);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(recs[0].hists[4].len(), 1);
}

/// Each pair is recorded once, whichever thread ran which side: B sleeps 50 ms and A 10 ms,
/// and with the sides swapped every pair each thread ran each side twice in four pairs.
#[test]
fn a_duet_records_each_side_where_it_ran_and_each_pair_once() {
    let spec = resolve(&params(&[
        ("cmd", "sleep 0.01"),
        ("cmd_b", "sleep 0.05"),
        ("duet", "true"),
    ]))
    .unwrap();
    let recs = run_duet(&spec, 4);
    for rec in &recs {
        assert_eq!(rec.hists[0].len(), 2);
        assert_eq!(rec.hists[2].len(), 2);
        // B's side is B's command: never under its 50 ms sleep.
        assert!(rec.hists[2].min() >= 50_000_000);
    }
    // Thread 0 alone records the ratios, one per pair.
    assert_eq!(recs[0].hists[4].len(), 4);
    assert_eq!(recs[0].hists[5].len(), 4);
    assert_eq!(recs[1].hists[4].len(), 0);
    assert!(
        recs[0].hists[4].min() > 1_000_000,
        "{}",
        recs[0].hists[4].min()
    );
}

#[test]
fn a_duet_side_stops_when_the_other_has_left() {
    let spec = resolve(&params(&[
        ("cmd", "true"),
        ("cmd_b", "true"),
        ("duet", "true"),
    ]))
    .unwrap();
    let mut zero = spec.workload(0).unwrap();
    let mut one = spec.workload(1).unwrap();
    one.finish();
    let mut rec = crate::worker::Recording::new(spec.metric_sets.len());
    assert_eq!(zero.step(&mut Samples { rec: &mut rec }), Step::Finished);
}
