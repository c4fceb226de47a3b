//! What a submitted run becomes: the arguments of `quietbench run` (from structured options or
//! a plan), checked and bounded, the hosts it measures on, what the policy judges it by
//! ([`Uses`]) and its `env.*` values, taken out of its parameters ([`super::secret_env`]). The
//! service never passes a client's path to a command: reports come back through the API, the
//! store is the service's.

use std::collections::BTreeMap;

use quietbench_proto::v1 as pb;
use tonic::Status;

use super::policy::Uses;
use super::secret_env::{self, EnvValues, Workload};
use quietbench_controller::request::RunRequest;

/// The longest plan accepted, bytes.
pub const MAX_PLAN_BYTES: usize = 256 * 1024;
/// The longest string field accepted, bytes.
pub const MAX_FIELD_BYTES: usize = 4096;
/// The most entries a repeated field or map may have.
pub const MAX_ENTRIES: usize = 1024;

/// The host key of a run on the service's own machine.
pub const LOCAL_HOST: &str = "local";

/// A run ready to queue: `quietbench run`'s request, the plan's text when there is one
/// (written in the run's folder as [`PLAN_FILE`], which the request then names), and its hosts.
/// Neither the request nor the plan holds an `env.*` value: those are in `env` only.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The request, without the store, the run id or TLS (the service adds them).
    pub request: RunRequest,
    /// The plan's TOML.
    pub plan_toml: Option<String>,
    /// Host keys ([`host_key`]): "local", or agent addresses (peers included).
    pub hosts: Vec<String>,
    /// What the policy judges.
    pub uses: Uses,
    /// The `env.*` values, for the run's environment.
    pub env: EnvValues,
}

impl Launch {
    /// Refuses `env.*` values where the run's environment does not reach the command: on agents
    /// other than the run's own local one.
    pub fn check_env_reaches(&self) -> Result<(), Status> {
        if self.env.is_empty() || (self.uses.agents.is_empty() && !self.uses.ec2) {
            return Ok(());
        }
        Err(Status::invalid_argument(
            "env.* values reach a command only on the service's own machine (local): the \
             service gives them to the run's environment, never to its parameters, which the \
             run would store and send to its agents; for runs on agents, set the variable in \
             each agent's environment",
        ))
    }
}

/// A plan's file in its run's folder.
pub const PLAN_FILE: &str = "plan.toml";

/// The probe `run` measures when none is given.
const DEFAULT_PROBE: &str = "cpu.primes";

fn field(what: &str, text: &str) -> Result<(), Status> {
    if text.len() > MAX_FIELD_BYTES {
        return Err(Status::invalid_argument(format!(
            "{what} is {} bytes long; at most {MAX_FIELD_BYTES} are accepted",
            text.len()
        )));
    }
    if text.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{what} holds a control character"
        )));
    }
    Ok(())
}

fn entries(what: &str, n: usize) -> Result<(), Status> {
    if n > MAX_ENTRIES {
        return Err(Status::invalid_argument(format!(
            "{what} has {n} entries; at most {MAX_ENTRIES} are accepted"
        )));
    }
    Ok(())
}

/// The host an agent address stands for: an address on loopback is this machine, as `local`
/// is (two agents on one machine share its CPUs); others as given, lower-cased.
pub fn host_key(address: &str) -> String {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        LOCAL_HOST.to_string()
    } else {
        address.to_ascii_lowercase()
    }
}

/// The request of `quietbench run` for structured options.
pub fn from_options(o: &pb::RunOptions) -> Result<Launch, Status> {
    entries("agents", o.agents.len())?;
    entries("peers", o.peers.len())?;
    entries("probes", o.probes.len())?;
    entries("params", o.params.len())?;
    entries("cpus", o.cpus.len())?;
    field("control", &o.control)?;
    field("figure", &o.figure)?;
    for (what, texts) in [
        ("an agent address", &o.agents),
        ("a peer address", &o.peers),
        ("a probe", &o.probes),
    ] {
        for text in texts {
            field(what, text)?;
        }
    }
    for (key, value) in &o.params {
        field("a parameter name", key)?;
        field("a parameter value", value)?;
    }
    // `run` trims a parameter's name and value: a name with blanks around it would be an
    // env.* parameter there that is not one here, and go to the store.
    if let Some(key) = o.params.keys().find(|k| k.trim() != k.as_str()) {
        return Err(Status::invalid_argument(format!(
            "the parameter name {key:?} has blanks around it"
        )));
    }
    let mut request = RunRequest::try_from(o).map_err(Status::invalid_argument)?;
    let mut probes = request.probes.clone();
    if probes.is_empty() {
        probes.push(DEFAULT_PROBE.to_string());
    }
    let params: BTreeMap<String, String> = request
        .params
        .iter()
        .map(|(k, v)| {
            let value = if k.starts_with(secret_env::PREFIX) {
                v.trim()
            } else {
                v
            };
            (k.clone(), value.to_string())
        })
        .collect();
    let mut workloads: Vec<Workload<'_>> = probes
        .iter()
        .map(|probe| Workload {
            label: format!("probe {probe}"),
            probe,
            params: &params,
        })
        .collect();
    if let Some((probe, control_params)) = &request.control {
        workloads.push(Workload {
            label: "the control".into(),
            probe,
            params: control_params,
        });
    }
    let env = secret_env::collect(&workloads)?;
    // The request keeps no env.* value: the run's process gets them by its environment.
    request
        .params
        .retain(|(key, _)| !key.starts_with(secret_env::PREFIX));
    if let Some((_, control_params)) = &mut request.control {
        *control_params = secret_env::without_env(control_params);
    }
    let mut hosts: Vec<String> = Vec::new();
    if o.local {
        hosts.push(LOCAL_HOST.to_string());
    }
    hosts.extend(o.agents.iter().chain(&o.peers).map(|a| host_key(a)));
    hosts.sort();
    hosts.dedup();
    probes.extend(request.control.as_ref().map(|(probe, _)| probe.clone()));
    Ok(Launch {
        request,
        plan_toml: None,
        hosts,
        uses: Uses {
            probes,
            local: o.local,
            ec2: false,
            agents: o.agents.iter().chain(&o.peers).cloned().collect(),
        },
        env,
    })
}

/// A plan's launch: checked as `run --plan` checks it, and refused when it names files on the
/// client's machine (`hosts_file`, `[tls]`).
pub fn from_plan(toml: &str) -> Result<Launch, Status> {
    if toml.len() > MAX_PLAN_BYTES {
        return Err(Status::invalid_argument(format!(
            "the plan is {} bytes long; at most {MAX_PLAN_BYTES} are accepted",
            toml.len()
        )));
    }
    let plan = quietbench_controller::plan::parse_plan(toml, 0)
        .map_err(|e| Status::invalid_argument(format!("the plan: {e}")))?;
    if plan.hosts_file.is_some() {
        return Err(Status::invalid_argument(
            "the plan names a hosts_file, a file on your machine: list its agents in the plan \
             (agents = [...]) instead",
        ));
    }
    if plan.tls.is_some() {
        return Err(Status::invalid_argument(
            "the plan has a [tls] table: the service talks to agents with its own identity \
             (quietbench serve --ca --cert --key); remove the table",
        ));
    }
    if let Some(ec2) = &plan.ec2 {
        let named = [
            (ec2.ca_dir.is_some(), "ca_dir (a folder)"),
            (ec2.profile.is_some(), "profile"),
            (ec2.endpoint_url.is_some(), "endpoint_url"),
        ];
        if let Some((_, what)) = named.iter().find(|(given, _)| *given) {
            return Err(Status::invalid_argument(format!(
                "the plan's [fleet] sets {what}: the service launches instances with its own AWS \
                 settings and certificates (its environment's, and $QUIETBENCH_EC2_CA_DIR); \
                 remove it"
            )));
        }
    }
    let mut hosts: Vec<String> = Vec::new();
    if plan.local {
        hosts.push(LOCAL_HOST.to_string());
    }
    hosts.extend(plan.agents.iter().chain(&plan.peers).map(|a| host_key(a)));
    hosts.sort();
    hosts.dedup();
    // An EC2 fleet's instances are launched for the run: no other run measures on them.
    if hosts.is_empty() && plan.ec2.is_none() {
        return Err(Status::invalid_argument(
            "the plan names no host: set local = true or agents = [...]",
        ));
    }
    let variants = &plan.settings.variants;
    let labels: Vec<String> = variants
        .iter()
        .map(|v| format!("variant '{}'", v.name))
        .collect();
    let workloads: Vec<Workload<'_>> = variants
        .iter()
        .zip(&labels)
        .map(|(v, label)| Workload {
            label: label.clone(),
            probe: &v.probe,
            params: &v.params,
        })
        .collect();
    let env = secret_env::collect(&workloads)?;
    let plan_toml = match secret_env::strip_plan(toml)
        .map_err(|e| Status::invalid_argument(format!("the plan: {e}")))?
    {
        None => toml.to_string(),
        Some(stripped) => {
            // The plan written again must be the plan given, less its env.* values: anything
            // else would measure something the client did not ask for.
            let mut expected = plan.clone();
            for v in &mut expected.settings.variants {
                v.params = secret_env::without_env(&v.params);
            }
            let again = quietbench_controller::plan::parse_plan(&stripped, 0)
                .map_err(|e| Status::internal(format!("the plan without its env.* values: {e}")))?;
            if format!("{again:?}") != format!("{expected:?}") {
                return Err(Status::internal(
                    "the plan without its env.* values reads differently from the plan given; \
                     submit the values with run options (params) instead",
                ));
            }
            stripped
        }
    };
    let uses = Uses {
        probes: variants.iter().map(|v| v.probe.clone()).collect(),
        local: plan.local,
        ec2: plan.ec2.is_some(),
        agents: plan.agents.iter().chain(&plan.peers).cloned().collect(),
    };
    Ok(Launch {
        // The child works in the run's folder, where the plan is written beside the request.
        request: RunRequest {
            plan: Some(PLAN_FILE.into()),
            ..RunRequest::default()
        },
        plan_toml: Some(plan_toml),
        hosts,
        uses,
        env,
    })
}

/// The launch of a submit request.
pub fn from_request(request: &pb::SubmitRunRequest) -> Result<Launch, Status> {
    match &request.what {
        Some(pb::submit_run_request::What::PlanToml(toml)) => from_plan(toml),
        Some(pb::submit_run_request::What::Options(options)) => from_options(options),
        None => Err(Status::invalid_argument(
            "nothing to run: give plan_toml or options",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_the_run_request_and_name_their_hosts() {
        let launch = from_options(&pb::RunOptions {
            agents: vec!["10.0.0.1:7000".into(), "10.0.0.2:7000".into()],
            probes: vec!["cpu.primes".into()],
            params: [("max_prime".to_string(), "--json=/etc/x".to_string())].into(),
            rounds: 5,
            warmup: Some(0),
            duration_ms: 1500,
            cpus: vec![1, 3],
            tune: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            launch.request,
            RunRequest {
                agents: vec!["10.0.0.1:7000".into(), "10.0.0.2:7000".into()],
                probes: vec!["cpu.primes".into()],
                // A value is a value, whatever it looks like: never an option of `run`.
                params: vec![("max_prime".into(), "--json=/etc/x".into())],
                rounds: 5,
                warmup: 0,
                duration_ms: 1500,
                cpus: vec![1, 3],
                tune: true,
                ..RunRequest::default()
            }
        );
        assert_eq!(launch.hosts, ["10.0.0.1:7000", "10.0.0.2:7000"]);
    }

    #[test]
    fn loopback_agents_are_this_machine() {
        for address in [
            "127.0.0.1:7700",
            "localhost:7701",
            "[::1]:7700",
            "127.0.0.2:1",
        ] {
            assert_eq!(host_key(address), LOCAL_HOST, "{address}");
        }
        assert_eq!(host_key("Agent-1.Internal:7700"), "agent-1.internal:7700");
        assert_eq!(host_key("10.0.0.1:7700"), "10.0.0.1:7700");
    }

    #[test]
    fn bad_options_are_refused_with_the_reason() {
        let none = from_options(&pb::RunOptions::default()).unwrap_err();
        assert!(none.message().contains("no hosts"), "{}", none.message());
        let both = from_options(&pb::RunOptions {
            local: true,
            agents: vec!["a:1".into()],
            ..Default::default()
        })
        .unwrap_err();
        assert!(both.message().contains("not several"), "{}", both.message());
        let long = from_options(&pb::RunOptions {
            local: true,
            probes: vec!["x".repeat(MAX_FIELD_BYTES + 1)],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(long.code(), tonic::Code::InvalidArgument);
        let newline = from_options(&pb::RunOptions {
            local: true,
            probes: vec!["cpu.primes\n--json".into()],
            ..Default::default()
        })
        .unwrap_err();
        assert!(newline.message().contains("control character"));
    }

    #[test]
    fn plans_naming_client_files_are_refused() {
        let ok = from_plan(
            "hosts = \"local\"\nrounds = 3\n[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n",
        )
        .unwrap();
        assert_eq!(ok.hosts, [LOCAL_HOST]);
        let hosts_file = from_plan(
            "hosts_file = \"hosts.txt\"\n[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n",
        )
        .unwrap_err();
        assert!(
            hosts_file.message().contains("hosts_file"),
            "{}",
            hosts_file.message()
        );
        let ec2 = "[fleet]\nkind = \"ec2\"\ninstance_type = \"c5.large\"\nami = \"ami-1\"\n";
        let variant = "[[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n";
        let launched = from_plan(&format!("{ec2}{variant}")).unwrap();
        assert!(launched.hosts.is_empty(), "{:?}", launched.hosts);
        let elsewhere =
            from_plan(&format!("{ec2}endpoint_url = \"http://x\"\n{variant}")).unwrap_err();
        assert!(
            elsewhere.message().contains("endpoint_url"),
            "{}",
            elsewhere.message()
        );
        let broken = from_plan("rounds = ").unwrap_err();
        assert!(broken.message().starts_with("the plan: "));
        let big = from_plan(&"#".repeat(MAX_PLAN_BYTES + 1)).unwrap_err();
        assert!(big.message().contains("at most"));
    }

    #[test]
    fn env_values_leave_the_request_and_the_policy_sees_every_probe() {
        let launch = from_options(&pb::RunOptions {
            local: true,
            probes: vec!["exec".into()],
            params: [
                ("cmd".to_string(), "./build".to_string()),
                ("env.API_TOKEN".to_string(), "s3cret".to_string()),
            ]
            .into(),
            control: "exec cmd=true env.API_TOKEN=s3cret".into(),
            ..Default::default()
        })
        .unwrap();
        let kept = launch.request.to_json();
        assert!(!kept.contains("s3cret") && !kept.contains("env."), "{kept}");
        assert_eq!(launch.request.params, [("cmd".into(), "./build".into())]);
        assert_eq!(
            launch.request.control,
            Some(("exec".into(), [("cmd".into(), "true".into())].into()))
        );
        assert_eq!(
            launch.env.iter().collect::<Vec<_>>(),
            [("API_TOKEN", "s3cret")]
        );
        assert_eq!(launch.uses.probes, ["exec", "exec"]);
        assert!(launch.uses.local && launch.uses.agents.is_empty());
        assert!(launch.check_env_reaches().is_ok());

        // The default probe and a control's probe are judged too.
        let plain = from_options(&pb::RunOptions {
            agents: vec!["10.0.0.1:7700".into()],
            peers: vec!["10.0.0.2:7700".into()],
            control: "exec cmd=true".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(plain.uses.probes, ["cpu.primes", "exec"]);
        assert_eq!(plain.uses.agents, ["10.0.0.1:7700", "10.0.0.2:7700"]);
        assert!(plain.env.is_empty());

        // On agents, the run's environment would not reach the command.
        let remote = from_options(&pb::RunOptions {
            agents: vec!["10.0.0.1:7700".into()],
            probes: vec!["exec".into()],
            params: [("env.T".to_string(), "v".to_string())].into(),
            ..Default::default()
        })
        .unwrap();
        let err = remote.check_env_reaches().unwrap_err();
        assert!(err.message().contains("only on the service's own machine"));

        // A name `run` would trim into an env.* one is refused, not passed on.
        let sneaked = from_options(&pb::RunOptions {
            local: true,
            probes: vec!["exec".into()],
            params: [(" env.T".to_string(), "v".to_string())].into(),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            sneaked.message().contains("blanks around it"),
            "{}",
            sneaked.message()
        );
    }

    #[test]
    fn a_plan_with_env_values_is_written_without_them() {
        let plan = "hosts = \"local\"\n[[variant]]\nname = \"a\"\nprobe = \"exec\"\n\
                    params = { cmd = \"true\", \"env.API_TOKEN\" = \"s3cret\" }\n";
        let launch = from_plan(plan).unwrap();
        let written = launch.plan_toml.unwrap();
        assert!(
            !written.contains("s3cret") && !written.contains("env."),
            "{written}"
        );
        assert_eq!(launch.uses.probes, ["exec"]);
        assert!(launch.uses.local && !launch.uses.ec2);
        assert_eq!(
            launch.env.iter().collect::<Vec<_>>(),
            [("API_TOKEN", "s3cret")]
        );
    }
}
