use super::*;

fn uses(probes: &[&str], local: bool, agents: &[&str]) -> Uses {
    Uses {
        probes: probes.iter().map(|p| p.to_string()).collect(),
        local,
        ec2: false,
        agents: agents.iter().map(|a| a.to_string()).collect(),
    }
}

#[test]
fn globs_match_any_run_of_characters_and_nothing_else() {
    for (pattern, text, want) in [
        ("*", "", true),
        ("*", "cpu.primes", true),
        ("cpu.*", "cpu.primes", true),
        ("cpu.*", "mem.latency", false),
        ("cpu.primes", "cpu.primes", true),
        ("cpu.primes", "cpu.primesx", false),
        ("*.internal:7700", "bench-1.internal:7700", true),
        ("*.internal:7700", "bench-1.internal:7701", false),
        ("10.0.*.*:7700", "10.0.3.4:7700", true),
        ("a*b*c", "aXbYbZc", true),
        ("a*b*c", "aXbYbZ", false),
        ("exec", "exe", false),
    ] {
        assert_eq!(glob(pattern, text), want, "{pattern} ~ {text}");
    }
}

#[test]
fn the_built_in_policy_refuses_exec_and_ec2_and_makes_loopback_owners_admins() {
    let policy = Policy::built_in(1000);
    assert!(policy.is_admin("uid 1000") && policy.is_admin("uid 0"));
    assert!(!policy.is_admin("client ci") && !policy.is_admin("anonymous"));
    assert_eq!(Policy::built_in(0).admins(), ["uid 0"]);
    let ok = uses(
        &["cpu.primes", "disk.seq", "net.rr"],
        false,
        &["10.0.0.1:7700"],
    );
    assert_eq!(policy.check("client ci", &ok), Ok(()));
    assert_eq!(policy.check("client ci", &uses(&[], true, &[])), Ok(()));
    let exec = policy
        .check("client ci", &uses(&["cpu.primes", "exec"], true, &[]))
        .unwrap_err();
    assert!(matches!(exec, Denied::Exec { .. }), "{exec:?}");
    // http starts the user's server: a command too.
    let http = policy
        .check("client ci", &uses(&["http"], true, &[]))
        .unwrap_err();
    assert!(matches!(http, Denied::Exec { .. }), "{http:?}");
    let tcp = policy
        .check("client ci", &uses(&["tcp"], true, &[]))
        .unwrap_err();
    assert!(matches!(tcp, Denied::Exec { .. }), "{tcp:?}");
    let said = exec.to_string();
    assert!(
        said.contains("exec = false in the built-in policy"),
        "{said}"
    );
    // The service's own user and root, on loopback, are not held back: they can read
    // everything the service holds and run quietbench themselves.
    for owner in ["uid 1000", "uid 0"] {
        let everything = Uses {
            ec2: true,
            ..uses(&["exec"], true, &["10.0.0.1:7700"])
        };
        assert_eq!(policy.check(owner, &everything), Ok(()), "{owner}");
    }
    assert!(
        policy
            .check("uid 1001", &uses(&["exec"], true, &[]))
            .is_err()
    );
    let ec2 = Uses {
        ec2: true,
        ..uses(&["cpu.primes"], false, &[])
    };
    let said = policy.check("client ci", &ec2).unwrap_err().to_string();
    assert!(
        said.contains("on ec2 hosts: fleets = [\"local\", \"static\"]"),
        "{said}"
    );
}

const FILE: &str = r#"
admins = ["client ops"]

[default]
probes = ["cpu.*", "mem.*"]
agents = ["*.bench.internal:7700"]

[caller."client a"]
exec = true
probes = ["*"]
fleets = ["local"]

[caller."client b"]
agents = ["10.0.0.1:7700"]
"#;

#[test]
fn a_file_gives_each_caller_its_entry_over_the_default_and_names_the_rule() {
    let policy = Policy::parse(FILE, "policy.toml", 1000).unwrap();
    assert!(policy.is_admin("client ops"));
    // admins given: the loopback owner is no longer one by default.
    assert!(!policy.is_admin("uid 1000"));

    // a: exec and every probe, on this machine only.
    assert_eq!(
        policy.check("client a", &uses(&["exec"], true, &[])),
        Ok(())
    );
    let static_hosts = policy
        .check(
            "client a",
            &uses(&["exec"], false, &["x.bench.internal:7700"]),
        )
        .unwrap_err()
        .to_string();
    assert!(
        static_hosts.contains(
            "on static hosts: fleets = [\"local\"] in [caller.\"client a\"] of policy.toml"
        ),
        "{static_hosts}"
    );

    // b: the default's probes and fleets, its own agents.
    let rights = policy.rights("client b");
    assert_eq!(rights.probes.from, "[default] of policy.toml");
    assert_eq!(rights.agents.from, "[caller.\"client b\"] of policy.toml");
    assert_eq!(
        rights.exec.from,
        "the built-in policy (absent from policy.toml)"
    );
    assert_eq!(
        policy.check(
            "client b",
            &uses(&["mem.latency"], false, &["10.0.0.1:7700"])
        ),
        Ok(())
    );
    let probe = policy
        .check("client b", &uses(&["disk.seq"], true, &[]))
        .unwrap_err();
    assert_eq!(
        probe.to_string(),
        "the service's policy does not let client b run probe disk.seq: it matches none of \
         probes = [\"cpu.*\", \"mem.*\"] in [default] of policy.toml"
    );
    let agent = policy
        .check(
            "client b",
            &uses(&["cpu.primes"], false, &["10.0.0.2:7700"]),
        )
        .unwrap_err()
        .to_string();
    assert!(agent.contains("use agent 10.0.0.2:7700"), "{agent}");
    assert!(matches!(
        policy.check("client b", &uses(&["exec"], true, &[])),
        Err(Denied::Exec { .. })
    ));

    // Anyone else: [default]; agents compared without case.
    assert_eq!(
        policy.check(
            "client c",
            &uses(&["cpu.primes"], false, &["Node-1.Bench.Internal:7700"])
        ),
        Ok(())
    );
}

#[test]
fn files_with_mistakes_are_refused_with_what_to_write() {
    for (text, expected) in [
        ("admins = [\"ops\"]\n", "'ops' is not a caller"),
        ("[caller.ci]\nexec = true\n", "'ci' is not a caller"),
        ("[default]\nfleets = [\"aws\"]\n", "'aws' is not a fleet"),
        ("[default]\nprobes = [\"\"]\n", "empty pattern"),
        ("[default]\nexecs = true\n", "unknown field"),
        ("admin = []\n", "unknown field"),
        ("[default]\nexec = \"yes\"\n", "policy.toml"),
    ] {
        let err = Policy::parse(text, "policy.toml", 1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{text:?}: {err}");
    }
    let empty = Policy::parse("", "policy.toml", 1000).unwrap();
    assert!(empty.is_admin("uid 1000"));
    assert_eq!(
        empty.rights("client x").exec.value,
        Policy::built_in(1000).rights("client x").exec.value
    );
}
