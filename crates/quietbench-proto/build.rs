//! Compiles proto/quietbench/v1 with protox, a pure-Rust protobuf compiler, so building needs no
//! system `protoc`. The encoded descriptor sets are kept for the agent's and the controller
//! service's gRPC reflection.

use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let agent = proto_root.join("quietbench/v1/agent.proto");
    let controller = proto_root.join("quietbench/v1/controller.proto");
    for file in [&agent, &controller] {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    // One descriptor set per service for reflection, so that each server describes what it
    // serves and nothing else; the code is generated from both.
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    for (file, name) in [(&agent, "agent"), (&controller, "controller")] {
        let set = protox::compile([file], [&proto_root])?;
        fs::write(
            out_dir.join(format!("quietbench_v1_{name}_descriptor.bin")),
            set.encode_to_vec(),
        )?;
    }
    let descriptors = protox::compile([&agent, &controller], [&proto_root])?;

    // The machine description also goes into JSON reports as it is: derive Serialize for it.
    let mut builder = tonic_prost_build::configure();
    for message in [
        "Topology",
        "NumaNode",
        "CacheLevel",
        "KernelSettings",
        "Nic",
        "BlockDevice",
        "NicQueue",
        "CpuRole",
        "ControlAvailability",
        "MonitorAvailability",
        "InstanceIdentity",
    ] {
        builder = builder.type_attribute(
            format!(".quietbench.v1.{message}"),
            "#[derive(serde::Serialize)]",
        );
    }
    builder
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
