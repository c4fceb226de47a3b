//! `quietbench caps`: for the engineer of CONTEXT.md §2 before they spend money. An instance
//! type's EBS and network caps beside a volume's, which one binds for throughput at 128 KiB and
//! for IOPS at 16 KiB, and candidates side by side with their price. The caps come from
//! DescribeInstanceTypes (saved for offline use) or, with `--offline`, from the saved copy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use serde::Serialize;

use crate::context::CommandContext;
use crate::limits::attribution::{Cap, disk_caps, fmt};
use crate::limits::cache::{CapsCache, age, default_path};
use crate::limits::caps::{HostCaps, InstanceCaps, VolumeInfo};
use crate::limits::lookup::{AwsTarget, CapsSource};
use crate::limits::volume_types::volume_limits;
use crate::session::runtime;

/// Throughput is judged at 128 KiB requests and IOPS at 16 KiB: the sizes AWS publishes its
/// instance caps for.
const THROUGHPUT_BLOCK: u64 = 128 << 10;
const IOPS_BLOCK: u64 = 16 << 10;

/// What `caps` was asked.
#[derive(Debug, Clone)]
pub struct LimitsRequest {
    /// The instance type, then each `--vs`.
    pub types: Vec<String>,
    /// `--volume`.
    pub volume: Option<VolumeInfo>,
    /// `--prices FILE`.
    pub prices: Option<PathBuf>,
    /// Never call AWS: answer from the saved copy.
    pub offline: bool,
    /// JSON instead of text.
    pub json: bool,
    /// Region, profile, endpoint.
    pub aws: AwsTarget,
    /// The saved copy (default: [`default_path`]).
    pub cache: Option<PathBuf>,
}

/// Which cap binds at one request size.
#[derive(Debug, Clone, Serialize)]
pub struct Binding {
    /// "throughput at 128 KiB" or "IOPS at 16 KiB".
    pub what: String,
    /// The lowest cap, in its own unit (MB/s or IOPS).
    pub cap: Cap,
    /// The figure the pair allows, in `unit`.
    pub allows: f64,
    /// MB/s or IOPS.
    pub unit: &'static str,
    /// The other caps at this size, highest last.
    pub others: Vec<Cap>,
    /// The request size, bytes.
    pub block_bytes: u64,
}

/// One candidate.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Its caps.
    pub caps: InstanceCaps,
    /// On-demand USD per hour, from `--prices`.
    pub usd_per_hour: Option<f64>,
    /// Where the caps come from: "DescribeInstanceTypes" or "saved 3 days ago".
    pub source: String,
    /// Throughput at 128 KiB, then IOPS at 16 KiB.
    pub bindings: Vec<Binding>,
}

fn binding(host: &HostCaps, device: Option<&str>, block: u64, iops: bool) -> Option<Binding> {
    let (mut caps, _) = disk_caps(host, device, block);
    caps.sort_by(|a, b| a.ceiling.total_cmp(&b.ceiling));
    let lowest = caps.first()?.clone();
    let (what, allows, unit) = if iops {
        (
            "IOPS at 16 KiB",
            lowest.ceiling * 1e6 / block as f64,
            "IOPS",
        )
    } else {
        ("throughput at 128 KiB", lowest.ceiling, "MB/s")
    };
    Some(Binding {
        what: what.into(),
        cap: lowest,
        allows,
        unit,
        others: caps.into_iter().skip(1).collect(),
        block_bytes: block,
    })
}

/// Reads a price file: `instance_type,usd_per_hour` lines (a header and `#` comments allowed).
pub fn parse_prices(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut prices = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (kind, price) = line
            .split_once(',')
            .ok_or_else(|| format!("line {}: expected instance_type,usd_per_hour", n + 1))?;
        let price = price.trim();
        match price.parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => {
                prices.insert(kind.trim().to_string(), p);
            }
            _ if n == 0 => continue, // a header line
            _ => {
                return Err(format!(
                    "line {}: {price:?} is not a price in USD per hour",
                    n + 1
                ));
            }
        }
    }
    Ok(prices)
}

/// Fetches `types` (saving them), or reads them from the saved copy when offline or when the
/// API cannot be reached; each with where it came from.
fn caps_of(
    req: &LimitsRequest,
    source: Result<&dyn CapsSource, String>,
    cache_path: &Path,
) -> anyhow::Result<Vec<(InstanceCaps, String)>> {
    let mut cache = CapsCache::load(cache_path).map_err(anyhow::Error::msg)?;
    let now = SystemTime::now();
    let mut fetch_error = None;
    if !req.offline {
        let fetched = source
            .map_err(anyhow::Error::msg)
            .and_then(|s| runtime()?.block_on(s.instance_types(&req.aws, &req.types)));
        match fetched {
            Ok(caps) => {
                cache.insert(&caps, req.aws.region.as_deref(), now);
                if let Err(e) = cache.save(cache_path) {
                    eprintln!("quietbench: warning: {e}");
                }
                return Ok(caps
                    .into_iter()
                    .map(|c| (c, "DescribeInstanceTypes".to_string()))
                    .collect());
            }
            Err(e) => fetch_error = Some(e),
        }
    }
    req.types
        .iter()
        .map(|t| match cache.types.get(t) {
            Some(saved) => Ok((
                saved.caps.clone(),
                format!(
                    "saved copy, fetched {}{}",
                    age(saved.fetched_at_unix_s, now),
                    saved
                        .region
                        .as_deref()
                        .map(|r| format!(", {r}"))
                        .unwrap_or_default()
                ),
            )),
            None => Err(match &fetch_error {
                Some(e) => anyhow::anyhow!(
                    "{t}: DescribeInstanceTypes failed ({e:#}) and {} has no saved copy of it",
                    cache_path.display()
                ),
                None => anyhow::anyhow!(
                    "{t}: no saved copy in {} (run once without --offline, with AWS \
                     credentials)",
                    cache_path.display()
                ),
            }),
        })
        .collect()
}

/// Builds the candidates, looking caps up with `context`'s source.
pub fn candidates(req: &LimitsRequest, context: &CommandContext) -> anyhow::Result<Vec<Candidate>> {
    let cache_path = req.cache.clone().unwrap_or_else(default_path);
    let prices = match &req.prices {
        Some(path) => {
            let text =
                quietbench_host::input::read_text(path, quietbench_host::input::MAX_INPUT_BYTES)
                    .map_err(|e| anyhow::anyhow!("cannot read --prices {}: {e}", path.display()))?;
            parse_prices(&text).map_err(|e| anyhow::anyhow!("--prices {}: {e}", path.display()))?
        }
        None => BTreeMap::new(),
    };
    if let Some(v) = &req.volume {
        volume_limits(v).map_err(anyhow::Error::msg)?;
    }
    let device = req.volume.as_ref().map(|_| "volume");
    Ok(caps_of(req, context.caps_source(), &cache_path)?
        .into_iter()
        .map(|(caps, source)| {
            let host = HostCaps {
                instance: Some(caps.clone()),
                volumes: req
                    .volume
                    .iter()
                    .map(|v| VolumeInfo {
                        device: Some("volume".into()),
                        ..v.clone()
                    })
                    .collect(),
                ..Default::default()
            };
            let bindings = [(THROUGHPUT_BLOCK, false), (IOPS_BLOCK, true)]
                .into_iter()
                .filter_map(|(block, iops)| binding(&host, device, block, iops))
                .collect();
            Candidate {
                usd_per_hour: prices.get(&caps.instance_type).copied(),
                caps,
                source,
                bindings,
            }
        })
        .collect())
}

/// The text report.
pub fn render(candidates: &[Candidate], volume: Option<&VolumeInfo>) -> String {
    let mut out = String::new();
    if let Some(v) = volume.and_then(|v| volume_limits(v).ok()) {
        out.push_str(&format!(
            "volume: {}: {} IOPS, {} MiB/s ({} MB/s){}\n",
            v.basis,
            fmt(v.iops),
            fmt(v.throughput_mib_per_s),
            fmt(v.mb_per_s()),
            v.caveat
                .as_ref()
                .map(|c| format!("; {c}"))
                .unwrap_or_default()
        ));
        out.push_str(&format!("  (the volume type's rules: {})\n", v.source));
    }
    out.push_str(&format!(
        "{:<16} {:>12} {:>12} {:>12} {:>12}  {:<22} {:>8}\n",
        "instance", "EBS MB/s", "burst MB/s", "EBS IOPS", "burst IOPS", "network", "$/hour"
    ));
    for c in candidates {
        let ebs = c.caps.ebs.as_ref();
        let cell =
            |f: fn(&crate::limits::EbsCaps) -> f64| ebs.map(f).map(fmt).unwrap_or("-".into());
        out.push_str(&format!(
            "{:<16} {:>12} {:>12} {:>12} {:>12}  {:<22} {:>8}\n",
            c.caps.instance_type,
            cell(|e| e.baseline_mb_per_s),
            cell(|e| e.maximum_mb_per_s),
            cell(|e| e.baseline_iops),
            cell(|e| e.maximum_iops),
            c.caps.network.performance.as_deref().unwrap_or("-"),
            c.usd_per_hour
                .map(|p| format!("{p:.4}"))
                .unwrap_or("-".into()),
        ));
    }
    for c in candidates {
        out.push_str(&format!("\n{} ({}):\n", c.caps.instance_type, c.source));
        for b in &c.bindings {
            let whose = |c: &Cap| match c.holder {
                crate::limits::attribution::Holder::Volume => "the volume's",
                _ => "the instance's",
            };
            // Each cap as what it allows at this request size, in the binding's unit.
            let allows = |c: &Cap| {
                if b.unit == "IOPS" {
                    c.ceiling * 1e6 / b.block_bytes as f64
                } else {
                    c.ceiling
                }
            };
            let others: Vec<String> = b
                .others
                .iter()
                .map(|o| format!("{} {} {} {}", whose(o), o.dimension, fmt(allows(o)), b.unit))
                .collect();
            out.push_str(&format!(
                "  {}: {} {} binds at {} {}{}\n",
                b.what,
                whose(&b.cap),
                b.cap.dimension,
                fmt(b.allows),
                b.unit,
                if others.is_empty() {
                    String::new()
                } else {
                    format!("; then {}", others.join(", "))
                }
            ));
        }
        if let (Some(p), Some(b)) = (c.usd_per_hour, c.bindings.first()) {
            out.push_str(&format!(
                "  {} MB/s per USD/hour at 128 KiB\n",
                fmt(b.allows / p)
            ));
        }
    }
    out
}

/// `quietbench caps`.
pub fn limits(req: LimitsRequest, context: &CommandContext) -> anyhow::Result<ExitCode> {
    let found = candidates(&req, context)?;
    if req.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print!("{}", render(&found, req.volume.as_ref()));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_take_a_header_and_comments_and_name_a_bad_line() {
        let p =
            parse_prices("instance_type,usd_per_hour\n# on-demand\nr6i.8xlarge,2.016\n").unwrap();
        assert_eq!(p["r6i.8xlarge"], 2.016);
        let err = parse_prices("r6i.8xlarge,2\nm6in.12xlarge,cheap\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert!(
            parse_prices("r6i.8xlarge 2\n")
                .unwrap_err()
                .contains("line 1")
        );
    }
}
