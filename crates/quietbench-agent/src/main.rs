//! `quietbench-agent`: the agent binary baked into images and started at boot.

use std::process::ExitCode;

use clap::Parser;
use quietbench_agent::{AgentArgs, serve};

fn main() -> ExitCode {
    // First: a cpu.spawn child must cost no more than an exec.
    quietbench_probe::spawn::exit_if_noop();
    let args = AgentArgs::parse();
    match serve(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("quietbench-agent: {err:#}");
            ExitCode::FAILURE
        }
    }
}
