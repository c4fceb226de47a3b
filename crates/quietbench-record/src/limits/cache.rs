//! A saved copy of instance types' caps, so `quietbench caps` answers offline (on a laptop on
//! a plane, or without credentials) and says how old its answer is. One JSON file,
//! `$XDG_CACHE_HOME/quietbench/instance-types.json`, written whole through a temporary file
//! and a rename, so a crash never leaves half a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::caps::InstanceCaps;

/// One instance type as fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedType {
    /// When DescribeInstanceTypes gave it, seconds since the Unix epoch.
    pub fetched_at_unix_s: u64,
    /// The region it was asked in.
    pub region: Option<String>,
    /// Its caps.
    pub caps: InstanceCaps,
}

/// The whole cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapsCache {
    /// By instance type.
    pub types: BTreeMap<String, CachedType>,
}

/// `$XDG_CACHE_HOME/quietbench/instance-types.json`, else `~/.cache/quietbench/…`.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| std::env::home_dir().unwrap_or_default().join(".cache"));
    base.join("quietbench").join("instance-types.json")
}

impl CapsCache {
    /// Reads the cache; a missing file is an empty cache, an unreadable one an error naming it.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                format!(
                    "the saved instance types {} cannot be read ({e}): delete it and fetch again",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Adds freshly fetched types.
    pub fn insert(&mut self, caps: &[InstanceCaps], region: Option<&str>, now: SystemTime) {
        let at = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        for c in caps {
            self.types.insert(
                c.instance_type.clone(),
                CachedType {
                    fetched_at_unix_s: at,
                    region: region.map(str::to_string),
                    caps: c.clone(),
                },
            );
        }
    }

    /// Writes the cache whole (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| format!("cannot save {}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| fail(&e))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(|e| fail(&e))?;
        std::fs::rename(&tmp, path).map_err(|e| fail(&e))
    }
}

/// "3 days ago", "5 hours ago", "12 minutes ago", "just now": how old a saved answer is.
pub fn age(fetched_at_unix_s: u64, now: SystemTime) -> String {
    let now_s = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let secs = Duration::from_secs(now_s.saturating_sub(fetched_at_unix_s)).as_secs();
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match secs {
        0..60 => "just now".into(),
        60..3600 => format!("{} ago", plural(secs / 60, "minute")),
        3600..86400 => format!("{} ago", plural(secs / 3600, "hour")),
        _ => format!("{} ago", plural(secs / 86400, "day")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::caps::NetworkCaps;

    fn caps(kind: &str) -> InstanceCaps {
        InstanceCaps {
            instance_type: kind.into(),
            ebs: None,
            network: NetworkCaps {
                performance: Some("Up to 10 Gigabit".into()),
                ena_support: None,
                cards: Vec::new(),
            },
            default_vcpus: Some(2),
            default_cores: Some(1),
        }
    }

    #[test]
    fn saves_and_loads_and_tells_its_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q/instance-types.json");
        assert_eq!(CapsCache::load(&path).unwrap(), CapsCache::default());
        let mut cache = CapsCache::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        cache.insert(&[caps("c5.large")], Some("us-east-1"), t0);
        cache.save(&path).unwrap();
        let back = CapsCache::load(&path).unwrap();
        assert_eq!(back, cache);
        let at = back.types["c5.large"].fetched_at_unix_s;
        assert_eq!(
            age(at, t0 + Duration::from_secs(3 * 86400 + 5)),
            "3 days ago"
        );
        assert_eq!(age(at, t0 + Duration::from_secs(3600)), "1 hour ago");
        assert_eq!(age(at, t0), "just now");
        std::fs::write(&path, "{not json").unwrap();
        let err = CapsCache::load(&path).unwrap_err();
        assert!(err.contains("delete it and fetch again"), "{err}");
    }
}
