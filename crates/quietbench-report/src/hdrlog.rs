//! HdrHistogram interval logs: one distribution metric's interval histograms across a run, in the
//! log format (version 1.3) that HdrHistogram's own tools read: Java `HistogramLogReader` and
//! `HistogramLogProcessor`, Python hdrh `HistogramLogReader`, and the other ports.
//!
//! The format, as HdrHistogram's `HistogramLogWriter` writes it and its readers parse it:
//!
//! ```text
//! #[Histogram log format version 1.3]
//! #[StartTime: 1700000000.000 (seconds since epoch), 2023-11-14T22:13:20.000Z]
//! #[BaseTime: 1700000000.000 (seconds since epoch)]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! Tag=A/10.0.1.10:7171/r1,0.000,1.000,1.134,HISTFAAAAC...
//! ```
//!
//! Each line: an optional `Tag=` (no commas, spaces or line breaks: the Java reader splits on
//! those, the Python reader ends the tag at the first comma), the start in seconds, the interval
//! length in seconds, the interval's max divided by a unit ratio, and the base64 of the
//! histogram's compressed (V2 + DEFLATE) encoding, which is exactly what agents send, so it is
//! passed through untouched.
//!
//! Two choices differ from what one might expect:
//! - Interval_Max is in milliseconds for nanosecond metrics (max / 1,000,000). That is the Java
//!   writer's default `maxValueUnitRatio`, and the default `-outputValueUnitRatio` of
//!   `HistogramLogProcessor`, so the column agrees with what the tools print. Readers ignore the
//!   column (the max is in the histogram); other units are written unscaled.
//! - Timestamps are relative to the run's start, with an explicit `#[BaseTime:` equal to the
//!   `#[StartTime:`, rather than left for the readers' "more than a year before StartTime"
//!   guess.
//!
//! Every line is tagged `VARIANT/HOST/rROUND`. `HistogramLogProcessor` reads only untagged lines
//! unless given `-tag`, so the log says so in a comment; `-listtags` lists the tags.

use std::io::{self, Write};
use std::time::UNIX_EPOCH;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use quietbench_proto::histogram::decode_bounded;
use quietbench_record::record::RunRecord;

/// One interval histogram to log.
struct Line<'a> {
    start_unix_ns: u64,
    end_unix_ns: u64,
    tag: String,
    encoded: &'a [u8],
    /// Where it came from, for the note on a histogram that cannot be decoded.
    origin: String,
}

/// A tag as the readers can take it: commas, whitespace and control characters become `_`.
pub fn tag_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// A comment's text on one line.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Writes the interval log of `metric` (a distribution metric such as `event_latency`): every
/// interval histogram of that metric in every trial of the run, warm-ups included (their rounds
/// are named in a comment), in time order. Returns the number of histogram lines written; a run
/// without that metric gets the header alone and 0.
///
/// An interval histogram that cannot be decoded (its max is needed for the line) is left out and
/// named in a comment line, so the rest of the log stays usable and the loss is visible.
pub fn write_interval_log(
    run: &RunRecord,
    metric: &str,
    out: &mut impl Write,
) -> io::Result<usize> {
    let mut lines: Vec<Line<'_>> = Vec::new();
    let mut unit = String::new();
    for t in &run.trials {
        if unit.is_empty()
            && let Some(m) = t.metrics.iter().find(|m| m.name == metric)
        {
            unit = m.unit.clone();
        }
        let host = run
            .hosts
            .get(t.host)
            .map_or_else(|| format!("host{}", t.host), |h| h.address.clone());
        for i in &t.interval_records {
            for (name, encoded) in &i.histograms {
                if name == metric {
                    lines.push(Line {
                        start_unix_ns: i.start_unix_ns,
                        end_unix_ns: i.end_unix_ns.max(i.start_unix_ns),
                        tag: tag_safe(&format!("{}/{host}/r{}", t.variant, t.round)),
                        encoded,
                        origin: format!("trial {} interval {}", t.trial_id, i.index),
                    });
                }
            }
        }
    }
    // Stable: intervals that start together keep the order the trials ran in.
    lines.sort_by_key(|l| l.start_unix_ns);

    let run_start_ns = run
        .started_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    // Never after the first interval (a negative start would not parse in the Python reader),
    // and on a whole millisecond, so the StartTime written with 3 decimals is exact and only
    // the relative timestamps round.
    let base_ns = lines
        .first()
        .map_or(run_start_ns, |l| l.start_unix_ns.min(run_start_ns));
    let base_ms = base_ns / 1_000_000;
    let base_ns = base_ms * 1_000_000;
    let base_s = format!("{}.{:03}", base_ms / 1000, base_ms % 1000);
    let (ratio, max_unit) = if unit == "ns" {
        (1e6, "ms")
    } else {
        (1.0, unit.as_str())
    };

    writeln!(
        out,
        "#[quietbench run {}: metric {} ({}), Interval_Max in {}]",
        one_line(&run.run_id),
        one_line(metric),
        one_line(if unit.is_empty() { "unitless" } else { &unit }),
        one_line(if max_unit.is_empty() {
            "its unit"
        } else {
            max_unit
        }),
    )?;
    writeln!(
        out,
        "#[Tags are VARIANT/HOST/rROUND; HistogramLogProcessor needs -tag TAG (see -listtags)]"
    )?;
    match run.settings.warmup {
        0 => {}
        1 => writeln!(
            out,
            "#[Round r1 is a warm-up round, left out of quietbench's summaries]"
        )?,
        n => writeln!(
            out,
            "#[Rounds r1 to r{n} are warm-up rounds, left out of quietbench's summaries]"
        )?,
    }
    writeln!(out, "#[Histogram log format version 1.3]")?;
    writeln!(
        out,
        "#[StartTime: {base_s} (seconds since epoch), {}]",
        super::json::rfc3339(UNIX_EPOCH + std::time::Duration::from_nanos(base_ns))
    )?;
    writeln!(out, "#[BaseTime: {base_s} (seconds since epoch)]")?;
    writeln!(
        out,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    )?;

    let mut written = 0;
    for l in &lines {
        let hist: Histogram<u64> = match decode_bounded(l.encoded) {
            Ok(h) => h,
            Err(e) => {
                writeln!(
                    out,
                    "#[Left out {}: not decodable as HdrHistogram V2: {}]",
                    one_line(&l.origin),
                    one_line(&e.to_string())
                )?;
                continue;
            }
        };
        let start_s = (l.start_unix_ns - base_ns) as f64 / 1e9;
        let length_s = (l.end_unix_ns - l.start_unix_ns) as f64 / 1e9;
        writeln!(
            out,
            "Tag={},{start_s:.3},{length_s:.3},{:.3},{}",
            l.tag,
            hist.max() as f64 / ratio,
            STANDARD.encode(l.encoded)
        )?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use quietbench_record::record::test_records::sample_run as fixture;

    fn log_of(run: &RunRecord, metric: &str) -> (String, usize) {
        let mut out = Vec::new();
        let n = write_interval_log(run, metric, &mut out).expect("writes to memory");
        (String::from_utf8(out).expect("the log is text"), n)
    }

    #[test]
    fn tags_hold_no_delimiters() {
        assert_eq!(tag_safe("A b,c\n/d\te"), "A_b_c_/d_e");
        assert_eq!(tag_safe("B/10.0.0.1:7171/r3"), "B/10.0.0.1:7171/r3");
    }

    #[test]
    fn header_and_lines_follow_the_format() {
        let run = fixture::sample_run();
        let (log, n) = log_of(&run, "event_latency");
        let expected = run.trials.len() * fixture::INTERVALS as usize;
        assert_eq!(n, expected);
        let lines: Vec<&str> = log.lines().collect();
        assert!(lines.contains(&"#[Histogram log format version 1.3]"));
        assert!(lines.contains(
            &"#[StartTime: 1700000000.000 (seconds since epoch), 2023-11-14T22:13:20.000Z]"
        ));
        assert!(lines.contains(&"#[BaseTime: 1700000000.000 (seconds since epoch)]"));
        let data: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("Tag="))
            .collect();
        assert_eq!(data.len(), expected);
        // The first interval: A on the first host, warm-up round 1, at the run's start.
        let fields: Vec<&str> = data[0].split(',').collect();
        assert_eq!(fields[0], "Tag=A/10.0.1.10:7171/r1");
        assert_eq!(fields[1], "0.000");
        assert_eq!(fields[2], "1.000");
        // ~1 ms events with a tail of up to 14x: the max, in ms.
        let max_ms: f64 = fields[3].parse().expect("a number");
        assert!(max_ms > 1.0 && max_ms < 20.0, "{max_ms}");
        assert!(fields[4].starts_with("HISTF"), "{}", fields[4]);
        // Time order.
        let starts: Vec<f64> = data
            .iter()
            .map(|l| l.split(',').nth(1).expect("start").parse().expect("num"))
            .collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]));
        // The legend is the last header line.
        let legend = lines
            .iter()
            .position(|l| l.starts_with("\"StartTimestamp\""));
        let first = lines.iter().position(|l| l.starts_with("Tag="));
        assert!(legend < first);
    }

    #[test]
    fn unknown_metric_gives_the_header_alone() {
        let (log, n) = log_of(&fixture::sample_run(), "no_such_metric");
        assert_eq!(n, 0);
        assert!(log.contains("#[Histogram log format version 1.3]"));
        assert!(!log.contains("Tag="));
    }

    #[test]
    fn an_undecodable_histogram_is_named_and_left_out() {
        let mut run = fixture::sample_run();
        run.trials[0].interval_records[1].histograms[0].1 = vec![1, 2, 3];
        let (log, n) = log_of(&run, "event_latency");
        assert_eq!(n, run.trials.len() * fixture::INTERVALS as usize - 1);
        let id = &run.trials[0].trial_id;
        assert!(log.contains(&format!("#[Left out trial {id} interval 1:")));
    }

    /// The log read back by HdrHistogram's Python port (`pip install hdrhistogram`): every
    /// interval decodes with its tag, count, timestamps and max.
    #[test]
    fn python_hdrh_reads_the_log_back() {
        // Off the millisecond grid, as real clocks are.
        const SKEW_NS: u64 = 123_456;
        let mut run = fixture::sample_run();
        run.started_at += std::time::Duration::from_nanos(SKEW_NS);
        for t in &mut run.trials {
            for i in &mut t.interval_records {
                i.start_unix_ns += SKEW_NS;
                i.end_unix_ns += SKEW_NS;
            }
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("event_latency.hlog");
        let mut file = std::fs::File::create(&path).expect("create log");
        write_interval_log(&run, "event_latency", &mut file).expect("write log");
        drop(file);
        let script = r#"
import sys
from hdrh.log import HistogramLogReader
from hdrh.histogram import HdrHistogram
reader = HistogramLogReader(sys.argv[1], HdrHistogram(1, 3600 * 10**9, 3))
while True:
    h = reader.get_next_interval_histogram()
    if h is None:
        break
    print(h.get_tag(), h.get_total_count(), round(h.get_start_time_stamp()),
          round(h.get_end_time_stamp()), h.get_max_value(),
          h.get_value_at_percentile(99.0))
"#;
        let output = Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| {
                panic!("python3 cannot run ({e}): install Python 3 and `pip install hdrhistogram`")
            });
        assert!(
            output.status.success(),
            "python hdrh could not read the log (is it installed? `pip install hdrhistogram`):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).expect("utf-8");
        let got: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();

        let mut expected: Vec<(u64, String, u64, u64, u64, u64)> = Vec::new();
        for t in &run.trials {
            for i in &t.interval_records {
                let hist = decode_bounded(&i.histograms[0].1).expect("fixture decodes");
                expected.push((
                    i.start_unix_ns,
                    format!("{}/{}/r{}", t.variant, run.hosts[t.host].address, t.round),
                    hist.len(),
                    hist.max(),
                    i.end_unix_ns,
                    hist.value_at_percentile(99.0),
                ));
            }
        }
        expected.sort_by_key(|e| e.0);
        assert_eq!(got.len(), expected.len(), "{text}");
        for (g, (start, tag, count, max, end, p99)) in got.iter().zip(&expected) {
            assert_eq!(g[0], tag);
            assert_eq!(g[1], count.to_string());
            assert_eq!(count, &fixture::SAMPLES);
            // Absolute ms since the epoch, rebuilt from StartTime/BaseTime + relative seconds:
            // within the millisecond the log's 3 decimals keep.
            let ms = |field: &str| -> u64 { field.parse().expect("ms") };
            assert!(
                ms(g[2]).abs_diff(start / 1_000_000) <= 1,
                "{} vs {start}",
                g[2]
            );
            assert!(ms(g[3]).abs_diff(end / 1_000_000) <= 1, "{} vs {end}", g[3]);
            // Same bucket: the two implementations report the bucket's highest equivalent value.
            let py_max: u64 = g[4].parse().expect("max");
            let py_p99: u64 = g[5].parse().expect("p99");
            assert!(py_max.abs_diff(*max) <= max / 1000 + 1, "{py_max} vs {max}");
            assert!(py_p99.abs_diff(*p99) <= p99 / 1000 + 1, "{py_p99} vs {p99}");
        }
    }
}
