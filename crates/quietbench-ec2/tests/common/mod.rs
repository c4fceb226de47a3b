//! A moto EC2 server for the tests, and resources tagged as a fleet tags them.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use quietbench_ec2::Ec2;
use quietbench_ec2::tags::{EXPIRES_AT, OWNER, RUN, format_expiry};

/// A moto server on a free loopback port, killed when dropped.
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto_server: $QUIETBENCH_MOTO_SERVER, else the virtualenv `.ci/run` makes, else PATH. A
/// missing server fails the test with how to install it: these tests never skip.
fn moto_server() -> String {
    if let Some(path) = std::env::var_os("QUIETBENCH_MOTO_SERVER") {
        return path.to_string_lossy().into_owned();
    }
    let venv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/ci-venvs/moto/bin/moto_server"
    );
    if std::path::Path::new(venv).exists() {
        return venv.to_string();
    }
    "moto_server".to_string()
}

pub fn start_moto() -> Moto {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = moto_server();
    let child = Command::new(&server)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {server}: {e}. Install it with `python3 -m venv target/ci-venvs/moto \
                 && target/ci-venvs/moto/bin/pip install 'moto[server]==5.2.5'` (.ci/run does)"
            )
        });
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not listen in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Moto { child, url }
}

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
