//! `quietbench`: the controller CLI. Thin: everything is in the library.

fn main() -> std::process::ExitCode {
    // First: when the agent inside this binary spawns it as a cpu.spawn child, exit at once.
    quietbench_agent::exit_if_noop();
    quietbench_controller::cli::main()
}
