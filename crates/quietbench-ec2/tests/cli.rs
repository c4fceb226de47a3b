//! `quietbench fleet ls` and `quietbench gc` as the binary runs them, against moto. A test
//! binary of its own: the commands read credentials from the environment, which this sets.

mod common;

use std::time::{Duration, SystemTime};

use common::{any_ami, ec2, launch, start_moto};
use quietbench_ec2::inventory::{Scope, list};

/// The commands as the binary runs them (`quietbench fleet ls`, `quietbench gc --run`), on
/// their own runtime as in the binary.
#[test]
fn the_commands_list_and_collect_a_run() {
    use quietbench_ec2::cli::{AwsArgs, FleetCommand, GcArgs, LsArgs, fleet, gc};

    let moto = start_moto();
    let client = ec2(&moto);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ami = rt.block_on(any_ami(&client));
    let far = SystemTime::now() + Duration::from_secs(3600);
    rt.block_on(launch(&client, &ami, "run-cli", Some(far), 2));
    // The commands resolve credentials through the default chain: the environment here.
    // SAFETY: this binary's only test, and no other thread of it reads the environment yet.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    }
    let aws = AwsArgs {
        region: Some("us-east-1".into()),
        profile: None,
        endpoint_url: Some(moto.url.clone()),
    };
    let code = fleet(FleetCommand::Ls(LsArgs {
        run: Some("run-cli".into()),
        aws: aws.clone(),
    }));
    eprintln!("fleet ls: {code:?}");
    let code = gc(GcArgs {
        run: Some("run-cli".into()),
        dry_run: false,
        aws,
    });
    eprintln!("gc --run: {code:?}");
    let left = rt.block_on(list(&client, &Scope::Run("run-cli".into())));
    assert_eq!(left.resources.len(), 0, "{:?}", left.resources);
}
