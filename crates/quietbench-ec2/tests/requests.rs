//! Request-level tests of what moto 5.2.5 cannot do: it answers placement-group calls with HTTP
//! 500, drops Placement and CpuOptions from RunInstances, and never runs out of capacity or
//! throttles. The SDK's own interceptor mocks (aws-smithy-mocks) check the exact requests the
//! fleet sends and answer with the errors EC2 gives, driving the fall-back and retry paths.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::ErrorMetadata;
use aws_sdk_ec2::operation::delete_placement_group::DeletePlacementGroupOutput;
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::describe_placement_groups::DescribePlacementGroupsOutput;
use aws_sdk_ec2::operation::run_instances::{RunInstancesError, RunInstancesOutput};
use aws_sdk_ec2::operation::terminate_instances::TerminateInstancesOutput;
use aws_sdk_ec2::types::{
    Instance, InstanceState, InstanceStateName, PlacementGroup, Reservation, ResourceType,
    StateReason, Tag, Tenancy as Ec2Tenancy,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use quietbench_controller::fleet::ec2::Tenancy;
use quietbench_controller::progress::Progress;
use quietbench_ec2::Ec2;
use quietbench_ec2::fleet::launch::{Pacing, Template, launch};
use quietbench_ec2::fleet::reach::wait_for_state;
use quietbench_ec2::gc::{Selection, collect};
use quietbench_ec2::tags::{EXPIRES_AT, RUN};

fn template() -> Template {
    Template {
        ami: "ami-0123".into(),
        instance_type: "c5n.18xlarge".into(),
        user_data: "dXNlcmRhdGE=".into(),
        key_name: None,
        security_groups: vec!["sg-1".into()],
        placement_group: Some("quietbench-run-1".into()),
        tenancy: Tenancy::Dedicated,
        host_zone: None,
        cpu_options: Some((36, 1)),
        tags: vec![
            Tag::builder().key(RUN).value("run-1").build(),
            Tag::builder()
                .key(EXPIRES_AT)
                .value("2026-11-24T12:00:00Z")
                .build(),
        ],
    }
}

fn instance(id: &str) -> Instance {
    Instance::builder().instance_id(id).build()
}

fn code_error(code: &str) -> ErrorMetadata {
    ErrorMetadata::builder()
        .code(code)
        .message(format!("{code} (injected)"))
        .build()
}

fn fast() -> Pacing {
    Pacing {
        poll: Duration::from_millis(1),
        backoff: Duration::from_millis(1),
        throttle_retries: 3,
    }
}

#[tokio::test]
async fn run_instances_carries_placement_tenancy_cpu_options_and_tags_at_creation() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let rule = mock!(Client::run_instances)
        .match_requests(move |req| {
            log.lock().unwrap().push(req.clone());
            true
        })
        .then_output(|| {
            RunInstancesOutput::builder()
                .instances(instance("i-1"))
                .instances(instance("i-2"))
                .build()
        });
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&rule]));
    let mut next = 0;
    let out = launch(&ec2, &template(), 2, &[], &mut next, &fast(), &|_| {})
        .await
        .unwrap();
    assert_eq!(out.len(), 2);
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    // All or nothing: a batch is never half launched.
    assert_eq!((req.min_count(), req.max_count()), (Some(2), Some(2)));
    let placement = req.placement().expect("a placement");
    assert_eq!(placement.group_name(), Some("quietbench-run-1"));
    assert_eq!(placement.tenancy(), Some(&Ec2Tenancy::Dedicated));
    let cpu = req.cpu_options().expect("CpuOptions");
    assert_eq!(
        (cpu.core_count(), cpu.threads_per_core()),
        (Some(36), Some(1))
    );
    assert_eq!(req.security_group_ids(), ["sg-1"]);
    assert_eq!(req.user_data(), Some("dXNlcmRhdGE="));
    let kinds: Vec<&ResourceType> = req
        .tag_specifications()
        .iter()
        .filter_map(|s| s.resource_type())
        .collect();
    assert_eq!(kinds, [&ResourceType::Instance, &ResourceType::Volume]);
    for spec in req.tag_specifications() {
        assert!(
            spec.tags()
                .iter()
                .any(|t| t.key() == Some(RUN) && t.value() == Some("run-1"))
        );
        assert!(spec.tags().iter().any(|t| t.key() == Some(EXPIRES_AT)));
    }
}

#[tokio::test]
async fn no_capacity_moves_to_the_next_subnet_once_per_call() {
    let subnets = Arc::new(Mutex::new(Vec::new()));
    let log = subnets.clone();
    let rule = mock!(Client::run_instances)
        .match_requests(move |req| {
            log.lock()
                .unwrap()
                .push(req.subnet_id().unwrap_or("-").to_string());
            true
        })
        .sequence()
        .error(|| RunInstancesError::generic(code_error("InsufficientInstanceCapacity")))
        .output(|| {
            RunInstancesOutput::builder()
                .instances(instance("i-1"))
                .build()
        })
        .build();
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&rule]));
    let said = Mutex::new(Vec::new());
    let mut next = 0;
    let subnet_ids = vec!["subnet-a".to_string(), "subnet-b".to_string()];
    let out = launch(
        &ec2,
        &template(),
        1,
        &subnet_ids,
        &mut next,
        &fast(),
        &|l| said.lock().unwrap().push(l.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(out.len(), 1);
    // One call per subnet: the SDK's own retries (which would stay in subnet-a) are off.
    assert_eq!(*subnets.lock().unwrap(), ["subnet-a", "subnet-b"]);
    assert_eq!(
        next, 1,
        "later batches start in the subnet that had capacity"
    );
    assert_eq!(
        *said.lock().unwrap(),
        ["no capacity in subnet-a: trying subnet-b"]
    );
}

#[tokio::test]
async fn no_capacity_anywhere_is_one_clear_error() {
    let rule = mock!(Client::run_instances)
        .sequence()
        .error(|| RunInstancesError::generic(code_error("InsufficientInstanceCapacity")))
        .repeatedly()
        .build();
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&rule]));
    let mut next = 0;
    let subnet_ids = vec!["subnet-a".to_string(), "subnet-b".to_string()];
    let err = launch(
        &ec2,
        &template(),
        4,
        &subnet_ids,
        &mut next,
        &fast(),
        &|_| {},
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(rule.num_calls(), 2, "one call per subnet, no retries");
    assert!(err.contains("no capacity for 4 × c5n.18xlarge"), "{err}");
    assert!(err.contains("subnet-a: ec2:RunInstances failed: InsufficientInstanceCapacity"));
    assert!(err.contains("subnet-b"), "{err}");
}

#[tokio::test]
async fn throttling_backs_off_and_retries_then_gives_up() {
    let rule = mock!(Client::run_instances)
        .sequence()
        .error(|| RunInstancesError::generic(code_error("RequestLimitExceeded")))
        .times(2)
        .output(|| {
            RunInstancesOutput::builder()
                .instances(instance("i-1"))
                .build()
        })
        .build();
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&rule]));
    let said = Mutex::new(Vec::new());
    let mut next = 0;
    launch(&ec2, &template(), 1, &[], &mut next, &fast(), &|l| {
        said.lock().unwrap().push(l.to_string())
    })
    .await
    .unwrap();
    assert_eq!(rule.num_calls(), 3);
    assert_eq!(said.lock().unwrap().len(), 2);
    assert!(said.lock().unwrap()[0].contains("RequestLimitExceeded"));

    // Throttled past the retries: the error says so, after exactly 1 + retries calls.
    let always = mock!(Client::run_instances)
        .sequence()
        .error(|| RunInstancesError::generic(code_error("RequestLimitExceeded")))
        .repeatedly()
        .build();
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&always]));
    let err = launch(&ec2, &template(), 1, &[], &mut next, &fast(), &|_| {})
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(always.num_calls(), 4);
    assert!(err.contains("RequestLimitExceeded"), "{err}");
}

fn described(id: &str, state: InstanceStateName, reason: Option<&str>) -> DescribeInstancesOutput {
    described_with(id, state, reason, Vec::new())
}

fn described_with(
    id: &str,
    state: InstanceStateName,
    reason: Option<&str>,
    tags: Vec<Tag>,
) -> DescribeInstancesOutput {
    let mut i = Instance::builder()
        .instance_id(id)
        .set_tags(Some(tags))
        .state(InstanceState::builder().name(state).build())
        .private_ip_address("10.0.0.9");
    if let Some(code) = reason {
        i = i.state_reason(
            StateReason::builder()
                .code(code)
                .message(format!("{code}: Insufficient capacity."))
                .build(),
        );
    }
    DescribeInstancesOutput::builder()
        .reservations(Reservation::builder().instances(i.build()).build())
        .build()
}

#[tokio::test]
async fn an_instance_ec2_takes_back_for_capacity_is_reported_lost_with_the_reason() {
    let rule = mock!(Client::describe_instances)
        .sequence()
        .output(|| described("i-1", InstanceStateName::Pending, None))
        .output(|| {
            described(
                "i-1",
                InstanceStateName::Terminated,
                Some("Server.InsufficientInstanceCapacity"),
            )
        })
        .build();
    let ec2 = Ec2::from_client(mock_client!(aws_sdk_ec2, RuleMode::MatchAny, [&rule]));
    let states = wait_for_state(
        &ec2,
        &["i-1".to_string()],
        "running",
        Instant::now() + Duration::from_secs(60),
        &fast(),
        &Progress::new(0),
    )
    .await
    .unwrap();
    assert_eq!(rule.num_calls(), 2);
    assert_eq!(states[0].state, "terminated");
    assert!(
        states[0]
            .reason
            .starts_with("Server.InsufficientInstanceCapacity"),
        "{}",
        states[0].reason
    );
}

#[tokio::test]
async fn a_placement_group_is_deleted_only_after_its_instances_are_terminated() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let tags = move || {
        vec![
            Tag::builder().key(RUN).value("run-1").build(),
            Tag::builder()
                .key(EXPIRES_AT)
                .value("2000-01-01T00:00:00Z")
                .build(),
        ]
    };
    let (o1, o2, o3, o4) = (order.clone(), order.clone(), order.clone(), order.clone());
    let groups = mock!(Client::describe_placement_groups).then_output(move || {
        DescribePlacementGroupsOutput::builder()
            .placement_groups(
                PlacementGroup::builder()
                    .group_name("quietbench-run-1")
                    .set_tags(Some(tags()))
                    .build(),
            )
            .build()
    });
    let describe = mock!(Client::describe_instances)
        .match_requests(move |req| {
            o1.lock().unwrap().push(if req.instance_ids().is_empty() {
                "list instances"
            } else {
                "describe instances"
            });
            true
        })
        .sequence()
        .output(move || described_with("i-1", InstanceStateName::Running, None, tags()))
        .output(|| described("i-1", InstanceStateName::ShuttingDown, None))
        .output(|| described("i-1", InstanceStateName::Terminated, None))
        .build();
    let terminate = mock!(Client::terminate_instances)
        .match_requests(move |_| {
            o2.lock().unwrap().push("terminate");
            true
        })
        .then_output(|| TerminateInstancesOutput::builder().build());
    let delete = mock!(Client::delete_placement_group)
        .match_requests(move |req| {
            o3.lock().unwrap().push("delete placement group");
            req.group_name() == Some("quietbench-run-1")
        })
        .then_output(|| DeletePlacementGroupOutput::builder().build());
    let volumes = mock!(Client::describe_volumes).then_output(move || {
        o4.lock().unwrap().push("list volumes");
        aws_sdk_ec2::operation::describe_volumes::DescribeVolumesOutput::builder().build()
    });
    let hosts = mock!(Client::describe_hosts).then_output(|| {
        aws_sdk_ec2::operation::describe_hosts::DescribeHostsOutput::builder().build()
    });
    let sgs = mock!(Client::describe_security_groups).then_output(|| {
        aws_sdk_ec2::operation::describe_security_groups::DescribeSecurityGroupsOutput::builder()
            .build()
    });
    let ec2 = Ec2::from_client(mock_client!(
        aws_sdk_ec2,
        RuleMode::MatchAny,
        [
            &groups, &describe, &terminate, &delete, &volumes, &hosts, &sgs
        ]
    ));
    let outcome = collect(&ec2, &Selection::Run("run-1".into()), false, &|_| {}).await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(
        outcome.deleted,
        [
            "terminated instance i-1",
            "deleted placement-group quietbench-run-1"
        ]
    );
    let order = order.lock().unwrap();
    let terminated_seen = order
        .iter()
        .rposition(|s| *s == "describe instances")
        .unwrap();
    let deleted = order
        .iter()
        .position(|s| *s == "delete placement group")
        .unwrap();
    assert!(order.contains(&"terminate"));
    assert!(
        terminated_seen < deleted,
        "DeletePlacementGroup before the instances were terminated: {order:?}"
    );
}
