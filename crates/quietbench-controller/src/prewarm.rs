//! Pre-warming restored volumes before a run measures them (CONTEXT.md §5: a volume created from
//! a snapshot loads each block from S3 on first touch, ~10× slower, and a disk probe over it
//! measures S3, not the volume). When a run has disk probes, each host's volumes that need it
//! ([`prewarm_targets`], from the pure half in `limits::prewarm`) are read whole by the agent's `disk.scan prewarm=true` (in parallel,
//! resumable from its state file) before the first trial, with progress and an ETA; the time
//! and rate go into the host's caps, and the report.

use std::time::{Duration, Instant};

use quietbench_proto::metrics;
use quietbench_proto::v1 as pb;

pub use crate::limits::prewarm::{PrewarmPolicy, prewarm_targets};

use crate::connection::AgentConnection;
use crate::limits::caps::{HostCaps, Prewarm};
use crate::progress::Progress;

/// Each pre-warm trial's length: long enough to read most volumes at once; a longer one goes
/// on in the next trial from the state file.
const TRIAL: Duration = Duration::from_secs(600);
/// Reading threads: EBS serves a deep parallel read far faster than one stream.
const THREADS: &str = "8";

/// Reads `path` whole through the agent (`disk.scan prewarm=true`), trial after trial until a
/// trial ends early (everything read). `size_bytes` (when known) gives the ETA.
pub async fn prewarm_path(
    conn: &mut AgentConnection,
    path: &str,
    size_bytes: Option<u64>,
    progress: &Progress,
) -> Result<Prewarm, crate::connection::AgentError> {
    let started = Instant::now();
    let mut bytes = 0.0f64;
    for round in 1u32.. {
        let request = pb::RunProbeRequest {
            probe: "disk.scan".into(),
            params: [("path", path), ("prewarm", "true"), ("threads", THREADS)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            duration_ms: TRIAL.as_millis() as u64,
            interval_ms: 1000,
            cpus: Vec::new(),
            unpinned: false,
            trial_id: format!("prewarm-{round}"),
            check_only: false,
        };
        let before = bytes;
        let done = conn
            .run_probe(request, |event| {
                if let pb::probe_event::Event::Interval(i) = event {
                    let mb_s = i
                        .metrics
                        .iter()
                        .find(|m| m.name == metrics::READ_MB_PER_SEC)
                        .and_then(|m| m.value)
                        .unwrap_or(0.0);
                    let secs = (i.end_unix_ns.saturating_sub(i.start_unix_ns)) as f64 / 1e9;
                    bytes += mb_s * 1e6 * secs;
                    progress.status(eta_line(path, bytes, size_bytes, started.elapsed(), mb_s));
                }
            })
            .await?;
        let r = &done.result;
        let took = Duration::from_nanos(r.end_unix_ns.saturating_sub(r.start_unix_ns));
        // The whole-trial figure is exact where the intervals' sum is not (the last partial one).
        if let Some(mb_s) = r
            .metrics
            .iter()
            .find(|m| m.name == metrics::READ_MB_PER_SEC)
            .and_then(|m| m.value)
        {
            bytes = before + mb_s * 1e6 * took.as_secs_f64();
        }
        if took + Duration::from_secs(2) < TRIAL || r.cancelled {
            break;
        }
    }
    Ok(Prewarm {
        bytes: bytes.max(0.0) as u64,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// "pre-warming /dev/nvme1n1: 12.0 of 50.0 GiB (24%), 44.1 MB/s, about 14 min left".
pub fn eta_line(
    path: &str,
    bytes: f64,
    size: Option<u64>,
    elapsed: Duration,
    mb_per_s: f64,
) -> String {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    match size.filter(|s| *s > 0) {
        Some(size) => {
            let rate = bytes / elapsed.as_secs_f64().max(1e-3);
            let left = (size as f64 - bytes).max(0.0);
            let eta = if rate > 0.0 {
                format!(
                    ", about {} left",
                    human(Duration::from_secs_f64(left / rate))
                )
            } else {
                String::new()
            };
            format!(
                "pre-warming {path}: {:.1} of {:.1} GiB ({:.0}%), {mb_per_s:.1} MB/s{eta}",
                gib(bytes),
                gib(size as f64),
                (bytes / size as f64 * 100.0).min(100.0)
            )
        }
        None => format!(
            "pre-warming {path}: {:.1} GiB read, {mb_per_s:.1} MB/s",
            gib(bytes)
        ),
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 90 {
        format!("{s} s")
    } else if s < 90 * 60 {
        format!("{} min", s.div_ceil(60))
    } else {
        format!("{:.1} h", s as f64 / 3600.0)
    }
}

/// Pre-warms the volumes of one host that `policy` selects, recording each pass in `caps`.
/// Sizes come from the fingerprint's block devices.
pub async fn prewarm_host(
    conn: &mut AgentConnection,
    fingerprint: &pb::Fingerprint,
    caps: &mut HostCaps,
    policy: PrewarmPolicy,
    progress: &Progress,
) -> Result<(), crate::connection::AgentError> {
    let ebs_devices = fingerprint
        .block_devices
        .iter()
        .filter(|d| d.ebs_volume_id.is_some())
        .count();
    if policy != PrewarmPolicy::Never && caps.volumes.is_empty() && ebs_devices > 0 {
        progress.line(&format!(
            "not pre-warming: which of the {ebs_devices} EBS volume(s) were restored from a \
             snapshot is not known without DescribeVolumes (see the caps note)"
        ));
    }
    for (device, volume_id) in prewarm_targets(caps, policy) {
        let size = fingerprint
            .block_devices
            .iter()
            .find(|d| d.name == device)
            .and_then(|d| d.size_bytes);
        let path = format!("/dev/{device}");
        progress.line(&format!(
            "pre-warming {path} ({volume_id}, restored from a snapshot) before the disk probes"
        ));
        let done = prewarm_path(conn, &path, size, progress).await?;
        progress.line(&format!("pre-warmed {path}: {}", done.summary()));
        if let Some(v) = caps.volumes.iter_mut().find(|v| v.volume_id == volume_id) {
            v.prewarm = Some(done);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::caps::VolumeInfo;

    fn volume(id: &str, device: &str, snapshot: Option<&str>) -> VolumeInfo {
        VolumeInfo {
            volume_id: id.into(),
            volume_type: "gp2".into(),
            size_gib: 50,
            iops: Some(150),
            throughput_mib_per_s: None,
            snapshot_id: snapshot.map(str::to_string),
            multi_attach: false,
            initialization: None,
            device: Some(device.into()),
            prewarm: None,
        }
    }

    #[test]
    fn auto_picks_restored_volumes_only() {
        let mut caps = HostCaps {
            volumes: vec![
                volume("vol-restored", "nvme1n1", Some("snap-1")),
                volume("vol-new", "nvme2n1", None),
            ],
            ..Default::default()
        };
        assert_eq!(
            prewarm_targets(&caps, PrewarmPolicy::Auto),
            vec![("nvme1n1".to_string(), "vol-restored".to_string())]
        );
        assert_eq!(prewarm_targets(&caps, PrewarmPolicy::Always).len(), 2);
        assert!(prewarm_targets(&caps, PrewarmPolicy::Never).is_empty());
        // Loaded already (EC2 says so), or pre-warmed by us: nothing left to do.
        caps.volumes[0].initialization = Some("completed".into());
        assert!(prewarm_targets(&caps, PrewarmPolicy::Auto).is_empty());
        caps.volumes[0].initialization = None;
        caps.volumes[0].prewarm = Some(Prewarm {
            bytes: 1,
            seconds: 1.0,
        });
        assert!(prewarm_targets(&caps, PrewarmPolicy::Auto).is_empty());
        assert!(
            PrewarmPolicy::parse("sometimes")
                .unwrap_err()
                .contains("auto")
        );
    }

    #[test]
    fn the_eta_follows_the_rate_so_far() {
        let line = eta_line(
            "/dev/nvme1n1",
            12.0 * (1u64 << 30) as f64,
            Some(48 << 30),
            Duration::from_secs(300),
            44.0,
        );
        assert!(line.contains("12.0 of 48.0 GiB (25%)"), "{line}");
        assert!(line.contains("about 15 min left"), "{line}");
        assert!(eta_line("/x", 0.0, None, Duration::ZERO, 0.0).contains("0.0 GiB read"));
    }
}
