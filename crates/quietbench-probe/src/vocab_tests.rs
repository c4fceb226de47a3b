//! Every metric the probes define is in quietbench-vocab's registry, in the registered unit and
//! form: the names are the registry's constants, so what these check is that each probe puts a
//! name in the right place with the unit the controller will read it in.

use quietbench_vocab::metrics::{self, Form, Kind};

use crate::{Counter, MetricSet};

/// Panics unless `name` is registered with this unit, kind (where given) and form.
pub(crate) fn assert_registered(name: &str, unit: &str, kind: Option<Kind>, form: Form) {
    let m = metrics::lookup(name)
        .unwrap_or_else(|| panic!("{name:?} is not in quietbench_vocab::metrics::REGISTRY"));
    assert_eq!(
        m.unit, unit,
        "{name}: the probe's unit is not the registry's"
    );
    assert_eq!(
        m.form, form,
        "{name}: the probe's form is not the registry's"
    );
    if let Some(kind) = kind {
        assert_eq!(
            m.kind, kind,
            "{name}: the probe's kind is not the registry's"
        );
    }
}

/// Panics unless every counter of a trial is registered, as a counter, in its unit.
pub(crate) fn assert_counters_registered(counters: &[Counter]) {
    for c in counters {
        assert_registered(c.name, c.unit, None, Form::Counter);
    }
}

fn assert_metric_set_registered(set: &MetricSet) {
    // Exec's B/A ratios have no rate: an empty name is not emitted (see the agent's convert.rs).
    if set.rate_metric.is_empty() {
        assert!(set.rate_unit.is_empty(), "{set:?}");
    } else {
        assert_registered(
            set.rate_metric,
            set.rate_unit,
            Some(Kind::Rate),
            Form::Value,
        );
    }
    assert_registered(set.latency_metric, set.latency_unit, None, Form::Histogram);
    if let Some(t) = set.throughput {
        assert_registered(t.metric, t.unit, Some(Kind::Throughput), Form::Value);
    }
}

#[test]
fn every_metric_set_of_every_probe_is_registered() {
    let tables: &[&[MetricSet]] = &[
        &[MetricSet::EVENTS],
        crate::exec::PAIRED_COUNTED_METRIC_SETS,
        crate::exec::COUNTED_METRIC_SETS,
        crate::spawn::METRIC_SETS,
        crate::mem::LATENCY_METRIC_SETS,
        crate::mem::BANDWIDTH_METRIC_SETS,
        crate::net::throughput::SEND,
        crate::net::throughput::REVERSE,
        crate::net::throughput::BIDIR,
        crate::net::rr::METRIC_SETS,
        &[
            crate::disk::READ,
            crate::disk::WRITE,
            crate::disk::scan::REREAD,
        ],
    ];
    for set in tables.iter().flat_map(|t| t.iter()) {
        assert_metric_set_registered(set);
    }
}

/// The counters that can be made without running a probe; the tests that run disk.seq,
/// disk.scan and net.rr check the rest (`assert_counters_registered`).
#[test]
fn counters_made_without_a_probe_are_registered() {
    for name in crate::mem::RUNG_COUNTERS {
        assert_registered(name, "ns", Some(Kind::Time), Form::Counter);
    }
    let sender = crate::net::sys::TcpStats {
        total_retrans: 0,
        rtt_us: 40,
    };
    let counters = crate::net::throughput::flow_counters(&[sender], Some(true));
    assert_eq!(counters.len(), 3);
    assert_counters_registered(&counters);
}
