//! Choosing the hosts: launch batches until the CPU-model policy has its hosts (select,
//! reroll, stratify, or simply the count), then terminate the instances not kept.

use std::time::Instant;

use quietbench_controller::fleet::ec2::CpuPolicy;
use quietbench_controller::progress::Progress;

use super::address::Addresses;
use super::launch::Template;
use super::{Ec2Fleet, Fate, policy, reach};
use crate::client::explain;

impl Ec2Fleet {
    /// `reroll`: stops and starts instance `index` until its model matches, at most
    /// `max_rerolls` times. Returns whether it matches.
    pub(super) async fn reroll(
        &mut self,
        index: usize,
        pattern: &str,
        addresses: &mut Addresses,
        progress: &Progress,
    ) -> anyhow::Result<bool> {
        let ec2 = self.ec2.clone().expect("prepared");
        let id = self.instances[index].id.clone();
        while self.instances[index].rerolls < self.spec.max_rerolls {
            let model = self.instances[index].model.clone().unwrap_or_default();
            if policy::matches(&model, pattern) {
                return Ok(true);
            }
            self.instances[index].rerolls += 1;
            progress.line(&format!(
                "quietbench: {id} has CPU model {model}: stopping and starting it (re-roll {}/{})",
                self.instances[index].rerolls, self.spec.max_rerolls
            ));
            ec2.ec2
                .stop_instances()
                .instance_ids(&id)
                .send()
                .await
                .map_err(|e| explain("ec2:StopInstances", e))?;
            let deadline = Instant::now() + self.spec.boot_timeout;
            reach::wait_for_state(
                &ec2,
                std::slice::from_ref(&id),
                "stopped",
                deadline,
                &self.pacing,
                progress,
            )
            .await?;
            ec2.ec2
                .start_instances()
                .instance_ids(&id)
                .send()
                .await
                .map_err(|e| explain("ec2:StartInstances", e))?;
            self.instances[index].model = None;
            self.reach(&ec2, std::slice::from_ref(&id), addresses, progress)
                .await?;
            if !self.instances[index].live() {
                return Ok(false);
            }
        }
        Ok(policy::matches(
            self.instances[index].model.as_deref().unwrap_or_default(),
            pattern,
        ))
    }

    /// The instances still in the running, in launch order, with their models.
    pub(super) fn candidates(&self) -> (Vec<usize>, Vec<String>) {
        self.instances
            .iter()
            .enumerate()
            .filter(|(_, i)| i.fate == Fate::Candidate && i.live())
            .map(|(n, i)| (n, i.model.clone().unwrap_or_default()))
            .unzip()
    }

    /// Launches batches until the policy has its hosts; marks kept and rejected instances.
    pub(super) async fn choose_hosts(
        &mut self,
        template: &Template,
        addresses: &mut Addresses,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let want = self.spec.count;
        let pattern = self.spec.cpu_model.clone();
        let selecting = self.spec.over_provisions();
        let mut batch = if selecting {
            policy::first_batch(want)
        } else {
            want
        };
        if selecting && batch > want {
            progress.line(&format!(
                "quietbench: launching {batch} to keep {want}: which CPU model an instance gets \
                 is not known before it runs (docs/ec2.md#cpu-model-policies)"
            ));
        }
        loop {
            self.launch_batch(template, addresses, batch, progress)
                .await?;
            if let (Some(pattern), CpuPolicy::Reroll) = (&pattern, self.spec.cpu_policy) {
                let (indexes, _) = self.candidates();
                for index in indexes {
                    if !self.reroll(index, pattern, addresses, progress).await? {
                        anyhow::bail!(
                            "{} still has another CPU model than '{pattern}' after {} re-roll(s) \
                             ({}): raise --max-rerolls or use --cpu-policy select",
                            self.instances[index].id,
                            self.instances[index].rerolls,
                            self.instances[index]
                                .model
                                .as_deref()
                                .unwrap_or("no answer")
                        );
                    }
                }
            }
            let (indexes, models) = self.candidates();
            let (kept, _) = match (&pattern, self.spec.stratify) {
                (Some(p), _) => policy::select(&models, p, want as usize),
                (None, true) => policy::stratify(&models, want as usize),
                (None, false) => ((0..models.len().min(want as usize)).collect(), Vec::new()),
            };
            let tried = self.instances.len() as u32;
            let have = kept.len() as u32;
            if have >= want {
                for (n, &index) in indexes.iter().enumerate() {
                    self.instances[index].fate = if kept.contains(&n) {
                        Fate::Kept
                    } else if pattern
                        .as_deref()
                        .is_some_and(|p| !policy::matches(&models[n], p))
                    {
                        Fate::Rejected(format!("CPU model {}", models[n]))
                    } else {
                        Fate::Rejected("not needed".into())
                    };
                }
                return Ok(());
            }
            if self.batches >= policy::MAX_BATCHES {
                let census = policy::census(&models)
                    .iter()
                    .map(|(m, n)| format!("{n} × {m}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                anyhow::bail!(
                    "after {tried} launch(es) in {} batches, {have} of the {want} host(s) wanted \
                     came up{} (models seen: {}); nothing is kept",
                    self.batches,
                    pattern.as_deref().map_or(String::new(), |p| format!(
                        " with a CPU model matching '{p}'"
                    )),
                    if census.is_empty() {
                        "none".into()
                    } else {
                        census
                    }
                );
            }
            batch = if selecting && pattern.is_some() {
                policy::next_batch(want, have, tried)
            } else {
                want - have
            };
        }
    }

    /// Terminates the rejected instances now (the release would, later: they cost until then).
    pub(super) async fn terminate_rejected(&mut self, progress: &Progress) -> anyhow::Result<()> {
        let ec2 = self.ec2.clone().expect("prepared");
        let ids: Vec<String> = self
            .instances
            .iter()
            .filter(|i| matches!(i.fate, Fate::Rejected(_)) && i.live())
            .map(|i| i.id.clone())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        progress.line(&format!(
            "quietbench: terminating {} instance(s) the CPU-model policy does not keep: {}",
            ids.len(),
            ids.join(", ")
        ));
        ec2.ec2
            .terminate_instances()
            .set_instance_ids(Some(ids.clone()))
            .send()
            .await
            .map_err(|e| explain("ec2:TerminateInstances", e))?;
        let now = Instant::now();
        for i in self.instances.iter_mut().filter(|i| ids.contains(&i.id)) {
            i.ended = Some(now);
        }
        Ok(())
    }
}
