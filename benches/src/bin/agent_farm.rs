//! agent-farm: N `quietbench.v1.AgentService` instances in one process, one per loopback port,
//! each a fake host whose probe measures nothing. It exists to load the controller with
//! hundreds of agents on one small machine (benches/fleet/controller_scale.sh): hundreds of
//! real agents would each run a real probe thread and fight the controller for the CPUs.
//!
//! The agents are quietbench-testkit's fake agents, paced in real time: GetHost answers a
//! plausible fingerprint (hostname farm-NNN, every fifth host the older of two CPU models),
//! RunProbe accepts any probe name and sends one interval per interval_ms with real
//! HdrHistogram V2+DEFLATE bytes, then the result; Cancel, Prepare and Restore change nothing;
//! StartPeer and StopPeer answer UNIMPLEMENTED. Trials are timer-driven tasks on one small
//! runtime: an idle agent costs nothing, a running one a few microseconds per interval.
//!
//! It speaks the wire contract only (quietbench-proto, through the testkit): no agent, probe or
//! controller code.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use quietbench_testkit::{Cpu, FakeAgent, FakeHost, Pace, normal, splitmix64, unit_interval};

#[derive(Debug, Parser)]
#[command(
    name = "agent-farm",
    about = "Serves N synthetic quietbench agents in one process, one per loopback port, for \
             controller-scale benchmarks (their probes measure nothing)"
)]
struct Args {
    /// How many agents to serve
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=5000))]
    agents: u32,
    /// Also write the agents' addresses (HOST:PORT, one a line) to FILE, atomically, once all
    /// are listening (they are always printed on standard output)
    #[arg(long, value_name = "FILE")]
    addresses_file: Option<PathBuf>,
    /// Mean events per second of the synthetic probe, before each host's scatter
    #[arg(long, default_value_t = 1379.0)]
    events_per_sec: f64,
    /// Each host's fixed deviation from the mean figure: up to ±PCT percent
    #[arg(long, value_name = "PCT", default_value_t = 3.0)]
    scatter_pct: f64,
    /// How long GetHost takes, as the real agent's 250 ms interrupt observation window does
    #[arg(long, value_name = "MS", default_value_t = 250)]
    get_host_ms: u64,
    /// Runtime worker threads serving all the agents
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
}

/// The older CPU model's cpu.primes speed against the newer's: the EC2 "CPU lottery" of a
/// c5-class fleet.
const OLDER_MODEL_SPEED: f64 = 0.96;

/// Farm host `index`: every fifth draws the older CPU model; its figure is `base` scaled by its
/// model's speed and a fixed scatter of up to ±`scatter_pct`, and each trial 0.3% off that.
fn farm_host(index: usize, args: &Args) -> FakeHost {
    let older = index % 5 == 4;
    let cpu = if older {
        Cpu::intel(
            "Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz",
            85,
            4,
            "0x2007006",
        )
    } else {
        Cpu::intel(
            "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz",
            85,
            7,
            "0x5003604",
        )
    };
    let scatter = unit_interval(splitmix64(index as u64)) * 2.0 - 1.0;
    let speed = if older { OLDER_MODEL_SPEED } else { 1.0 };
    let per_sec = args.events_per_sec * speed * (1.0 + scatter * args.scatter_pct / 100.0);
    let mut host = FakeHost::new(&format!("farm-{index:03}"), cpu, move |ask| {
        let trial = 1.0 + 0.003 * normal(splitmix64(index as u64 ^ (ask.trial << 32)));
        quietbench_testkit::events(per_sec * trial)
    });
    host.pace = Pace::RealTime;
    host.get_host_delay = Duration::from_millis(args.get_host_ms);
    host
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads as usize)
        .thread_name("farm")
        .enable_all()
        .build()
        .context("starting the farm's runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let mut addresses: Vec<SocketAddr> = Vec::with_capacity(args.agents as usize);
    for index in 0..args.agents as usize {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .with_context(|| format!("agent {index}: cannot listen on a loopback port"))?;
        addresses.push(listener.local_addr()?);
        let agent = FakeAgent::new(index, farm_host(index, &args));
        tokio::spawn(async move {
            if let Err(err) = quietbench_testkit::serve(listener, agent).await {
                eprintln!("agent-farm: agent {index} stopped serving: {err}");
            }
        });
    }
    let text: String = addresses.iter().map(|a| format!("{a}\n")).collect();
    let mut stdout = std::io::stdout();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    if let Some(path) = &args.addresses_file {
        // Written whole, then renamed: a script waiting for the file never reads half a list.
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
    }
    eprintln!(
        "agent-farm: {} agents listening on 127.0.0.1; SIGTERM or Ctrl-C stops them",
        addresses.len()
    );
    wait_for_signal().await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the farm still serves; a signal then stops it the default way.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn farm_hosts_draw_two_models() {
        let args = Args::parse_from(["agent-farm"]);
        let hosts: Vec<_> = (0..10).map(|i| farm_host(i, &args)).collect();
        assert_eq!(hosts[7].hostname, "farm-007");
        assert!(hosts[4].cpu.model_name.contains("8124M"));
        assert!(hosts[3].cpu.model_name.contains("8275CL"));
        assert_eq!(hosts[0].pace, Pace::RealTime);
    }
}
