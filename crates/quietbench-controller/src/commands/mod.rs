//! The commands: each takes what its command line asked (parsed by the `quietbench-cli` crate), drives a
//! session or reads the store, prints, and returns the exit code. They sit on top of everything
//! else in the controller; nothing below imports them.

pub mod capacity;
pub mod changes;
pub mod compare;
pub mod compare_runs;
pub mod history_changes;
pub mod history_normalized;
pub mod host;
pub mod limits;
pub mod release;
pub mod run;
pub mod stored;

use crate::fleet::HostEntry;

/// Hosts named with `--agent`, in order. One named twice is refused: it would be measured as
/// two hosts, and its figures counted twice.
pub fn agent_entries(addresses: &[String]) -> anyhow::Result<Vec<HostEntry>> {
    for (i, a) in addresses.iter().enumerate() {
        if addresses[..i].contains(a) {
            anyhow::bail!("--agent {a} is given twice: name each host once");
        }
    }
    Ok(addresses
        .iter()
        .map(|a| HostEntry {
            address: a.clone(),
            label: None,
            source: "--agent".into(),
        })
        .collect())
}

/// `--param KEY=VALUE` pairs as a map. A key given twice is refused: which value would win is a
/// guess the user should not have to make.
pub fn param_map(
    pairs: Vec<(String, String)>,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut map = std::collections::BTreeMap::new();
    for (key, value) in pairs {
        if let Some(first) = map.get(&key) {
            anyhow::bail!(
                "--param {key} is given twice ({key}={first} and {key}={value}): give it once"
            );
        }
        map.insert(key, value);
    }
    Ok(map)
}

/// A run id as the tables print it: its first 8 characters, enough to tell runs apart and to
/// pass back as a prefix.
pub(crate) fn short_id(id: &str) -> &str {
    &id[..id.len().min(8)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_or_parameter_given_twice_is_refused() {
        let twice = ["a:1".to_string(), "b:2".into(), "a:1".into()];
        let err = agent_entries(&twice).unwrap_err().to_string();
        assert!(err.contains("--agent a:1 is given twice"), "{err}");
        assert_eq!(agent_entries(&twice[..2]).unwrap().len(), 2);
        let pairs = vec![
            ("threads".to_string(), "1".to_string()),
            ("threads".to_string(), "2".to_string()),
        ];
        let err = param_map(pairs).unwrap_err().to_string();
        assert!(err.contains("threads=1 and threads=2"), "{err}");
        let map = param_map(vec![("a".into(), "1".into()), ("b".into(), "2".into())]).unwrap();
        assert_eq!(map.len(), 2);
    }
}
