use super::*;

#[test]
fn a_control_is_a_probe_and_its_parameters_with_quoted_values() {
    let (probe, params) =
        parse_control(r#"exec shell=true cmd='exec sleep "$QB_CONTROL"'"#).unwrap();
    assert_eq!(probe, "exec");
    assert_eq!(params["shell"], "true");
    assert_eq!(params["cmd"], r#"exec sleep "$QB_CONTROL""#);
    let (probe, params) = parse_control("cpu.primes").unwrap();
    assert_eq!((probe.as_str(), params.len()), ("cpu.primes", 0));
    assert!(
        parse_control("  ")
            .unwrap_err()
            .contains("give the control's probe")
    );
    assert!(
        parse_control("exec cmd")
            .unwrap_err()
            .contains("not KEY=VALUE")
    );
    assert!(
        parse_control("exec cmd='x")
            .unwrap_err()
            .contains("unterminated")
    );
}

#[test]
fn a_control_goes_back_to_the_text_that_parses_to_it() {
    let parsed = parse_control("exec cmd='./build --fast' n=2").unwrap();
    let text = control_text(parsed.clone());
    assert_eq!(parse_control(&text).unwrap(), parsed);
}

#[test]
fn a_request_file_reads_back_the_request_written() {
    let mut request = RunRequest {
        local: true,
        probes: vec!["exec".into(), "cpu.primes".into()],
        params: vec![("cmd".into(), "./build --fast".into())],
        control: Some(parse_control("exec cmd='./baseline x'").unwrap()),
        figure: Some(TrialFigure::Cpu),
        rounds: 7,
        seed: Some(42),
        duration_ms: 1500,
        cpus: vec![1, 3],
        prewarm: Some(PrewarmPolicy::Never),
        run_id: Some("6f1c1f8e-2d6b-4a4e-9f0a-0c8f7d9f5a11".into()),
        ..RunRequest::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("request.json");
    std::fs::write(&file, request.to_json()).unwrap();
    assert_eq!(RunRequest::read(&file).unwrap(), request);

    let mut spec = Ec2Spec::new("c5.large", 2, "ami-1");
    spec.placement = Some(crate::fleet::ec2::PlacementStrategy::Partition(Some(3)));
    request.local = false;
    request.ec2 = Some(spec);
    std::fs::write(&file, request.to_json()).unwrap();
    assert_eq!(RunRequest::read(&file).unwrap(), request);
}

#[test]
fn a_bad_request_file_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("request.json");
    for (text, reason) in [
        ("{\"local\": true, \"roundz\": 3}", "unknown field `roundz`"),
        (
            "{\"local\": true, \"figure\": \"fastest\"}",
            "figure \"fastest\"",
        ),
        (
            "{\"local\": true, \"rounds\": 0}",
            "--rounds 0 is out of range",
        ),
        ("{}", "no hosts"),
        ("{\"local\": true, \"agents\": [\"a:1\"]}", "not several"),
        ("{\"local\": true", "is not one"),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = format!("{:#}", RunRequest::read(&file).unwrap_err());
        assert!(err.contains(reason), "{text}: {err}");
    }
    let missing = RunRequest::read(&dir.path().join("none.json")).unwrap_err();
    assert!(format!("{missing:#}").contains("cannot read the run request"));
}

#[test]
fn structured_options_become_the_request_and_back() {
    let options = pb::RunOptions {
        agents: vec!["10.0.0.1:7000".into(), "10.0.0.2:7000".into()],
        probes: vec!["cpu.primes".into()],
        params: [("max_prime".to_string(), "--json=/etc/x".to_string())].into(),
        control: "exec cmd=\"./base line\"".into(),
        figure: "cpu".into(),
        rounds: 5,
        warmup: Some(1),
        seed: Some(9),
        duration_ms: 1500,
        interval_ms: 500,
        cpus: vec![1, 3],
        tune: true,
        fail_fast: true,
        reconnect_within_s: Some(0),
        ..Default::default()
    };
    let request = RunRequest::try_from(&options).unwrap();
    assert_eq!(
        request.params,
        [("max_prime".into(), "--json=/etc/x".into())]
    );
    assert_eq!(request.control.as_ref().unwrap().1["cmd"], "./base line");
    assert_eq!(request.reconnect_within(), None);
    assert_eq!(pb::RunOptions::from(&request), options);

    // What the options leave unset is run's default.
    let bare = RunRequest::try_from(&pb::RunOptions {
        local: true,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        bare,
        RunRequest {
            local: true,
            ..RunRequest::default()
        }
    );
    for (options, reason) in [
        (pb::RunOptions::default(), "no hosts"),
        (
            pb::RunOptions {
                local: true,
                duration_ms: 5,
                ..Default::default()
            },
            "--duration 0.005 s is out of range",
        ),
        (
            pb::RunOptions {
                local: true,
                figure: "fastest".into(),
                ..Default::default()
            },
            "figure",
        ),
        (
            pb::RunOptions {
                local: true,
                peers: vec!["p:1".into()],
                ..Default::default()
            },
            "--peer",
        ),
    ] {
        let err = RunRequest::try_from(&options).unwrap_err();
        assert!(err.contains(reason), "{err}");
    }
}
