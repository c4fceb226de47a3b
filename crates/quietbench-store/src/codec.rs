//! Conversions between the controller's records and the store's columns: times, counts, JSON
//! text and protobuf BLOBs. Pure functions, so each is tested on its own.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;
use quietbench_proto::v1 as pb;
use quietbench_record::record::RunSettings;
use quietbench_record::record::figures::TrialFigure;
use quietbench_record::schedule::VariantSpec;
use serde::{Deserialize, Serialize};

/// A time as signed ns since the Unix epoch; `None` beyond ±292 years of 1970.
pub fn unix_ns(t: SystemTime) -> Option<i64> {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).ok(),
        Err(before) => i64::try_from(before.duration().as_nanos()).ok().map(|n| -n),
    }
}

/// The inverse of [`unix_ns`].
pub fn from_unix_ns(ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// Now, as [`unix_ns`] (0 on a clock outside ±292 years, which no real clock is).
pub fn now_unix_ns() -> i64 {
    unix_ns(SystemTime::now()).unwrap_or(0)
}

/// The run's settings as stored in `runs.settings_json`. A copy of [`RunSettings`] rather than
/// a derive on it, so the stored form changes only on purpose: a field added to RunSettings
/// fails to compile here until it is added with `#[serde(default)]`, so that runs stored before
/// still load.
#[derive(Debug, Serialize, Deserialize)]
pub struct SettingsDoc {
    probes: Vec<String>,
    params: BTreeMap<String, String>,
    rounds: u32,
    duration_ms: u64,
    interval_ms: u64,
    cpus: Vec<u32>,
    tune: bool,
    unpinned: bool,
    variants: Vec<VariantDoc>,
    warmup: u32,
    seed: u64,
    /// Absent in runs stored before hosts ran concurrently; they ran in lock step.
    #[serde(default = "round_sync_default")]
    round_sync: bool,
    /// `--figure` of a compare run ("median" or "mean"); absent in runs stored before it was
    /// kept, and for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compare_figure: Option<String>,
    /// `run --figure` or a plan's `figure`; absent for the default and in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exec_figure: Option<String>,
    /// `quietbench capacity`'s SLO; absent for other runs and in older ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capacity_slo: Option<String>,
}

fn round_sync_default() -> bool {
    true
}

/// [`VariantSpec`] as stored.
#[derive(Debug, Serialize, Deserialize)]
struct VariantDoc {
    name: String,
    probe: String,
    params: BTreeMap<String, String>,
}

impl From<&RunSettings> for SettingsDoc {
    fn from(s: &RunSettings) -> Self {
        Self {
            probes: s.probes.clone(),
            params: s.params.clone(),
            rounds: s.rounds,
            duration_ms: s.duration_ms,
            interval_ms: s.interval_ms,
            cpus: s.cpus.clone(),
            tune: s.tune,
            unpinned: s.unpinned,
            variants: s
                .variants
                .iter()
                .map(|v| VariantDoc {
                    name: v.name.clone(),
                    probe: v.probe.clone(),
                    params: v.params.clone(),
                })
                .collect(),
            warmup: s.warmup,
            seed: s.seed,
            round_sync: s.round_sync,
            compare_figure: s.compare_figure.map(|f| f.as_str().to_string()),
            exec_figure: s.exec_figure.map(|f| f.as_str().to_string()),
            capacity_slo: s.capacity_slo.clone(),
        }
    }
}

impl From<SettingsDoc> for RunSettings {
    fn from(d: SettingsDoc) -> Self {
        Self {
            probes: d.probes,
            params: d.params,
            rounds: d.rounds,
            duration_ms: d.duration_ms,
            interval_ms: d.interval_ms,
            cpus: d.cpus,
            tune: d.tune,
            unpinned: d.unpinned,
            variants: d
                .variants
                .into_iter()
                .map(|v| VariantSpec {
                    name: v.name,
                    probe: v.probe,
                    params: v.params,
                })
                .collect(),
            warmup: d.warmup,
            seed: d.seed,
            round_sync: d.round_sync,
            // A figure this build does not know is dropped: the run then reads as judged on
            // the default figure, which beats refusing to load it.
            compare_figure: d.compare_figure.as_deref().and_then(TrialFigure::parse),
            exec_figure: d.exec_figure.as_deref().and_then(TrialFigure::parse),
            capacity_slo: d.capacity_slo,
        }
    }
}

/// Settings as JSON text.
pub fn settings_json(s: &RunSettings) -> String {
    serde_json::to_string(&SettingsDoc::from(s)).expect("strings, numbers and maps serialize")
}

/// The inverse of [`settings_json`].
pub fn parse_settings(text: &str) -> Result<RunSettings, serde_json::Error> {
    serde_json::from_str::<SettingsDoc>(text).map(RunSettings::from)
}

/// Just the probes of stored settings, for run lists (cheaper and more forgiving than the whole).
pub fn parse_probes(text: &str) -> Result<Vec<String>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Probes {
        probes: Vec<String>,
    }
    serde_json::from_str::<Probes>(text).map(|p| p.probes)
}

/// A string map as a JSON object.
pub fn params_json(params: &BTreeMap<String, String>) -> String {
    serde_json::to_string(params).expect("a string map serializes")
}

/// The inverse of [`params_json`].
pub fn parse_params(text: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
    serde_json::from_str(text)
}

/// Interval values as a JSON array. JSON has no NaN or infinities, and serde_json would write
/// them as `null` (which reads back as an error), so they are written as the strings "NaN",
/// "inf" and "-inf". Finite values are written in the shortest form that reads back to the
/// same f64 (serde_json's `float_roundtrip` parses them exactly).
pub fn interval_values_json(values: &[f64]) -> String {
    let items: Vec<serde_json::Value> = values.iter().map(|&v| f64_value(v)).collect();
    serde_json::to_string(&items).expect("numbers and strings serialize")
}

/// The inverse of [`interval_values_json`].
pub fn parse_interval_values(text: &str) -> Result<Vec<f64>, String> {
    let items: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    items.iter().map(parse_f64_value).collect()
}

/// Named values as a JSON array of `[name, value]` pairs (order and repeats kept), values
/// written as in [`interval_values_json`].
pub fn named_values_json(values: &[(String, f64)]) -> String {
    let items: Vec<(&str, serde_json::Value)> = values
        .iter()
        .map(|(name, v)| (name.as_str(), f64_value(*v)))
        .collect();
    serde_json::to_string(&items).expect("strings and numbers serialize")
}

/// The inverse of [`named_values_json`].
pub fn parse_named_values(text: &str) -> Result<Vec<(String, f64)>, String> {
    let items: Vec<(String, serde_json::Value)> =
        serde_json::from_str(text).map_err(|e| e.to_string())?;
    items
        .into_iter()
        .map(|(name, v)| parse_f64_value(&v).map(|v| (name, v)))
        .collect()
}

fn f64_value(v: f64) -> serde_json::Value {
    match serde_json::Number::from_f64(v) {
        Some(n) => serde_json::Value::Number(n),
        None if v.is_nan() => "NaN".into(),
        None if v > 0.0 => "inf".into(),
        None => "-inf".into(),
    }
}

fn parse_f64_value(item: &serde_json::Value) -> Result<f64, String> {
    match item {
        serde_json::Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not an f64")),
        serde_json::Value::String(s) if s == "NaN" => Ok(f64::NAN),
        serde_json::Value::String(s) if s == "inf" => Ok(f64::INFINITY),
        serde_json::Value::String(s) if s == "-inf" => Ok(f64::NEG_INFINITY),
        other => Err(format!("{other} is not a number")),
    }
}

/// Host controls as one BLOB: each message length-delimited, one after another (a repeated
/// field without a wrapper message of its own).
pub fn encode_tuning(reports: &[pb::ControlReport]) -> Vec<u8> {
    let mut buf = Vec::new();
    for report in reports {
        report
            .encode_length_delimited(&mut buf)
            .expect("a Vec grows as needed");
    }
    buf
}

/// The inverse of [`encode_tuning`].
pub fn decode_tuning(mut bytes: &[u8]) -> Result<Vec<pb::ControlReport>, prost::DecodeError> {
    let mut reports = Vec::new();
    while !bytes.is_empty() {
        reports.push(pb::ControlReport::decode_length_delimited(&mut bytes)?);
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_to_the_nanosecond_both_sides_of_the_epoch() {
        for ns in [
            0,
            1,
            -1,
            1_700_000_000_123_456_789,
            -86_400_000_000_007,
            i64::MAX,
            i64::MIN + 1,
        ] {
            assert_eq!(unix_ns(from_unix_ns(ns)), Some(ns), "{ns}");
        }
        let far = UNIX_EPOCH + Duration::from_secs(400 * 365 * 86_400);
        assert_eq!(unix_ns(far), None);
    }

    #[test]
    fn interval_values_keep_every_f64_including_non_finite() {
        let values = [
            0.0,
            -0.0,
            1.0 / 3.0,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            123_456.789_012_345_67,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let back = parse_interval_values(&interval_values_json(&values)).unwrap();
        assert_eq!(back.len(), values.len());
        for (a, b) in values.iter().zip(&back) {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{a} -> {b}"
            );
        }
        assert!(parse_interval_values("[null]").is_err());
        let named = vec![
            ("a".to_string(), 1.5),
            ("b".to_string(), f64::NEG_INFINITY),
            ("a".to_string(), -0.1),
        ];
        let back = parse_named_values(&named_values_json(&named)).unwrap();
        assert_eq!(back, named);
        assert!(parse_named_values(r#"[["a"]]"#).is_err());
        assert!(parse_interval_values("{").is_err());
    }

    #[test]
    fn tuning_round_trips_and_garbage_is_an_error() {
        let reports = vec![
            pb::ControlReport {
                control: "governor".into(),
                target: "cpu3".into(),
                outcome: pb::control_report::Outcome::Applied as i32,
                detail: "performance".into(),
            },
            pb::ControlReport::default(),
        ];
        assert_eq!(decode_tuning(&encode_tuning(&reports)).unwrap(), reports);
        assert!(decode_tuning(&[]).unwrap().is_empty());
        assert!(decode_tuning(&[0xff, 0xff, 0xff]).is_err());
    }
}
