//! `quietbench`: the controller CLI, plus `quietbench agent`. Thin: it parses the command line
//! and hands each command to its library. It exists so that the controller library need not
//! link the agent (and every probe) just to offer the agent re-exec that `run --local` uses.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use quietbench_agent::AgentArgs;
use quietbench_cli::{self as cli, ControllerCommand};

#[derive(Debug, Parser)]
#[command(name = "quietbench", version, about = cli::ABOUT, long_about = cli::LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Controller(ControllerCommand),
    /// Serve as an agent (the same program as quietbench-agent)
    Agent(AgentArgs),
    /// EC2 fleets' resources: list what is live
    #[cfg(feature = "ec2")]
    #[command(subcommand)]
    Fleet(quietbench_ec2::cli::FleetCommand),
    /// Delete EC2 fleets' resources whose lease expired (a killed controller's), or one run's
    #[cfg(feature = "ec2")]
    Gc(quietbench_ec2::cli::GcArgs),
}

fn main() -> ExitCode {
    // First: when the agent inside this binary spawns it as a cpu.spawn child, exit at once.
    quietbench_agent::exit_if_noop();
    match Cli::parse().command {
        Command::Agent(args) => match quietbench_agent::serve(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("quietbench: error: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Controller(command) => cli::execute(command, services()),
        #[cfg(feature = "ec2")]
        Command::Fleet(command) => quietbench_ec2::cli::fleet(command),
        #[cfg(feature = "ec2")]
        Command::Gc(args) => quietbench_ec2::cli::gc(args),
    }
}

/// What this build gives every command: EC2 fleets and caps lookups with the `ec2` feature.
fn services() -> quietbench_controller::context::Services {
    #[cfg(feature = "ec2")]
    return quietbench_ec2::services();
    #[cfg(not(feature = "ec2"))]
    quietbench_controller::context::Services::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
