//! Splitting an `http` variant's parameters, and the server's figures and notes.

use super::*;

fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_server_keys_go_to_the_server_and_the_rest_to_the_load() {
    let s = split(&params(&[
        ("server", "./srv --port {port}"),
        ("env.RUST_LOG", "warn"),
        ("server_aslr", "off"),
        ("ready_path", "/health"),
        ("rate", "500"),
        ("path", "/search?q=1"),
    ]))
    .unwrap();
    assert_eq!(s.start.command, "./srv --port {port}");
    assert_eq!(
        s.start.env.get("RUST_LOG").map(String::as_str),
        Some("warn")
    );
    assert!(s.start.aslr_off && !s.start.shell);
    assert_eq!(s.start.ready_path, "/health");
    assert_eq!((s.start.threads, s.start.ready_timeout_ms), (1, 10_000));
    assert_eq!(s.load, params(&[("rate", "500"), ("path", "/search?q=1")]));
    assert_eq!(s.server.len(), 4);
    assert_eq!(s.restart, Restart::Trial);
    let kept = split(&params(&[("server", "s"), ("restart", "run")])).unwrap();
    assert_eq!(kept.restart, Restart::Run);
    assert_eq!(
        kept.server.get("restart").map(String::as_str),
        Some("run"),
        "the record keeps it"
    );
    assert!(kept.load.is_empty(), "the load agent never sees it");
}

#[test]
fn more_restart_run_variants_than_an_agent_keeps_are_refused_by_name() {
    let names: Vec<String> = (0..=MAX_KEPT_SERVERS).map(|i| format!("v{i}")).collect();
    let mut variants: Vec<(&str, Option<&str>)> = names
        .iter()
        .take(MAX_KEPT_SERVERS)
        .map(|n| (n.as_str(), Some("run")))
        .collect();
    variants.push(("per-trial", Some("trial")));
    variants.push(("default", None));
    assert!(check_kept_servers(variants.clone()).is_ok());
    variants.push((names[MAX_KEPT_SERVERS].as_str(), Some("run")));
    let err = check_kept_servers(variants).unwrap_err();
    assert!(
        err.contains("this run has 9 such variants (v0, v1,") && err.contains("v8)"),
        "{err}"
    );
    assert!(!err.contains("per-trial"), "{err}");
}

#[test]
fn a_kept_servers_trial_gets_its_share_and_its_note_says_it_was_reused() {
    let before = pb::StopServerResponse {
        stopped: true,
        cpu_ns: 300_000_000,
        peak_rss_bytes: 1 << 20,
        ran_ns: 5,
        ..Default::default()
    };
    let after = pb::StopServerResponse {
        cpu_ns: 420_000_000,
        peak_rss_bytes: 2 << 20,
        ran_ns: 9,
        ..before.clone()
    };
    let share = trial_share(&before, after);
    assert_eq!(
        share.cpu_ns, 120_000_000,
        "this trial's time, not the process's"
    );
    assert_eq!((share.peak_rss_bytes, share.ran_ns), (2 << 20, 9));
    // A sample that went backwards (a group member ended unseen) is no negative time.
    let fewer = pb::StopServerResponse {
        cpu_ns: 1,
        ..before.clone()
    };
    assert_eq!(trial_share(&before, fewer).cpu_ns, 0);

    let started = pb::StartServerResponse {
        pid: 4242,
        cpus: vec![1],
        ready_ns: 12_300_000,
        ..Default::default()
    };
    let note = |reuse| {
        with_server_note(pb::Placement::default(), &started, reuse)
            .notes
            .pop()
            .unwrap()
    };
    assert_eq!(
        note(None),
        "these are the load's threads; the server (pid 4242) ran on CPU 1 of the measured \
         host, ready 12.3 ms after its start"
    );
    let first = note(Some(Reuse {
        first_trial: 3,
        first_round: 1,
        started_here: true,
    }));
    assert!(
        first.contains("(pid 4242)")
            && first.ends_with(
                "started for this trial (trial 3), its CPU time here this trial's share"
            ),
        "{first}"
    );
    let later = note(Some(Reuse {
        first_trial: 3,
        first_round: 1,
        started_here: false,
    }));
    assert!(
        later.contains("(pid 4242)") && later.contains("reused: started for trial 3 (round 1)"),
        "{later}"
    );
}

#[test]
fn a_kept_server_gone_between_trials_is_named_with_its_stderr() {
    let gone = pb::StopServerResponse {
        stopped: true,
        exited_early: true,
        ended: "killed by signal 9 (SIGKILL)".into(),
        stderr_tail: "listening on 127.0.0.1:4000\n".into(),
        ..Default::default()
    };
    assert_eq!(
        ended_between_trials(77, 2, &gone),
        "the server kept for the run (restart=run, pid 77, started for trial 2) killed by \
         signal 9 (SIGKILL) between trials, before this one; its stderr ended with: \
         listening on 127.0.0.1:4000"
    );
}

#[test]
fn bad_server_parameters_say_which_and_why() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("rate", "5")], "http needs the server to start"),
        (&[("server", "  ")], "http needs the server to start"),
        (
            &[("server", "s"), ("target", "10.0.0.9:80")],
            "not yours to set",
        ),
        (
            &[("server", "s"), ("server_aslr", "maybe")],
            "server_aslr='maybe'",
        ),
        (
            &[("server", "s"), ("server_shell", "yes")],
            "server_shell='yes'",
        ),
        (&[("server", "s"), ("server_threads", "0")], "from 1 to 64"),
        (
            &[("server", "s"), ("ready_timeout_ms", "999999")],
            "from 1 to 120000",
        ),
        (
            &[("server", "s"), ("ready_path", "health")],
            "starts with /",
        ),
        (
            &[("server", "s"), ("restart", "often")],
            "restart='often': give trial",
        ),
        (&[("server", "s"), ("env.", "x")], "with a name"),
        (&[("server", "s"), ("server_b", "b")], "give duet=true too"),
        (
            &[("server", "s"), ("duet", "true")],
            "give server B's command",
        ),
        (
            &[("server", "s"), ("duet", "yes")],
            "duet='yes': give true or false",
        ),
        (
            &[
                ("server", "s"),
                ("duet", "true"),
                ("server_b", "b"),
                ("restart", "run"),
            ],
            "restart=run is not for a duet",
        ),
    ];
    for (given, expected) in cases {
        let err = split(&params(given)).unwrap_err();
        assert!(err.contains(expected), "{given:?}: {err}");
    }
}

#[test]
fn a_duets_server_b_is_server_as_settings_with_bs_command() {
    let s = split(&params(&[
        ("server", "./a --port {port}"),
        ("server_b", " ./b --port {port} "),
        ("duet", "true"),
        ("server_threads", "2"),
        ("rate", "100"),
    ]))
    .unwrap();
    let b = s.duet_b.expect("server B");
    assert_eq!(b.command, "./b --port {port}");
    assert_eq!(b.threads, 2);
    assert_eq!(
        pb::StartServerRequest {
            command: s.start.command.clone(),
            ..b
        },
        s.start
    );
    // Neither goes to the load.
    assert!(!s.load.contains_key("server_b") && !s.load.contains_key("duet"));
    assert_eq!(s.server["duet"], "true");
    let alone = split(&params(&[("server", "s"), ("duet", "false")])).unwrap();
    assert!(alone.duet_b.is_none());
}

#[test]
fn the_load_takes_every_cpu_the_server_does_not() {
    assert_eq!(load_cpus_beside(&[1], &[0, 1]), vec![0]);
    assert_eq!(load_cpus_beside(&[2, 3], &[0, 1, 2, 3]), vec![0, 1]);
    assert!(load_cpus_beside(&[], &[0, 1]).is_empty());
}

#[test]
fn cpu_per_request_needs_requests_and_an_early_exit_is_explained() {
    let stopped = pb::StopServerResponse {
        stopped: true,
        cpu_ns: 2_000_000,
        peak_rss_bytes: 4096,
        exited_early: false,
        ended: "stopped by SIGTERM".into(),
        stderr_tail: String::new(),
        ran_ns: 1,
    };
    let figures = server_metrics(&stopped, Some(1000.0));
    let per = figures
        .iter()
        .find(|f| f.name == quietbench_vocab::metrics::SERVER_CPU_PER_REQUEST)
        .unwrap();
    assert_eq!(per.value, 2000.0);
    assert_eq!(server_metrics(&stopped, Some(0.0)).len(), 2);
    assert!(ended_early(&stopped).is_none());
    let early = pb::StopServerResponse {
        exited_early: true,
        ended: "exited with status 3".into(),
        stderr_tail: "out of memory\n".into(),
        ..stopped
    };
    let why = ended_early(&early).unwrap();
    assert!(
        why.contains("exited with status 3") && why.contains("out of memory"),
        "{why}"
    );
}
