//! The EC2 fleet's lines in the report: what it launched, kept, rejected, lost and re-rolled,
//! the instance-hours, the CPU models, one line per instance, and the lease.

use std::time::Instant;

use super::{Ec2Fleet, Fate, policy};
use crate::tags::format_expiry;

pub(super) fn lines(fleet: &Ec2Fleet) -> Vec<String> {
    let spec = &fleet.spec;
    let now = Instant::now();
    let mut lines = vec![format!(
        "fleet: ec2, {} × {} from {} in {}, run {}; placement {}; tenancy {}; threads per core {}",
        spec.count,
        spec.instance_type,
        spec.ami,
        fleet.ec2.as_ref().map_or("?", |e| e.region()),
        fleet.run_id,
        match (&spec.placement, &fleet.placement_group) {
            (Some(s), Some((name, _))) => format!("{s} group {name}"),
            _ => "none".into(),
        },
        spec.tenancy.name(),
        spec.threads_per_core
            .map_or("the type's default".into(), |t| t.to_string()),
    )];
    let count = |f: &dyn Fn(&Fate) -> bool| fleet.instances.iter().filter(|i| f(&i.fate)).count();
    let rerolls: u32 = fleet.instances.iter().map(|i| i.rerolls).sum();
    let hours: f64 = fleet.instances.iter().map(|i| i.hours(now)).sum();
    let spent: f64 = fleet
        .instances
        .iter()
        .filter(|i| !matches!(i.fate, Fate::Kept | Fate::Peer))
        .map(|i| i.hours(now))
        .sum();
    lines.push(format!(
        "fleet: launched {} in {} batch(es), kept {}, rejected {}, lost {}, {} re-roll(s){}; \
         {hours:.2} instance-hours so far, {spent:.2} of them on instances not kept",
        fleet.instances.len(),
        fleet.batches,
        count(&|f| *f == Fate::Kept),
        count(&|f| matches!(f, Fate::Rejected(_))),
        count(&|f| matches!(f, Fate::Lost(_))),
        rerolls,
        match count(&|f| *f == Fate::Peer) {
            0 => String::new(),
            n => format!(", {n} peer(s)"),
        }
    ));
    // The CPU-model policy's census: the host candidates'. Peers are matched to nothing; their
    // models are listed apart.
    let models_of = |f: &dyn Fn(&Fate) -> bool| -> Vec<String> {
        fleet
            .instances
            .iter()
            .filter(|i| f(&i.fate))
            .filter_map(|i| i.model.clone())
            .collect()
    };
    let models = models_of(&|f| *f != Fate::Peer);
    let kept_models = models_of(&|f| *f == Fate::Kept);
    let peer_models = models_of(&|f| *f == Fate::Peer);
    let census = |m: &[String]| {
        policy::census(m)
            .iter()
            .map(|(m, n)| format!("{n} × {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    lines.push(format!(
        "fleet: CPU models that came up: {}; kept: {}{}{}",
        census(&models),
        census(&kept_models),
        match (&spec.cpu_model, spec.stratify) {
            (Some(p), _) => format!(
                " (--cpu-model '{p}', --cpu-policy {})",
                spec.cpu_policy.name()
            ),
            (None, true) => " (--stratify)".into(),
            (None, false) => String::new(),
        },
        if peer_models.is_empty() {
            String::new()
        } else {
            format!("; peers (not matched): {}", census(&peer_models))
        }
    ));
    for i in &fleet.instances {
        lines.push(format!(
            "fleet: {} {}, {}, group {}, tenancy {}, host {}, {}, {} re-roll(s): {}",
            i.id,
            i.instance_type,
            i.zone,
            i.placement_group.as_deref().unwrap_or("-"),
            i.tenancy,
            i.host_id.as_deref().unwrap_or("-"),
            i.model.as_deref().unwrap_or("no answer"),
            i.rerolls,
            match &i.fate {
                Fate::Candidate => "undecided".to_string(),
                Fate::Kept => format!("kept, at {}", i.address.as_deref().unwrap_or("?")),
                Fate::Peer => format!("peer, at {}", i.address.as_deref().unwrap_or("?")),
                Fate::Rejected(why) => format!("terminated ({why})"),
                Fate::Lost(why) => format!("lost ({why})"),
            }
        ));
    }
    lines.push(format!(
        "fleet: lease renewed every {} min to {} min ahead, never past {} (--ttl {}){}",
        crate::tags::RENEW_EVERY.as_secs() / 60,
        crate::tags::LEASE.as_secs() / 60,
        format_expiry(fleet.deadline),
        humantime::format_duration(spec.ttl),
        if spec.keep {
            "; --keep: left running after the run"
        } else {
            ""
        }
    ));
    lines
}
