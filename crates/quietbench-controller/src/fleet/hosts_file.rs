//! Hosts files (`--hosts FILE`): one agent a line, `HOST:PORT [label]`; `#` starts a comment.

use std::path::Path;

/// One host of a hosts file or a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// HOST:PORT of its agent.
    pub address: String,
    /// A name for reports, when given.
    pub label: Option<String>,
    /// Where it was given, e.g. "hosts.txt line 3".
    pub source: String,
}

/// A hosts file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsFileError {
    /// It could not be read.
    #[error("cannot read the hosts file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: quietbench_host::input::InputError,
    },
    /// A line is not `HOST:PORT [label]`.
    #[error("{path} line {line}: {why} (each line is HOST:PORT, optionally followed by a label)")]
    Line {
        /// The file.
        path: String,
        /// Its line number, from 1.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// No host in it.
    #[error("{0} names no host (each line is HOST:PORT, optionally followed by a label)")]
    Empty(String),
}

/// Reads and parses a hosts file.
pub fn read_hosts_file(path: &Path) -> Result<Vec<HostEntry>, HostsFileError> {
    let shown = path.display().to_string();
    let text = quietbench_host::input::read_text(path, quietbench_host::input::MAX_INPUT_BYTES)
        .map_err(|source| HostsFileError::Read {
            path: shown.clone(),
            source,
        })?;
    parse_hosts_file(&text, &shown)
}

/// Parses a hosts file's text; `path` names it in errors and in each host's source.
pub fn parse_hosts_file(text: &str, path: &str) -> Result<Vec<HostEntry>, HostsFileError> {
    let mut hosts: Vec<HostEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let bad = |why: String| HostsFileError::Line {
            path: path.to_string(),
            line,
            why,
        };
        let mut words = content.split_whitespace();
        let address = words.next().unwrap_or_default();
        // The line itself is not shown: `--hosts` may name any file (/etc/passwd, a key), and
        // an error can travel further than the file may (a service's client).
        check_address(address).map_err(|why| {
            bad(format!(
                "its first word is not an agent's address: {} (the line is not shown)",
                why.replace(&format!("'{address}'"), "it")
            ))
        })?;
        let label = words.collect::<Vec<_>>().join(" ");
        if let Some(earlier) = hosts.iter().find(|h| h.address == address) {
            return Err(bad(format!(
                "{address} is named twice (first on {})",
                earlier.source
            )));
        }
        hosts.push(HostEntry {
            address: address.to_string(),
            label: (!label.is_empty()).then_some(label),
            source: format!("{path} line {line}"),
        });
    }
    if hosts.is_empty() {
        return Err(HostsFileError::Empty(path.to_string()));
    }
    Ok(hosts)
}

/// HOST:PORT with a non-empty host and a port in 1..=65535 (IPv6 as [ADDR]:PORT).
pub fn check_address(address: &str) -> Result<(), String> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("'{address}' has no port"));
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("'{address}' has no host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(format!("'{address}': write an IPv6 address as [ADDR]:PORT"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("'{address}' has no valid port (1-65535)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_addresses_labels_and_sources() {
        let text = "# the fleet\n10.0.0.5:7700 c5-a\n\n  [::1]:7700   two words  # comment\nhost.example:1\n";
        let hosts = parse_hosts_file(text, "hosts.txt").unwrap();
        assert_eq!(
            hosts,
            vec![
                HostEntry {
                    address: "10.0.0.5:7700".into(),
                    label: Some("c5-a".into()),
                    source: "hosts.txt line 2".into()
                },
                HostEntry {
                    address: "[::1]:7700".into(),
                    label: Some("two words".into()),
                    source: "hosts.txt line 4".into()
                },
                HostEntry {
                    address: "host.example:1".into(),
                    label: None,
                    source: "hosts.txt line 5".into()
                },
            ]
        );
    }

    #[test]
    fn bad_lines_are_named_with_their_number() {
        for (text, line, words) in [
            ("10.0.0.5\n", 1, "no port"),
            ("a:1\n:7700\n", 2, "no host"),
            ("a:1\nb:0\n", 2, "valid port"),
            ("a:99999\n", 1, "valid port"),
            ("::1:7700\n", 1, "IPv6"),
            (
                "a:1\n# x\na:1 again\n",
                3,
                "named twice (first on f line 1)",
            ),
        ] {
            let err = parse_hosts_file(text, "f").unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(err, HostsFileError::Line { line: l, .. } if l == line),
                "{text:?}: {message}"
            );
            assert!(message.contains(words), "{text:?}: {message}");
            assert!(message.contains(&format!("f line {line}")), "{message}");
        }
    }

    #[test]
    fn a_line_that_is_not_an_address_is_not_echoed() {
        // `--hosts /etc/passwd`: the error says what is wrong, never what the file holds.
        let passwd = "root:x:0:0:root:/root:/bin/bash\n";
        let message = parse_hosts_file(passwd, "/etc/passwd")
            .unwrap_err()
            .to_string();
        assert!(message.contains("/etc/passwd line 1"), "{message}");
        assert!(!message.contains("root"), "{message}");
        assert!(!message.contains("/bin/bash"), "{message}");
        let err = read_hosts_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn a_file_without_hosts_is_refused() {
        for text in ["", "# only\n\n   \n"] {
            let err = parse_hosts_file(text, "f").unwrap_err();
            assert!(matches!(err, HostsFileError::Empty(_)), "{err}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read_hosts_file(Path::new("/nonexistent/hosts.txt")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/hosts.txt"), "{err}");
    }
}
