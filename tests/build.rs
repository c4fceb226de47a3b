//! Compiles the gRPC test server's service (proto/qbtest/v1/bench.proto) with protox, as
//! quietbench-proto compiles ours (no system protoc), and keeps its descriptor set, which the
//! server writes out for the tests (`grpcserver --descriptor-out FILE`).

use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto");
    let file = root.join("qbtest/v1/bench.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&root])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out_dir.join("qbtest_v1_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
