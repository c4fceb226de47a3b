//! The `quietbench` command line as a user meets it: help, and clear errors for bad input.

use std::process::Command;

fn quietbench(args: &[&str]) -> (Option<i32>, String, String) {
    // The tests' own result store and fleet ledger, never the user's.
    let out = Command::new(env!("CARGO_BIN_EXE_quietbench"))
        .env(
            "XDG_DATA_HOME",
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-data"),
        )
        .env_remove("QUIETBENCH_DB")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_names_the_commands_and_the_first_step() {
    let (code, stdout, _) = quietbench(&["--help"]);
    assert_eq!(code, Some(0));
    for word in ["run", "host", "agent", "quietbench run --local"] {
        assert!(stdout.contains(word), "help lacks {word:?}:\n{stdout}");
    }
    let (code, stdout, _) = quietbench(&["run", "--help"]);
    assert_eq!(code, Some(0));
    for flag in [
        "--local",
        "--agent",
        "--probe",
        "--param",
        "--rounds",
        "--duration",
        "--cpus",
        "--json",
    ] {
        assert!(stdout.contains(flag), "run --help lacks {flag}:\n{stdout}");
    }
}

#[test]
fn usage_errors_exit_2_with_the_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&["run"], "--local"),
        (
            &["run", "--local", "--param", "max_prime"],
            "is not KEY=VALUE",
        ),
        (&["run", "--local", "--duration", "0"], "out of range"),
        (&["run", "--local", "--rounds", "0"], "0"),
        (&["run", "--local", "--cpus", "3-1"], "runs backwards"),
        (
            &["run", "--local", "--cpus", "1", "--unpinned"],
            "cannot be used with",
        ),
        (
            &["tune", "--agent", "127.0.0.1:1", "--thp", "sometimes"],
            "invalid value",
        ),
        (&["host"], "--local"),
    ];
    for (args, expected) in cases {
        let (code, _, stderr) = quietbench(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: stderr lacks {expected:?}:\n{stderr}"
        );
    }
}

#[test]
fn tune_without_a_step_says_which_to_choose_under_its_old_name_too() {
    // `prepare` was the command's name before the glossary made one word of host tuning:
    // scripts that call it keep working.
    for name in ["tune", "prepare"] {
        let (code, _, stderr) = quietbench(&[name, "--agent", "127.0.0.1:1"]);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("choose what to tune: --all"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn agent_refusals_reach_the_user_with_exit_1() {
    let cases: &[(&[&str], &str)] = &[
        (&["--param", "nope=1"], "has no parameter 'nope'"),
        (&["--probe", "cpu.nope"], "unknown probe 'cpu.nope'"),
        (&["--cpus", "4000"], "CPU 4000 is not available"),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["run", "--local", "--rounds", "1", "--duration", "0.2"];
        args.extend_from_slice(extra);
        let (code, _, stderr) = quietbench(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{args:?}: stderr lacks {expected:?}:\n{stderr}"
        );
        assert!(stderr.contains("refused"), "{stderr}");
    }
}

#[test]
fn host_local_prints_the_cpu_model() {
    let (code, stdout, stderr) = quietbench(&["host", "--local"]);
    assert_eq!(code, Some(0), "{stderr}");
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let model = cpuinfo.lines().find_map(|l| {
        l.strip_prefix("model name")
            .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
    });
    if let Some(model) = model {
        assert!(stdout.contains(&model), "{stdout}");
    }
    for section in [
        "hypervisor",
        "clocksource",
        "ASLR",
        "CPU  role",
        "tuning steps",
        "steal",
    ] {
        assert!(
            stdout.contains(section),
            "host --local lacks {section:?}:\n{stdout}"
        );
    }
    assert!(stdout.contains("housekeeping"), "{stdout}");
    let aslr = std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").unwrap();
    assert!(
        stdout.contains(&format!("ASLR          {}", aslr.trim())),
        "{stdout}"
    );
}

#[test]
fn host_json_carries_the_machine_description() {
    let (code, stdout, stderr) = quietbench(&["host", "--local", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let host: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let fp = &host["fingerprint"];
    let cpus = fp["online_cpus"].as_array().unwrap().len();
    assert_eq!(fp["cpu_roles"].as_array().unwrap().len(), cpus);
    let housekeeping: Vec<_> = fp["cpu_roles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["housekeeping"] == true)
        .collect();
    assert_eq!(housekeeping.len(), 1);
    assert!(fp["topology"]["cores"].as_u64().unwrap() >= 1);
    assert!(fp["kernel"]["aslr"].as_u64().is_some());
    assert_eq!(fp["controls"].as_array().unwrap().len(), 6);
    assert!(fp["cpu_flags"].as_array().is_some());
}

#[test]
fn compare_says_what_it_needs() {
    let (code, _, stderr) = quietbench(&["compare", "--a", "true", "--b", "true"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("say where to measure: --local"), "{stderr}");
    let (code, _, stderr) = quietbench(&["compare", "--local"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--a"), "{stderr}");
    let (code, _, stderr) = quietbench(&["compare", "--runs", "abc"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("2 values required"), "{stderr}");
    let (code, _, stderr) = quietbench(&["compare", "--runs", "x", "y", "--local"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (code, _, stderr) = quietbench(&[
        "compare",
        "--local",
        "--a",
        "t",
        "--b",
        "t",
        "--interleave",
        "rounds",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invocations") && stderr.contains("trials"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.sqlite3");
    let (code, _, stderr) = quietbench(&[
        "compare",
        "--runs",
        "aaaa",
        "bbbb",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("aaaa"), "{stderr}");
}

#[test]
fn a_plan_asking_for_precision_needs_two_variants_and_twenty_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let variant = |name: &str| {
        format!("[[variant]]\nname = \"{name}\"\nprobe = \"exec\"\nparams = {{ cmd = \"true\" }}\n")
    };
    let cases = [
        (
            format!(
                "hosts = \"local\"\nrounds = 30\nprecision_pct = 1\n{}",
                variant("one")
            ),
            "give two or more [[variant]]s",
        ),
        (
            format!(
                "hosts = \"local\"\nrounds = 10\nprecision_pct = 1\n{}{}",
                variant("a"),
                variant("b")
            ),
            "set rounds = 20 or more",
        ),
    ];
    for (text, expected) in cases {
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, text).unwrap();
        let (code, _, stderr) =
            quietbench(&["run", "--plan", path.to_str().unwrap(), "--no-store"]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
}
