//! The exec probe's parameters: the command lines (split like a shell would, programs found on
//! PATH once, before measuring) and the modes they ask for (pairs, duets, counted
//! instructions), checked before anything runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::duet::Rendezvous;
use super::{ExecWorkload, metric_sets};
use crate::placement::WorkKind;
use crate::spec::{IntParam, resolve_integers};
use crate::{ParamError, ProbeSpec, RateBasis};

const INT_PARAMS: &[IntParam] = &[IntParam {
    name: "threads",
    default: 1,
    min: 1,
    max: 64,
    meaning: "commands run in parallel, one per thread",
}];
const TEXT_PARAMS: &[&str] = &["cmd", "cmd_b", "cwd", "aslr", "shell", "counters", "duet"];

fn bad(key: &str, value: &str, why: impl Into<String>) -> ParamError {
    ParamError::BadValue {
        probe: "exec",
        key: key.into(),
        value: value.into(),
        why: why.into(),
    }
}

/// Splits a command line into words as a POSIX shell would quote them (single and double
/// quotes, backslash escapes), without expanding anything.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(ch) => word.push(ch),
                    None => return Err("a backslash ends the command".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Finds a program on PATH, as execvp would (but once, before measuring).
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.is_file() && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok()
        })
}

/// The checked command of an exec trial.
#[derive(Debug, Clone)]
pub(super) struct Command {
    pub(super) program: PathBuf,
    pub(super) argv: Vec<String>,
    /// Paired mode: command B's program and argv.
    pub(super) b: Option<(PathBuf, Vec<String>)>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) aslr_off: bool,
    /// `counters=instructions`: count each invocation's retired user-mode instructions.
    pub(super) instructions: bool,
}

/// A command line as argv, and its program found on PATH.
fn command_argv(key: &str, line: &str, shell: bool) -> Result<(PathBuf, Vec<String>), ParamError> {
    let argv = if shell {
        vec!["/bin/sh".to_string(), "-c".to_string(), line.to_string()]
    } else {
        split_words(line).map_err(|why| bad(key, line, why))?
    };
    let Some(first) = argv.first() else {
        return Err(bad(key, line, "the command is empty"));
    };
    let program = find_program(first)
        .ok_or_else(|| bad(key, line, format!("'{first}' is not an executable on PATH")))?;
    Ok((program, argv))
}

/// Resolves `exec` parameters: `cmd` (required), `cmd_b` (pairs), `duet` (true: A and B at the
/// same time on two CPUs), `counters` (none|instructions), `cwd`, `aslr` (on|off), `shell`
/// (true|false), `threads`, and `env.NAME=VALUE` for each variable to set.
pub fn resolve(params: &BTreeMap<String, String>) -> Result<ProbeSpec, ParamError> {
    let ints: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| !TEXT_PARAMS.contains(&k.as_str()) && !k.starts_with("env."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let values = resolve_integers("exec", INT_PARAMS, &ints)?;
    let line = params.get("cmd").ok_or_else(|| {
        bad(
            "cmd",
            "",
            "give the command to time, e.g. --param 'cmd=gzip -k -f big.txt'",
        )
    })?;
    let shell = match params.get("shell").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(bad("shell", other, "use true or false")),
    };
    let (program, argv) = command_argv("cmd", line, shell)?;
    let b = params
        .get("cmd_b")
        .map(|line_b| command_argv("cmd_b", line_b, shell))
        .transpose()?;
    let aslr_off = match params.get("aslr").map(String::as_str) {
        None | Some("on") => false,
        Some("off") => true,
        Some(other) => return Err(bad("aslr", other, "use on or off")),
    };
    let instructions = match params.get("counters").map(String::as_str) {
        None | Some("none") => false,
        Some("instructions") => {
            crate::perf_counter::check_available()
                .map_err(|e| bad("counters", "instructions", e.to_string()))?;
            true
        }
        Some(other) => return Err(bad("counters", other, "use none or instructions")),
    };
    let duet = match params.get("duet").map(String::as_str) {
        None | Some("false") => false,
        Some("true") if b.is_none() => {
            return Err(bad("duet", "true", "a duet needs two commands: give cmd_b"));
        }
        Some("true") if values["threads"] != 1 => {
            return Err(bad(
                "duet",
                "true",
                "a duet runs one pair at a time on two CPUs: leave threads at 1",
            ));
        }
        Some("true") => true,
        Some(other) => return Err(bad("duet", other, "use true or false")),
    };
    let cwd = params.get("cwd").map(PathBuf::from);
    if let Some(dir) = &cwd
        && !dir.is_dir()
    {
        return Err(bad("cwd", &dir.display().to_string(), "not a directory"));
    }
    let env: Vec<(String, String)> = params
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("env.")
                .map(|name| (name.to_string(), v.clone()))
        })
        .collect();
    if let Some((name, _)) = env.iter().find(|(n, _)| n.is_empty() || n.contains('=')) {
        return Err(bad(&format!("env.{name}"), "", "not a variable name"));
    }
    let mut resolved = crate::spec::as_text(&values);
    resolved.insert("cmd".into(), line.clone());
    resolved.insert("aslr".into(), if aslr_off { "off" } else { "on" }.into());
    resolved.insert("shell".into(), shell.to_string());
    resolved.insert("program".into(), program.display().to_string());
    if let (Some(line_b), Some((program_b, _))) = (params.get("cmd_b"), &b) {
        resolved.insert("cmd_b".into(), line_b.clone());
        resolved.insert("program_b".into(), program_b.display().to_string());
    }
    if let Some(dir) = &cwd {
        resolved.insert("cwd".into(), dir.display().to_string());
    }
    if instructions {
        resolved.insert("counters".into(), "instructions".into());
    }
    if duet {
        resolved.insert("duet".into(), "true".into());
    }
    for (name, value) in &env {
        resolved.insert(format!("env.{name}"), value.clone());
    }
    let metric_sets = metric_sets::for_mode(b.is_some(), instructions);
    let command = Command {
        program,
        argv,
        b,
        cwd,
        aslr_off,
        instructions,
    };
    // A duet's two threads (one per side, each pinned to its own CPU by placement, which puts
    // them on separate physical cores first) share one rendezvous; a spec is resolved per
    // trial, so every trial gets a fresh one, and a fresh draw of sides (any seed will do: the
    // sides only have to be unpredictable to the noise).
    let rendezvous = duet.then(|| {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Arc::new(Rendezvous::new(clock))
    });
    Ok(ProbeSpec {
        name: "exec",
        threads: if duet { 2 } else { values["threads"] as usize },
        resolved_params: resolved,
        metric_sets,
        basis: RateBasis::OwnTime,
        work: WorkKind::Compute,
        factory: Arc::new(move |thread| {
            let mut workload = ExecWorkload::new(&command, &env)?;
            workload.duet = rendezvous.as_ref().map(|r| (thread, Arc::clone(r)));
            Ok(Box::new(workload))
        }),
    })
}
