//! A run's process: `quietbench run` (or `resume`) started for a submission, with the store
//! and `env.*` values by its environment, in its own process group, interrupted (SIGINT) when
//! the service dies; and what its exit says.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::launch::PLAN_FILE;
use super::secret_env::EnvValues;
use super::state::{REQUEST_FILE, START_LINE, Submission};

/// What every child of the service is started with.
#[derive(Debug, Clone)]
pub struct ChildSettings {
    /// The quietbench binary.
    pub exe: PathBuf,
    /// The result store.
    pub db: PathBuf,
    /// The service's identity toward agents (`--ca ...`), passed to every run.
    pub agent_tls_args: Vec<String>,
}

/// Starts `submission`'s process in `dir` with `logs` as its stdout and stderr: `resume` when
/// the store already holds the run, `run` otherwise.
pub(super) fn spawn(
    children: &ChildSettings,
    submission: &Submission,
    env: Option<&EnvValues>,
    resume: bool,
    dir: &Path,
    logs: (std::fs::File, std::fs::File),
) -> anyhow::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(&children.exe);
    // The store by the environment, not the command line: a PostgreSQL URL's password
    // would be in every run's `ps` line.
    command.env(quietbench_controller::store::DB_VARIABLE, &children.db);
    // env.* values the same way, for the command its local agent runs, which inherits
    // them (names are checked: never QUIETBENCH_*, so the store above stays).
    for (name, value) in env.into_iter().flat_map(EnvValues::iter) {
        command.env(name, value);
    }
    command.args(run_arguments(submission, resume, dir));
    // The service's identity towards agents is for the agents it is told of; an EC2 run
    // makes its own for the instances it launches, and refuses another.
    if !submission.launches_its_hosts() {
        command.args(&children.agent_tls_args);
    }
    let (out, err) = logs;
    // Its own process group: a Ctrl-C at the service's terminal is the service's to
    // handle (it interrupts its runs and keeps them to resume), not each run's.
    command
        .process_group(0)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(false);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of
    // the parent; it is all the child runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGINT)
                .map_err(std::io::Error::from)
        });
    }
    Ok(command.spawn()?)
}

/// The arguments of a run's process: `resume` when the store holds the run already, `run` with
/// its request file otherwise.
fn run_arguments(submission: &Submission, resume: bool, dir: &Path) -> Vec<OsString> {
    let run_id = &submission.run_id;
    let request = dir.join(REQUEST_FILE);
    if resume {
        vec!["resume".into(), run_id.into()]
    } else if request.exists() {
        // The request as the service checked it, typed: nothing is rendered back to flags.
        vec!["run-request".into(), request.into()]
    } else {
        // A run a service from before the request file accepted: its arguments as kept.
        let mut args: Vec<OsString> = vec!["run".into(), format!("--run-id={run_id}").into()];
        if dir.join(PLAN_FILE).exists() {
            args.extend(["--plan".into(), dir.join(PLAN_FILE).into()]);
        }
        args.extend(submission.run_args.iter().map(OsString::from));
        args
    }
}

pub(super) fn interrupt(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        );
    }
}

/// A process's exit code as a shell reports it (128 + signal when killed).
pub(super) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The last `quietbench: error:` line a run's process wrote, without the prefix.
pub(super) fn last_error_line(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("stderr")).ok()?;
    // The last start's lines only: an error of an earlier start was dealt with by this one.
    let last_start = text.rfind(START_LINE).unwrap_or(0);
    text[last_start..]
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("quietbench: error: "))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_starts_from_its_request_file_and_an_older_one_from_its_kept_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Submission::new("r1".into(), vec!["local".into()]);
        old.run_args = vec!["--local".into(), "--rounds=2".into()];
        assert_eq!(
            run_arguments(&old, false, dir.path()),
            ["run", "--run-id=r1", "--local", "--rounds=2"].map(OsString::from)
        );
        std::fs::write(dir.path().join(PLAN_FILE), "").unwrap();
        let with_plan = run_arguments(&old, false, dir.path());
        assert_eq!(
            with_plan[2..4],
            [OsString::from("--plan"), dir.path().join(PLAN_FILE).into()]
        );

        std::fs::write(dir.path().join(REQUEST_FILE), "{}").unwrap();
        let new = Submission::new("r2".into(), vec!["local".into()]);
        assert_eq!(
            run_arguments(&new, false, dir.path()),
            [
                OsString::from("run-request"),
                dir.path().join(REQUEST_FILE).into()
            ]
        );
        assert_eq!(
            run_arguments(&new, true, dir.path()),
            ["resume", "r2"].map(OsString::from)
        );
    }
}
