//! `--volume gp3:iops=16000,throughput=1000,size=500`: a volume as `quietbench caps` is asked
//! about it, before it exists.

use super::caps::VolumeInfo;

/// Volume types the table knows.
const TYPES: &[&str] = &["gp2", "gp3", "io1", "io2", "st1", "sc1"];

/// Parses `TYPE[:key=value,...]` with keys `iops`, `throughput` (MiB/s), `size` (GiB).
pub fn parse_volume_spec(text: &str) -> Result<VolumeInfo, String> {
    let (kind, rest) = text.split_once(':').unwrap_or((text, ""));
    let kind = kind.trim();
    if !TYPES.contains(&kind) {
        return Err(format!(
            "unknown volume type {kind:?} in --volume {text:?}: give one of {}",
            TYPES.join(", ")
        ));
    }
    let mut volume = VolumeInfo {
        volume_id: "(--volume)".to_string(),
        volume_type: kind.to_string(),
        // Large enough that size-bound rules (gp2, st1, sc1) give their maximum unless told.
        size_gib: 16384,
        iops: None,
        throughput_mib_per_s: None,
        snapshot_id: None,
        multi_attach: false,
        initialization: None,
        device: None,
        prewarm: None,
    };
    for pair in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--volume {text:?}: {pair:?} is not key=value"))?;
        let number: u64 = value
            .trim()
            .parse()
            .map_err(|_| format!("--volume {text:?}: {key}={value:?} is not a whole number"))?;
        if number == 0 {
            return Err(format!("--volume {text:?}: {key} must be above 0"));
        }
        match key.trim() {
            "iops" => volume.iops = Some(number),
            "throughput" => volume.throughput_mib_per_s = Some(number),
            "size" => volume.size_gib = number,
            other => {
                return Err(format!(
                    "--volume {text:?}: unknown key {other:?}: give iops, throughput (MiB/s) or \
                     size (GiB)"
                ));
            }
        }
    }
    if kind == "gp2" {
        // DescribeVolumes reports gp2's size-bound baseline as its IOPS; the table derives it.
        volume.iops = None;
    }
    if volume.throughput_mib_per_s.is_some() && kind != "gp3" {
        return Err(format!(
            "--volume {text:?}: only gp3 takes a provisioned throughput; {kind}'s follows from \
             its IOPS or size"
        ));
    }
    if matches!(kind, "io1" | "io2") && volume.iops.is_none() {
        return Err(format!("--volume {text:?}: {kind} needs iops=N"));
    }
    Ok(volume)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example_and_refuses_nonsense() {
        let v = parse_volume_spec("gp3:iops=16000,throughput=1000").unwrap();
        assert_eq!((v.iops, v.throughput_mib_per_s), (Some(16000), Some(1000)));
        let v = parse_volume_spec("io2:iops=32000,size=1000").unwrap();
        assert_eq!((v.iops, v.size_gib), (Some(32000), 1000));
        assert_eq!(parse_volume_spec("gp2:size=50").unwrap().size_gib, 50);
        for (bad, says) in [
            ("gp4", "unknown volume type"),
            ("gp3:iops", "not key=value"),
            ("gp3:iops=lots", "not a whole number"),
            ("gp3:iops=0", "above 0"),
            ("gp3:speed=1", "unknown key"),
            ("io2:throughput=500,iops=1000", "only gp3"),
            ("io1", "needs iops"),
        ] {
            let err = parse_volume_spec(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
