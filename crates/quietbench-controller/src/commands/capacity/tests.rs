use super::*;
use crate::verdicts::capacity::Slo;

fn request() -> CapacityRequest {
    CapacityRequest {
        context: crate::context::CommandContext::default(),
        builds: vec!["./server --port {port}".into()],
        shell: false,
        cwd: None,
        aslr_off: false,
        protocol: ServerProbe::Http,
        params: BTreeMap::new(),
        load_from: Vec::new(),
        local: true,
        agents: Vec::new(),
        ec2: None,
        guards: Guards {
            slo: Slo::parse("p99<20ms").unwrap(),
            max_errors: 0.01,
        },
        search: SearchConfig {
            start: 100,
            min: 10,
            max: 100_000,
            resolution: 0.05,
            max_steps: 30,
        },
        rounds: 1,
        load_at: Some(50.0),
        load_rounds: 10,
        duration_ms: 3000,
        seed: 7,
        json: None,
        html: None,
        db: None,
        no_store: true,
    }
}

#[test]
fn parameters_the_search_owns_are_refused_with_the_reason() {
    assert_eq!(refusal(&request()), None);
    for (key, value, words) in [
        ("rate", "500", "the search chooses each step's rate"),
        ("server", "./x", "the servers are --a and --b"),
        ("target", "1.2.3.4:80", "the load goes to the server"),
        ("restart", "run", "restart=trial"),
    ] {
        let mut req = request();
        req.params.insert(key.into(), value.into());
        let why = refusal(&req).unwrap();
        assert!(why.contains(words), "{key}: {why}");
    }
    let mut req = request();
    req.guards.max_errors = 1.0;
    assert!(refusal(&req).unwrap().contains("--max-errors"));
    req = request();
    req.builds.clear();
    assert!(refusal(&req).unwrap().contains("give one server"));
}

#[test]
fn each_step_offers_every_searching_build_its_own_rate() {
    let req = CapacityRequest {
        builds: vec!["./a {port}".into(), "./b {port}".into()],
        ..request()
    };
    let mut searches = vec![Search::new(req.search), Search::new(req.search)];
    let mut pending = Vec::new();
    let first = step_variants(&req, &searches, &mut pending);
    let names: Vec<&str> = first.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["A@100", "B@100"]);
    assert_eq!(first[1].params["server"], "./b {port}");
    assert_eq!(first[1].params["rate"], "100");
    assert_eq!(first[1].params["warmup"], "1");
    // A holds, B does not: A doubles, B halves.
    searches[0].record(100, false, Ok(()));
    searches[1].record(100, false, Err("p99 over".into()));
    let next = step_variants(&req, &searches, &mut pending);
    let names: Vec<&str> = next.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["A@200", "B@50"]);
    assert_eq!(pending, [(0, 200, false), (1, 50, false)]);
    assert!(
        failure_reason("x: the load generator fell behind its schedule by 12 ms")
            .starts_with("the load generator could not keep this rate")
    );
}
