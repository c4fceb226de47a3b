//! `quietbench`: the controller CLI. Thin: everything is in the library.

fn main() -> std::process::ExitCode {
    quietbench_controller::cli::main()
}
