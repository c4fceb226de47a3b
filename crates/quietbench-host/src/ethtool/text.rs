//! The text `ethtool -S` prints, for tests: published ENA output exists only as text.

use super::NicStats;

/// A line of `ethtool -S` output that is not `name: value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ethtool -S output, line {line}: {reason}: {text:?}")]
pub struct EthtoolParseError {
    /// 1-based line number.
    pub line: usize,
    /// The line as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses the text `ethtool -S IFACE` prints: an optional `NIC statistics:` header, then one
/// `name: value` line per statistic (ethtool indents them; the indentation is optional here, as
/// published copies often lose it). Blank lines are skipped. The value is the text after the
/// last `": "`, because some drivers put `": "` inside names (`rxq0: rx_bytes: 1768`).
pub fn parse_ethtool_s(text: &str) -> Result<NicStats, EthtoolParseError> {
    let mut entries = Vec::new();
    let mut seen_content = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let first = !seen_content;
        seen_content = true;
        if first && line == "NIC statistics:" {
            continue;
        }
        let err = |reason| EthtoolParseError {
            line: i + 1,
            text: raw.to_string(),
            reason,
        };
        let (name, value) = line.rsplit_once(": ").ok_or_else(|| err("no \": \""))?;
        let name = name.trim_end();
        if name.is_empty() {
            return Err(err("empty name"));
        }
        let value = value
            .trim()
            .parse::<u64>()
            .map_err(|_| err("the value is not a whole number"))?;
        entries.push((name.to_string(), value));
    }
    Ok(NicStats { entries })
}
