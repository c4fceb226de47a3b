//! A moto EC2 server for the tests, and resources tagged as a fleet tags them.
#![allow(dead_code)]

use std::time::SystemTime;

use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use quietbench_ec2::Ec2;
use quietbench_ec2::tags::{EXPIRES_AT, OWNER, RUN, format_expiry};

mod moto;
pub use moto::{Moto, start_moto};

pub fn ec2(moto: &Moto) -> Ec2 {
    let config = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&moto.url)
        .credentials_provider(aws_sdk_ec2::config::SharedCredentialsProvider::new(
            aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "test"),
        ))
        .build();
    Ec2::from_config(&config).unwrap()
}

pub async fn any_ami(ec2: &Ec2) -> String {
    let images = ec2
        .ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .unwrap();
    images.images()[0].image_id().unwrap().to_string()
}

/// Launches `count` instances tagged as a fleet's, as RunInstances would for a run.
pub async fn launch(
    ec2: &Ec2,
    ami: &str,
    run: &str,
    expires: Option<SystemTime>,
    count: i32,
) -> Vec<String> {
    let mut tags = vec![
        Tag::builder().key(RUN).value(run).build(),
        Tag::builder()
            .key(OWNER)
            .value("arn:aws:sts::123456789012:user/moto")
            .build(),
    ];
    if let Some(at) = expires {
        tags.push(
            Tag::builder()
                .key(EXPIRES_AT)
                .value(format_expiry(at))
                .build(),
        );
    }
    let spec = |kind| {
        TagSpecification::builder()
            .resource_type(kind)
            .set_tags(Some(tags.clone()))
            .build()
    };
    let out = ec2
        .ec2
        .run_instances()
        .image_id(ami)
        .instance_type(InstanceType::C5Large)
        .min_count(count)
        .max_count(count)
        .tag_specifications(spec(ResourceType::Instance))
        .tag_specifications(spec(ResourceType::Volume))
        .send()
        .await
        .unwrap();
    out.instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect()
}
