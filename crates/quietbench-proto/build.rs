//! Compiles proto/quietbench/v1 with protox, a pure-Rust protobuf compiler, so building needs no
//! system `protoc`. The encoded descriptor set is kept for the agent's gRPC reflection service.

use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        proto_root.join("quietbench/v1/agent.proto"),
        proto_root.join("quietbench/v1/controller.proto"),
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    let descriptors = protox::compile(&files, [&proto_root])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("quietbench_v1_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;

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
