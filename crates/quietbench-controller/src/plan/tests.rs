//! The plan parser against docs/plan-example.toml and every error it gives.

use super::*;

const EXAMPLE: &str = include_str!("../../../../docs/plan-example.toml");

/// A valid plan with `extra` top-level lines inserted after `hosts` (so line numbers in the
/// tests below are known: `extra`'s first line is line 2).
fn plan_with(extra: &str) -> String {
    format!("hosts = \"local\"\n{extra}\n[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n")
}

fn error(text: &str) -> PlanError {
    parse_plan(text, 7).expect_err("the plan should be refused")
}

fn message(text: &str) -> String {
    error(text).to_string()
}

fn at(line: usize, column: usize) -> Location {
    Location { line, column }
}

#[test]
fn the_example_plan_parses_to_its_settings() {
    let plan = parse_plan(EXAMPLE, 7).unwrap();
    assert!(plan.local);
    assert!(plan.agents.is_empty());
    assert!(plan.peers.is_empty());
    assert_eq!(plan.precision, Some(0.005));
    assert_eq!(plan.budget, Some(Duration::from_secs(600)));
    let s = &plan.settings;
    assert_eq!(s.probes, ["exec"]);
    assert!(s.params.is_empty());
    assert_eq!(s.rounds, 20);
    assert_eq!(s.warmup, 2);
    assert_eq!(s.duration_ms, 3000);
    assert_eq!(s.interval_ms, 1000);
    assert_eq!(s.seed, 42);
    assert_eq!(s.cpus, [1, 2, 3]);
    assert!(!s.tune);
    assert!(!s.unpinned);
    let cmd = |c: &str| BTreeMap::from([("cmd".to_string(), c.to_string())]);
    assert_eq!(
        s.variants,
        [
            VariantSpec {
                name: "baseline".into(),
                probe: "exec".into(),
                params: cmd("gzip -k -f big.txt"),
            },
            VariantSpec {
                name: "candidate".into(),
                probe: "exec".into(),
                params: cmd("pigz -k -f big.txt"),
            },
        ]
    );
}

#[test]
fn leaves_out_take_the_command_lines_defaults_and_the_callers_seed() {
    let plan = parse_plan(&plan_with(""), 99).unwrap();
    let s = &plan.settings;
    assert_eq!(s.seed, 99);
    assert_eq!((s.rounds, s.warmup), (3, 0));
    assert_eq!((s.duration_ms, s.interval_ms), (3000, 1000));
    assert!(s.cpus.is_empty() && !s.tune && !s.unpinned);
    assert_eq!(s.probes, ["cpu.primes"]);
    assert!(s.variants[0].params.is_empty());
    assert_eq!((plan.precision, plan.budget), (None, None));
}

#[test]
fn the_default_interval_shortens_to_a_short_trial() {
    let s = parse_plan(&plan_with("duration_s = 0.25"), 0)
        .unwrap()
        .settings;
    assert_eq!((s.duration_ms, s.interval_ms), (250, 250));
}

#[test]
fn integer_seconds_and_string_seeds_are_accepted() {
    let plan = parse_plan(
        &plan_with("duration_s = 2\ninterval_s = 2\nseed = \"18446744073709551615\""),
        0,
    )
    .unwrap();
    assert_eq!(plan.settings.duration_ms, 2000);
    assert_eq!(plan.settings.interval_ms, 2000);
    assert_eq!(plan.settings.seed, u64::MAX);
}

#[test]
fn probes_are_distinct_in_order_and_params_become_text() {
    let text = r#"
hosts = ["10.0.0.5:7700", "[fe80::1]:7700", "db-1.internal:7700"]
peers = ["10.0.0.9:7700"]
[[variant]]
name = "small"
probe = "cpu.primes"
params = { max_prime = 20000, threads = 2, ratio = 2.5, whole = 2.0, shell = true, mode = "x" }
[[variant]]
name = "read"
probe = "disk.read"
[[variant]]
name = "big"
probe = "cpu.primes"
"#;
    let plan = parse_plan(text, 0).unwrap();
    assert!(!plan.local);
    assert_eq!(
        plan.agents,
        ["10.0.0.5:7700", "[fe80::1]:7700", "db-1.internal:7700"]
    );
    assert_eq!(plan.peers, ["10.0.0.9:7700"]);
    assert_eq!(plan.settings.probes, ["cpu.primes", "disk.read"]);
    let params: Vec<(&str, &str)> = plan.settings.variants[0]
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        params,
        [
            ("max_prime", "20000"),
            ("mode", "x"),
            ("ratio", "2.5"),
            ("shell", "true"),
            ("threads", "2"),
            ("whole", "2"),
        ]
    );
}

#[test]
fn params_can_be_a_sub_table() {
    // The form docs/plans.md shows.
    let text = "hosts = \"local\"\n[[variant]]\nname = \"4 threads\"\n\
                probe = \"cpu.primes\"\n[variant.params]\nthreads = 4\nmax_prime = 20000\n";
    let params = &parse_plan(text, 0).unwrap().settings.variants[0].params;
    assert_eq!(params["threads"], "4");
    assert_eq!(params["max_prime"], "20000");
}

#[test]
fn one_peer_per_host_is_accepted() {
    let text = "hosts = [\"a:1\", \"b:1\"]\npeers = [\"c:1\", \"d:1\"]\n\
                [[variant]]\nname = \"n\"\nprobe = \"net.tcp_rr\"\n";
    assert_eq!(parse_plan(text, 0).unwrap().peers, ["c:1", "d:1"]);
}

#[test]
fn unknown_fields_are_errors_that_name_the_field_and_line() {
    let msg = message(&plan_with("rounds = 5\nwarmpu = 2"));
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("unknown field `warmpu`"), "{msg}");
    assert!(
        msg.contains("`warmup`"),
        "lists the fields it expected: {msg}"
    );

    let msg = message(&format!("{}paramz = {{ cmd = \"true\" }}\n", plan_with("")));
    assert!(msg.contains("line 6"), "{msg}");
    assert!(msg.contains("unknown field `paramz`"), "{msg}");
}

#[test]
fn wrong_types_and_missing_fields_name_the_line() {
    let msg = message(&plan_with("rounds = \"five\""));
    assert!(
        msg.contains("line 2") && msg.contains("invalid type"),
        "{msg}"
    );

    let msg = message("[[variant]]\nname = \"a\"\nprobe = \"exec\"\n");
    // hosts may come from [fleet] instead, so its absence is one sentence naming both.
    assert!(
        msg.contains("names no hosts") && msg.contains("[fleet]"),
        "{msg}"
    );

    let msg = message(&format!(
        "{}params = {{ cmd = [\"a\", \"b\"] }}\n",
        plan_with("")
    ));
    assert!(msg.contains("line 6"), "{msg}");
    assert!(msg.contains("string, integer, float or boolean"), "{msg}");

    let msg = message(&plan_with("seed = -1"));
    assert!(msg.contains("line 2") && msg.contains("-1"), "{msg}");

    let msg = message("hosts = \"remote\"\n");
    assert!(
        msg.contains("line 1") && msg.contains("\"local\" or a list"),
        "{msg}"
    );

    let msg = message("this is not toml");
    assert!(msg.contains("line 1"), "{msg}");
}

#[test]
fn a_plan_needs_a_variant() {
    assert!(matches!(
        error("hosts = \"local\"\n"),
        PlanError::NoVariants
    ));
    assert!(message("hosts = \"local\"\n").contains("[[variant]]"));
}

#[test]
fn variant_names_are_unique_and_fields_not_empty() {
    let twice = format!(
        "{}[[variant]]\nname = \"a\"\nprobe = \"exec\"\n",
        plan_with("")
    );
    match error(&twice) {
        PlanError::Duplicate {
            field,
            value,
            at: second,
            first,
            ..
        } => {
            assert_eq!((field, value.as_str()), ("variant name", "a"));
            assert_eq!((first, second), (at(4, 8), at(7, 8)));
        }
        other => panic!("{other}"),
    }
    assert!(message(&twice).contains("line 7, column 8"));

    let no_name = "hosts = \"local\"\n[[variant]]\nname = \" \"\nprobe = \"exec\"\n";
    assert!(matches!(
        error(no_name),
        PlanError::Empty { field: "name", at: l, .. } if l == at(3, 8)
    ));
    let no_probe = "hosts = \"local\"\n[[variant]]\nname = \"a\"\nprobe = \"\"\n";
    assert!(matches!(
        error(no_probe),
        PlanError::Empty { field: "probe", at: l, .. } if l == at(4, 9)
    ));
}

#[test]
fn numbers_out_of_range_say_the_range_and_line() {
    for (line, field, range) in [
        ("rounds = 0", "rounds", "1 to 100000"),
        ("rounds = 100001", "rounds", "1 to 100000"),
        ("rounds = -3", "rounds", "1 to 100000"),
        ("warmup = 1001", "warmup", "0 to 1000"),
        ("duration_s = 0.001", "duration_s", "0.01 to 3600 seconds"),
        ("duration_s = 3601", "duration_s", "0.01 to 3600 seconds"),
        ("duration_s = nan", "duration_s", "0.01 to 3600 seconds"),
        ("interval_s = 0", "interval_s", "0.01 to 3600 seconds"),
        (
            "precision_pct = 0",
            "precision_pct",
            "above 0 and below 100",
        ),
        (
            "precision_pct = 100",
            "precision_pct",
            "above 0 and below 100",
        ),
        ("budget_s = 0.5", "budget_s", "1 to 604800 seconds"),
    ] {
        let err = error(&plan_with(line));
        assert!(
            matches!(&err, PlanError::OutOfRange { field: f, at: l, .. }
                if *f == field && *l == at(2, field.len() + 4)),
            "{line}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.starts_with("line 2, column"), "{msg}");
        assert!(msg.contains(range), "{line}: {msg}");
    }
}

#[test]
fn a_stated_interval_must_fit_in_the_trial() {
    let err = error(&plan_with("duration_s = 1.0\ninterval_s = 2.0"));
    assert!(
        matches!(err, PlanError::IntervalOverDuration { at: l, .. } if l == at(3, 14)),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("interval_s = 2 is longer than duration_s = 1")
    );
}

#[test]
fn hosts_and_peers_are_host_port() {
    assert!(matches!(
        error(&plan_with("").replace("\"local\"", "[]")),
        PlanError::NoHosts { at: l } if l == at(1, 9)
    ));
    for (address, why) in [
        ("10.0.0.5", "no :PORT"),
        (":7700", "no host"),
        ("h:0", "1 to 65535"),
        ("h:70000", "1 to 65535"),
        ("h:x", "1 to 65535"),
        ("::1:7700", "brackets"),
        ("h :1", "space"),
    ] {
        let text = plan_with("").replace("\"local\"", &format!("[\"a:1\", \"{address}\"]"));
        let err = error(&text);
        assert!(
            matches!(&err, PlanError::BadAddress { field: "hosts", at: l, .. }
                if *l == at(1, 17)),
            "{address}: {err:?}"
        );
        assert!(err.to_string().contains(why), "{address}: {err}");
    }
    let text = plan_with("peers = [\"p\"]").replace("\"local\"", "[\"a:1\"]");
    assert!(matches!(
        error(&text),
        PlanError::BadAddress { field: "peers", at: l, .. } if l == at(2, 10)
    ));
    let text = plan_with("").replace("\"local\"", "[\"a:1\", \"b:2\", \"a:1\"]");
    assert!(matches!(
        error(&text),
        PlanError::Duplicate { field: "host", first, at: l, .. }
            if first == at(1, 10) && l == at(1, 24)
    ));
}

#[test]
fn peers_are_one_or_one_per_host_and_not_for_local_runs() {
    let text =
        plan_with("peers = [\"p:1\", \"q:1\"]").replace("\"local\"", "[\"a:1\", \"b:1\", \"c:1\"]");
    let err = error(&text);
    assert!(
        matches!(err, PlanError::PeerCount { peers: 2, hosts: 3, at: l } if l == at(2, 9)),
        "{err:?}"
    );
    assert!(matches!(
        error(&plan_with("peers = [\"p:1\"]")),
        PlanError::PeersWithLocal { at: l } if l == at(2, 9)
    ));
    // An empty list is no peers, also for a local run.
    assert!(parse_plan(&plan_with("peers = []"), 0).is_ok());
}

#[test]
fn cpus_are_a_kernel_list_and_exclude_unpinned() {
    assert_eq!(
        parse_plan(&plan_with("cpus = \"0,2-3\""), 0)
            .unwrap()
            .settings
            .cpus,
        [0, 2, 3]
    );
    let err = error(&plan_with("cpus = \"2-x\""));
    assert!(
        matches!(&err, PlanError::BadCpus { at: l, .. } if *l == at(2, 8)),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("'x'") || err.to_string().contains("2-x"),
        "{err}"
    );
    assert!(matches!(
        error(&plan_with("cpus = \" \"")),
        PlanError::Empty { field: "cpus", .. }
    ));
    assert!(matches!(
        error(&plan_with("cpus = \"1\"\nunpinned = true")),
        PlanError::CpusWithUnpinned { at: l } if l == at(2, 8)
    ));
    assert!(
        parse_plan(&plan_with("unpinned = true"), 0)
            .unwrap()
            .settings
            .unpinned
    );
}

#[test]
fn read_plan_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let err = read_plan(&missing, 0).unwrap_err();
    assert!(matches!(err, PlanError::Read { .. }));
    assert!(err.to_string().contains("missing.toml"), "{err}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, plan_with("rounds = 0")).unwrap();
    let msg = read_plan(&bad, 0).unwrap_err().to_string();
    assert!(msg.contains("bad.toml") && msg.contains("line 2"), "{msg}");

    let good = dir.path().join("good.toml");
    std::fs::write(&good, EXAMPLE).unwrap();
    assert_eq!(read_plan(&good, 0).unwrap().settings.seed, 42);
}

#[test]
fn locates_lines_and_character_columns() {
    assert_eq!(locate("", 0), at(1, 1));
    assert_eq!(locate("ab\ncd", 4), at(2, 2));
    assert_eq!(locate("é = 1\nx", 4), at(1, 4));
    assert_eq!(locate("ab", 99), at(1, 3));
}

#[test]
fn a_fleet_table_names_the_hosts_and_the_run_policy() {
    let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
    let plan = parse_plan(
        &format!(
            "[fleet]\nkind = \"static\"\nhosts = [\"a:1\", \"b:1\"]\npeers = [\"c:1\"]\n\
             round_sync = false\nfail_fast = true\n{variant}"
        ),
        0,
    )
    .unwrap();
    assert!(!plan.local);
    assert_eq!(plan.agents, ["a:1", "b:1"]);
    assert_eq!(plan.peers, ["c:1"]);
    assert!(!plan.settings.round_sync);
    assert!(plan.fail_fast);
    let plan = parse_plan(
        &format!("[fleet]\nkind = \"static\"\nhosts_file = \"hosts.txt\"\n{variant}"),
        0,
    )
    .unwrap();
    assert_eq!(plan.hosts_file, Some(PathBuf::from("hosts.txt")));
    assert!(plan.agents.is_empty());
    assert!(plan.settings.round_sync, "round sync is the default");
    let plan = parse_plan(&format!("[fleet]\nkind = \"local\"\n{variant}"), 0).unwrap();
    assert!(plan.local);
}

#[test]
fn fleet_tables_that_do_not_fit_their_kind_are_refused_with_the_line() {
    let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
    for (head, words) in [
        (
            "[fleet]\nkind = \"ec3\"\n",
            "line 2, column 8: [fleet] kind = \"ec3\" is not a fleet kind",
        ),
        (
            "[fleet]\nkind = \"local\"\nhosts = [\"a:1\"]\n",
            "remove hosts",
        ),
        ("[fleet]\nkind = \"static\"\n", "name the running agents"),
        (
            "[fleet]\nkind = \"static\"\nhosts = [\"a:1\"]\nhosts_file = \"f\"\n",
            "not both",
        ),
        (
            "hosts = \"local\"\n[fleet]\nkind = \"local\"\n",
            "line 1, column 9: hosts is given both",
        ),
        ("[fleet]\nkind = \"static\"\nhosts = [\"a\"]\n", "line 3"),
        ("[fleet]\nkind = \"local\"\nzones = 2\n", "zones"),
        ("rounds = 2\n", "names no hosts"),
    ] {
        let err = parse_plan(&format!("{head}{variant}"), 0).unwrap_err();
        assert!(err.to_string().contains(words), "{head:?}: {err}");
    }
}

#[test]
fn a_tls_table_gives_the_controller_its_identity() {
    let plan = parse_plan(
        &plan_with("[tls]\nca = \"fleet/ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\""),
        7,
    )
    .unwrap();
    let tls = plan.tls.unwrap().relative_to(Path::new("/plans"));
    assert_eq!(tls.ca, PathBuf::from("/plans/fleet/ca.pem"));
    assert_eq!(
        tls.identity,
        Some((PathBuf::from("/plans/c.pem"), PathBuf::from("/plans/c.key")))
    );
    let token = parse_plan(
        &plan_with("[tls]\nca = \"ca.pem\"\ntoken_env = \"FLEET_TOKEN\""),
        7,
    )
    .unwrap();
    assert_eq!(
        token.tls.unwrap().token,
        Some(TokenSource::Env("FLEET_TOKEN".into()))
    );
    for (table, said) in [
        ("cert = \"c.pem\"\nkey = \"c.key\"", "ca is missing"),
        ("ca = \"ca.pem\"\ncert = \"c.pem\"", "cert and key together"),
        (
            "ca = \"ca.pem\"",
            "give cert and key (mutual TLS) or token_file",
        ),
        (
            "ca = \"ca.pem\"\ntoken_file = \"t\"\ntoken_env = \"T\"",
            "not both",
        ),
    ] {
        let e = message(&plan_with(&format!("[tls]\n{table}")));
        assert!(e.starts_with("line 2, column 1: [tls]: "), "{e}");
        assert!(e.contains(said), "{e}");
    }
    assert!(message(&plan_with("[tls]\nca = \"x\"\ncerts = \"y\"")).contains("certs"));
}

#[test]
fn an_ec2_fleet_table_reads_like_the_flags() {
    let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
    let plan = parse_plan(
        &format!(
            "[fleet]\nkind = \"ec2\"\ninstance_type = \"c5.large\"\ncount = 20\n\
             ami = \"ami-0123\"\nsubnets = [\"subnet-a\", \"subnet-b\"]\n\
             allow_from = [\"203.0.113.7/32\"]\nplacement = \"partition:3\"\n\
             cpu_model = \"8275CL\"\ncpu_policy = \"reroll\"\nmax_rerolls = 3\nttl = \"90m\"\n\
             {variant}"
        ),
        0,
    )
    .unwrap();
    let spec = plan.ec2.expect("an EC2 fleet");
    assert_eq!(spec.count, 20);
    assert_eq!(spec.subnets, ["subnet-a", "subnet-b"]);
    assert_eq!(
        spec.placement,
        Some(crate::fleet::ec2::PlacementStrategy::Partition(Some(3)))
    );
    assert_eq!(spec.cpu_policy, crate::fleet::ec2::CpuPolicy::Reroll);
    assert_eq!(spec.max_rerolls, 3);
    assert_eq!(spec.ttl, Duration::from_secs(90 * 60));
    assert!(!plan.local && plan.agents.is_empty());

    // Missing, wrong and misplaced fields name the line.
    let msg = message(&format!(
        "[fleet]\nkind = \"ec2\"\nami = \"ami-1\"\n{variant}"
    ));
    assert!(
        msg.contains("line 1") && msg.contains("instance_type is required"),
        "{msg}"
    );
    let msg = message(&format!(
        "[fleet]\nkind = \"ec2\"\ninstance_type = \"c5.large\"\nami = \"ami-1\"\n\
         tenancy = \"mine\"\n{variant}"
    ));
    assert!(
        msg.contains("line 5") && msg.contains("'mine' is not a tenancy"),
        "{msg}"
    );
    let msg = message(&format!(
        "[fleet]\nkind = \"ec2\"\ninstance_type = \"c5.large\"\nami = \"ami-1\"\n\
         ttl = \"5m\"\n{variant}"
    ));
    assert!(msg.contains("ttl must be at least 10m"), "{msg}");
    let msg = message(&format!(
        "[fleet]\nkind = \"static\"\nhosts = [\"a:1\"]\ncount = 3\n{variant}"
    ));
    assert!(
        msg.contains("line 4") && msg.contains("count belongs to an EC2 fleet"),
        "{msg}"
    );
    let msg = message(&format!(
        "[fleet]\nkind = \"ec2\"\ninstance_type = \"c5.large\"\nami = \"ami-1\"\n\
         hosts = [\"a:1\"]\n{variant}"
    ));
    assert!(msg.contains("launches its own hosts"), "{msg}");
}

#[test]
fn a_figure_is_one_exec_or_http_trials_have() {
    let plan = parse_plan(&plan_with("figure = \"cpu\""), 7).unwrap();
    assert_eq!(plan.settings.exec_figure, Some(TrialFigure::Cpu));
    let plan = parse_plan(&plan_with("figure = \"p99\""), 7).unwrap();
    assert_eq!(plan.settings.exec_figure, Some(TrialFigure::LatencyP99));
    assert_eq!(
        parse_plan(&plan_with(""), 7).unwrap().settings.exec_figure,
        None
    );
    assert_eq!(
        message(&plan_with("figure = \"p95\"")),
        "line 2, column 10: figure = \"p95\": use median, mean, cpu or instructions (exec), \
         or p50, p99 or server-cpu (http)"
    );
}

#[test]
fn a_deeply_nested_plan_is_refused_without_echoing_it_whole() {
    let deep = format!("probes = {}{}\n", "[".repeat(20_000), "]".repeat(20_000));
    let message = error(&deep).to_string();
    assert!(message.contains("line 1"), "{}", &message[..200]);
    assert!(message.len() < 2_000, "{} bytes", message.len());
    assert!(message.contains('…'));
}
