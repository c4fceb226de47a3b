//! Who may do what on the service: the policy (`quietbench serve --policy FILE`, TOML, its
//! format in docs/service.md). It names the admins, who see and act on every run and may collect
//! garbage, and, per caller (`client NAME`, `uid N`, `anonymous`) and for everyone else
//! (`[default]`), the probes, fleets and agents a caller's runs may use. Running a user's
//! command (the `exec` probe, as a variant or a control, or the server of the `http` or `tcp`
//! probe) needs `exec = true` besides.
//!
//! With no file the built-in policy applies: every admitted caller may run every probe but
//! `exec`, on this machine (`local`) and on agents named by address (`static`), never on EC2;
//! the admins are the service's own user and root when they call on plain loopback, and they
//! alone may do everything. Why: a client certificate is a key to the service, not to the
//! agents. `exec` runs any command as the agent's user, who can read the agent's private key
//! (and, on a local run, the service's own files); EC2 spends the service's money under its
//! AWS identity. Both are an operator's decision per client, so they are off until a policy
//! file says otherwise. Every other probe runs quietbench's own bounded code, which is what the
//! service is for. A client certificate is never an admin by default because a CA may issue
//! many. The service's own user and root are not restricted: they can read the service's
//! files, its environment (AWS settings included) and its store, and run `quietbench`
//! themselves, so a refusal would protect nothing.
//!
//! Everything here is pure: [`Policy::parse`] from text, [`Policy::check`] of a run's
//! [`Uses`]; reading the file is [`Policy::read`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The probe that runs a user's command.
pub const EXEC_PROBE: &str = "exec";
/// Every probe that runs a user's command: `exec`, and `http` and `tcp`, whose server is one.
pub const COMMAND_PROBES: &[&str] = &[EXEC_PROBE, "http", "tcp"];

/// Where a run's hosts come from, as a policy names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fleet {
    /// The service's own machine (`local`).
    Local,
    /// Running agents named by address (`agents`, `peers`).
    Static,
    /// Instances launched for the run (`[fleet] kind = "ec2"`).
    Ec2,
}

impl Fleet {
    /// The word a policy file uses.
    pub fn word(self) -> &'static str {
        match self {
            Fleet::Local => "local",
            Fleet::Static => "static",
            Fleet::Ec2 => "ec2",
        }
    }

    fn parse(word: &str) -> Option<Fleet> {
        [Fleet::Local, Fleet::Static, Fleet::Ec2]
            .into_iter()
            .find(|f| f.word() == word)
    }
}

/// What a submitted run would use, as the policy judges it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uses {
    /// Every probe it runs: its probes or variants', and its control's.
    pub probes: Vec<String>,
    /// It measures on the service's own machine.
    pub local: bool,
    /// It launches EC2 instances.
    pub ec2: bool,
    /// The agents it reaches by address, peers included.
    pub agents: Vec<String>,
}

/// A caller's right with the policy entry it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruled<T> {
    /// The right.
    pub value: T,
    /// Where it was set: `[caller."client ci"] of FILE`, `[default] of FILE`, or the built-in
    /// policy.
    pub from: String,
}

/// What one caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights {
    /// Patterns of the probes it may run (`*` matches any text).
    pub probes: Ruled<Vec<String>>,
    /// Whether it may run a user's command (the `exec` probe).
    pub exec: Ruled<bool>,
    /// The fleets its runs may use.
    pub fleets: Ruled<Vec<Fleet>>,
    /// Patterns of the agent addresses (HOST:PORT) its runs may reach.
    pub agents: Ruled<Vec<String>>,
}

/// A run the policy refuses, and the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The run starts a user's command and the caller may not.
    #[error(
        "the service's policy does not let {caller} run commands (the exec probe, or the http \
         or tcp probe's server): exec = false \
         in {from}; an admin of the service can allow it with exec = true in \
         [caller.\"{caller}\"] of the policy file (quietbench serve --policy FILE)"
    )]
    Exec {
        /// The caller.
        caller: String,
        /// The entry.
        from: String,
    },
    /// A probe the caller's patterns do not name.
    #[error(
        "the service's policy does not let {caller} run probe {probe}: it matches none of \
         probes = {patterns:?} in {from}"
    )]
    Probe {
        /// The caller.
        caller: String,
        /// The probe.
        probe: String,
        /// The caller's patterns.
        patterns: Vec<String>,
        /// The entry.
        from: String,
    },
    /// A fleet the caller may not use.
    #[error(
        "the service's policy does not let {caller} measure on {fleet} hosts: fleets = \
         {fleets:?} in {from}"
    )]
    Fleet {
        /// The caller.
        caller: String,
        /// The fleet asked for.
        fleet: &'static str,
        /// The fleets allowed.
        fleets: Vec<&'static str>,
        /// The entry.
        from: String,
    },
    /// An agent the caller's patterns do not name.
    #[error(
        "the service's policy does not let {caller} use agent {agent}: it matches none of \
         agents = {patterns:?} in {from}"
    )]
    Agent {
        /// The caller.
        caller: String,
        /// The agent's address.
        agent: String,
        /// The caller's patterns.
        patterns: Vec<String>,
        /// The entry.
        from: String,
    },
}

/// A policy file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file cannot be read.
    #[error("cannot read the policy file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML, or a field a policy does not have.
    #[error("the policy file {path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// toml's message, with the line.
        message: String,
    },
    /// A value that means nothing.
    #[error("the policy file {path}: {what}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and what to write instead.
        what: String,
    },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    probes: Option<Vec<String>>,
    exec: Option<bool>,
    fleets: Option<Vec<String>>,
    agents: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    admins: Option<Vec<String>>,
    default: Option<EntryFile>,
    #[serde(default)]
    caller: BTreeMap<String, EntryFile>,
}

/// The rules of a service shared by tenants: what each caller may do, and how long finished
/// runs' folders are kept (`serve --policy`, `--keep-days`, `--keep-mib`).
#[derive(Debug, Clone)]
pub struct Tenancy {
    /// Who may do what.
    pub policy: Policy,
    /// How long finished runs' folders are kept.
    pub retention: super::retention::Retention,
}

/// The service's policy, checked.
#[derive(Debug, Clone)]
pub struct Policy {
    admins: Vec<String>,
    default: Rights,
    callers: BTreeMap<String, (EntryFile, String)>,
}

/// Where the built-in rights come from, as messages name it.
const BUILT_IN: &str = "the built-in policy (quietbench serve was given no --policy file)";

impl Policy {
    /// The built-in policy: see the module's documentation. `service_uid` is the service's
    /// own user, an admin (with root) when calling on plain loopback.
    pub fn built_in(service_uid: u32) -> Self {
        let admins = default_admins(service_uid);
        let everything = EntryFile {
            probes: Some(vec!["*".into()]),
            exec: Some(true),
            fleets: Some(
                [Fleet::Local, Fleet::Static, Fleet::Ec2]
                    .iter()
                    .map(|f| f.word().to_string())
                    .collect(),
            ),
            agents: Some(vec!["*".into()]),
        };
        let callers = admins
            .iter()
            .map(|id| {
                let from = format!("{BUILT_IN}, for the service's own user and root");
                (id.clone(), (everything.clone(), from))
            })
            .collect();
        Self {
            admins,
            default: built_in_rights(BUILT_IN),
            callers,
        }
    }

    /// Reads the policy file at `path` ([`Policy::parse`]).
    pub fn read(path: &Path, service_uid: u32) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string(), service_uid)
    }

    /// A policy from its TOML `text`, which messages call `name`. Fields a caller's entry
    /// leaves out are `[default]`'s; fields `[default]` leaves out are the built-in policy's;
    /// without `admins` the admins are the built-in ones.
    pub fn parse(text: &str, name: &str, service_uid: u32) -> Result<Self, PolicyError> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::Toml {
            path: name.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let invalid = |what: String| PolicyError::Invalid {
            path: name.to_string(),
            what,
        };
        let admins = match file.admins {
            None => default_admins(service_uid),
            Some(list) => {
                for id in &list {
                    check_caller_id(id).map_err(|why| invalid(format!("admins: {why}")))?;
                }
                list
            }
        };
        let default_entry = file.default.unwrap_or_default();
        check_entry(&default_entry).map_err(|why| invalid(format!("[default]: {why}")))?;
        let default = merge(
            &built_in_rights(&format!("the built-in policy (absent from {name})")),
            &default_entry,
            &format!("[default] of {name}"),
        );
        let mut callers = BTreeMap::new();
        for (id, entry) in file.caller {
            check_caller_id(&id).map_err(|why| invalid(format!("[caller.{id:?}]: {why}")))?;
            check_entry(&entry).map_err(|why| invalid(format!("[caller.{id:?}]: {why}")))?;
            let from = format!("[caller.{id:?}] of {name}");
            callers.insert(id, (entry, from));
        }
        Ok(Self {
            admins,
            default,
            callers,
        })
    }

    /// Whether `caller` sees and acts on every run, and may collect garbage.
    pub fn is_admin(&self, caller: &str) -> bool {
        self.admins.iter().any(|a| a == caller)
    }

    /// The admins, as the policy lists them.
    pub fn admins(&self) -> &[String] {
        &self.admins
    }

    /// What `caller` may do.
    pub fn rights(&self, caller: &str) -> Rights {
        match self.callers.get(caller) {
            Some((entry, from)) => merge(&self.default, entry, from),
            None => self.default.clone(),
        }
    }

    /// Whether `caller` may submit a run that uses `uses`; the first rule it breaks otherwise.
    pub fn check(&self, caller: &str, uses: &Uses) -> Result<(), Denied> {
        let rights = self.rights(caller);
        let who = caller.to_string();
        // The command first: the one refusal that matters most, whatever else is wrong.
        if uses
            .probes
            .iter()
            .any(|p| COMMAND_PROBES.contains(&p.as_str()))
            && !rights.exec.value
        {
            return Err(Denied::Exec {
                caller: who,
                from: rights.exec.from,
            });
        }
        if let Some(probe) = uses
            .probes
            .iter()
            .find(|p| !rights.probes.value.iter().any(|pat| glob(pat, p)))
        {
            return Err(Denied::Probe {
                caller: who,
                probe: probe.clone(),
                patterns: rights.probes.value,
                from: rights.probes.from,
            });
        }
        let wanted = [
            (uses.local, Fleet::Local),
            (!uses.agents.is_empty(), Fleet::Static),
            (uses.ec2, Fleet::Ec2),
        ];
        if let Some((_, fleet)) = wanted
            .iter()
            .find(|(used, f)| *used && !rights.fleets.value.contains(f))
        {
            return Err(Denied::Fleet {
                caller: who,
                fleet: fleet.word(),
                fleets: rights.fleets.value.iter().map(|f| f.word()).collect(),
                from: rights.fleets.from,
            });
        }
        if let Some(agent) = uses.agents.iter().find(|a| {
            let a = a.to_ascii_lowercase();
            !rights
                .agents
                .value
                .iter()
                .any(|pat| glob(&pat.to_ascii_lowercase(), &a))
        }) {
            return Err(Denied::Agent {
                caller: who,
                agent: agent.clone(),
                patterns: rights.agents.value,
                from: rights.agents.from,
            });
        }
        Ok(())
    }
}

fn default_admins(service_uid: u32) -> Vec<String> {
    let mut admins = vec![format!("uid {service_uid}")];
    if service_uid != 0 {
        admins.push("uid 0".into());
    }
    admins
}

fn built_in_rights(from: &str) -> Rights {
    let ruled = |value| Ruled {
        value,
        from: from.to_string(),
    };
    Rights {
        probes: ruled(vec!["*".to_string()]),
        exec: Ruled {
            value: false,
            from: from.to_string(),
        },
        fleets: Ruled {
            value: vec![Fleet::Local, Fleet::Static],
            from: from.to_string(),
        },
        agents: ruled(vec!["*".to_string()]),
    }
}

/// `base` with what `entry` sets, each marked as from `from`.
fn merge(base: &Rights, entry: &EntryFile, from: &str) -> Rights {
    fn pick<T: Clone>(base: &Ruled<T>, given: Option<T>, from: &str) -> Ruled<T> {
        match given {
            Some(value) => Ruled {
                value,
                from: from.to_string(),
            },
            None => base.clone(),
        }
    }
    Rights {
        probes: pick(&base.probes, entry.probes.clone(), from),
        exec: pick(&base.exec, entry.exec, from),
        fleets: pick(
            &base.fleets,
            entry
                .fleets
                .as_ref()
                .map(|l| l.iter().filter_map(|w| Fleet::parse(w)).collect()),
            from,
        ),
        agents: pick(&base.agents, entry.agents.clone(), from),
    }
}

fn check_entry(entry: &EntryFile) -> Result<(), String> {
    if let Some(fleets) = &entry.fleets
        && let Some(bad) = fleets.iter().find(|w| Fleet::parse(w).is_none())
    {
        return Err(format!(
            "fleets: '{bad}' is not a fleet: use local, static or ec2"
        ));
    }
    for (what, list) in [("probes", &entry.probes), ("agents", &entry.agents)] {
        if let Some(bad) = list.iter().flatten().find(|p| p.trim().is_empty()) {
            return Err(format!(
                "{what}: {bad:?} is an empty pattern: write \"*\" for any"
            ));
        }
    }
    Ok(())
}

/// A caller id as the service names callers: a typo would silently never match.
fn check_caller_id(id: &str) -> Result<(), String> {
    let ok = id == "anonymous"
        || id
            .strip_prefix("client ")
            .is_some_and(|n| !n.trim().is_empty())
        || id
            .strip_prefix("uid ")
            .is_some_and(|n| n.parse::<u32>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{id}' is not a caller: write \"client NAME\" (a client certificate's name), \
             \"uid N\" (a local user on plain loopback) or \"anonymous\" (--insecure)"
        ))
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none included)
/// and everything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // The last '*' seen and the text position it was tried at: on a mismatch it takes one
    // more character (linear backtracking, enough for one kind of wildcard).
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests;
