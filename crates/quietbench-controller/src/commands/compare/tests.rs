//! `compare`'s own logic: the parameters of each side and what it refuses.

use super::*;

#[test]
fn exec_params_carry_the_options() {
    let opts = CompareOptions {
        a: "a".into(),
        b: "b".into(),
        shell: true,
        cwd: Some("/tmp".into()),
        aslr_off: true,
    };
    let p = exec_params(&opts, "gzip -k x");
    assert_eq!(p["cmd"], "gzip -k x");
    assert_eq!(p["shell"], "true");
    assert_eq!(p["aslr"], "off");
    assert_eq!(p["cwd"], "/tmp");
}

#[test]
fn two_servers_share_the_load_and_differ_only_in_their_command() {
    let opts = CompareOptions {
        a: "./v1 --port {port}".into(),
        b: "./v2 --port {port}".into(),
        shell: false,
        cwd: Some("/srv".into()),
        aslr_off: true,
    };
    let shared: BTreeMap<String, String> = [("rate", "500"), ("env.MODE", "fast")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let a = server_params(&opts, &opts.a, &shared);
    let b = server_params(&opts, &opts.b, &shared);
    assert_eq!(a["server"], "./v1 --port {port}");
    assert_eq!(a["server_aslr"], "off");
    assert_eq!(a["server_cwd"], "/srv");
    assert_eq!(a["server_shell"], "false");
    assert_eq!(a["rate"], "500");
    assert_eq!(a["env.MODE"], "fast");
    let differing: Vec<&String> = a.keys().filter(|k| a.get(*k) != b.get(*k)).collect();
    assert_eq!(differing, ["server"]);
    // The split the trial makes of them takes both: nothing left over, nothing refused.
    let split = crate::execute::server::split(&a.into_iter().collect()).unwrap();
    assert_eq!(split.start.command, "./v1 --port {port}");
    assert_eq!(split.load.get("rate").map(String::as_str), Some("500"));
}

#[test]
fn what_cannot_be_measured_is_refused_with_the_way_that_can() {
    let servers = |params: &[(&str, &str)]| Workload::Servers {
        protocol: ServerProbe::Http,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        load_from: Vec::new(),
    };
    let ok = servers(&[("rate", "500")]);
    assert_eq!(
        refusal(&ok, TrialFigure::LatencyP99, Interleave::Trials),
        None
    );
    assert_eq!(
        refusal(&Workload::Commands, TrialFigure::Cpu, Interleave::Duet),
        None
    );
    let why = refusal(&ok, TrialFigure::Median, Interleave::Trials).unwrap();
    assert!(why.contains("p50, p99 or server-cpu"), "{why}");
    let why = refusal(
        &Workload::Commands,
        TrialFigure::LatencyP50,
        Interleave::Trials,
    )
    .unwrap();
    assert!(why.contains("--probe http"), "{why}");
    let why = refusal(&ok, TrialFigure::LatencyP50, Interleave::Invocations).unwrap();
    assert!(why.contains("--interleave trials"), "{why}");
    // Two http servers may run in duet; tcp servers and gRPC calls may not (yet).
    assert_eq!(
        refusal(&ok, TrialFigure::LatencyP50, Interleave::Duet),
        None
    );
    let tcp = Workload::Servers {
        protocol: ServerProbe::Tcp,
        params: BTreeMap::new(),
        load_from: Vec::new(),
    };
    let why = refusal(&tcp, TrialFigure::LatencyP50, Interleave::Duet).unwrap();
    assert!(why.contains("built for --probe http"), "{why}");
    let grpc = servers(&[("grpc", "a.B/C")]);
    let why = refusal(&grpc, TrialFigure::LatencyP50, Interleave::Duet).unwrap();
    assert!(why.contains("not built for grpc="), "{why}");
    for key in ["server", "target", "server_b", "duet", "duet_target"] {
        let why = refusal(
            &servers(&[(key, "x")]),
            TrialFigure::LatencyP50,
            Interleave::Trials,
        )
        .unwrap();
        assert!(why.contains(&format!("--param {key}=")), "{why}");
    }
    // A raw TCP server is judged on the same figures as an HTTP one.
    let tcp = Workload::Servers {
        protocol: ServerProbe::Tcp,
        params: BTreeMap::new(),
        load_from: Vec::new(),
    };
    assert_eq!(tcp.probe(), "tcp");
    assert_eq!(
        refusal(&tcp, TrialFigure::ServerCpu, Interleave::Trials),
        None
    );
    let why = refusal(&tcp, TrialFigure::Cpu, Interleave::Trials).unwrap();
    assert!(why.contains("--probe tcp"), "{why}");
}
