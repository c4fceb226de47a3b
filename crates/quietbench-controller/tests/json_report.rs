//! The JSON report of a fixed run, pinned by a snapshot (tests/snapshots/): its schema is a
//! promise to other tools (docs/json-report.md), so any change to a field's name, shape or
//! value shows up in review as a diff. Update on purpose with `cargo insta review`.

use quietbench_controller as qb;
use quietbench_record::record::test_records::sample_run;

#[test]
fn the_json_report_of_a_fixed_run_is_pinned() {
    // Sorted: a crate of the EC2 SDK turns on serde_json's preserve_order when the workspace
    // builds with the ec2 feature, and key order is no part of the schema.
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("run", report_of(&sample_run::sample_run()));
    });
}

#[test]
fn the_json_report_of_a_fixed_compare_run_is_pinned() {
    let run = sample_run::sample_compare_run();
    assert_eq!(run.hosts.len(), sample_run::COMPARE_HOSTS);
    let _ = sample_run::COMPARE_ROUNDS; // the HTML tests check the rounds
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("compare_run", report_of(&run));
    });
}

fn report_of(run: &qb::record::RunRecord) -> serde_json::Value {
    let report = qb::report::json::build(run);
    let mut value = serde_json::to_value(&report).unwrap();
    // The one field that changes with every release, not with the report.
    value["quietbench_version"] = "VERSION".into();
    // Trials carry every histogram as base64 DEFLATE, whose bytes follow the compressor's
    // version: the snapshot keeps that a histogram is there, not its bytes (the decoding tests
    // check those).
    for trial in value["trials"].as_array_mut().unwrap() {
        for metric in trial["metrics"].as_array_mut().unwrap() {
            if let Some(h) = metric.get_mut("histogram")
                && h.is_string()
            {
                *h = "<HdrHistogram V2 + DEFLATE, base64>".into();
            }
        }
    }
    value
}
