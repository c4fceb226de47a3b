//! The red team's lock-out attacks on a gRPC server of ours (an agent, or `quietbench serve`),
//! each run while a legitimate caller keeps calling: how many of its calls were served, how long
//! they took, and how soon it is served again after the attack ends. Driven by
//! `benches/abuse/lockout.sh`, which starts the servers and prints the table.
//!
//! Attacks (all against a loopback address; each bounded in count and time):
//! - `idle`: `--count` TCP connections opened and left silent (the old cap counted them from
//!   accept, so 64 locked the agent for as long as they stayed).
//! - `handshake`: `--count` connections that finish TLS and HTTP/2 but never call (token mode's
//!   lock-out: 64 gave 0 of 20 legitimate calls).
//! - `churn`: connections opened and closed as fast as one thread can, `--count` at most (the
//!   mTLS reconnect-every-10-s case, compressed).
//!
//! The legitimate caller is a gRPC health check (`grpc.health.v1.Health/Check`), which both
//! servers answer to whoever passes their authentication: it carries the token when given, and
//! speaks TLS with `--ca`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

#[derive(Parser)]
struct Args {
    /// HOST:PORT of the server under attack (loopback only).
    #[arg(long)]
    target: std::net::SocketAddr,
    /// idle, handshake or churn.
    #[arg(long)]
    attack: String,
    /// Connections the attack opens.
    #[arg(long, default_value_t = 200)]
    count: usize,
    /// Seconds the legitimate caller calls during the attack.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The CA of a TLS server (PEM).
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// The TLS name to check the server's certificate against.
    #[arg(long, default_value = "127.0.0.1")]
    domain: String,
    /// The legitimate caller's token (token mode).
    #[arg(long)]
    token: Option<String>,
}

fn endpoint(args: &Args) -> anyhow::Result<Endpoint> {
    let scheme = if args.ca.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", args.target))?
        .connect_timeout(Duration::from_secs(2));
    if let Some(ca) = &args.ca {
        let pem =
            std::fs::read_to_string(ca).with_context(|| format!("reading {}", ca.display()))?;
        endpoint = endpoint.tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(pem))
                .domain_name(args.domain.clone()),
        )?;
    }
    Ok(endpoint)
}

/// One health check on a fresh connection (a fresh connection is what a locked-out server
/// refuses), with a 2 s limit.
async fn legit_call(endpoint: &Endpoint, token: Option<&str>) -> Result<Duration, String> {
    let started = Instant::now();
    let call = async {
        let channel: Channel = endpoint.connect().await.map_err(|e| e.to_string())?;
        let header: Option<tonic::metadata::MetadataValue<_>> =
            token.map(|t| format!("Bearer {t}").parse().expect("a token is ASCII"));
        let mut client = tonic_health::pb::health_client::HealthClient::with_interceptor(
            channel,
            move |mut r: tonic::Request<()>| {
                if let Some(h) = &header {
                    r.metadata_mut().insert("authorization", h.clone());
                }
                Ok(r)
            },
        );
        client
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    };
    match tokio::time::timeout(Duration::from_secs(2), call).await {
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no answer in 2 s".into()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.target.ip().is_loopback(),
        "the attacks go to loopback addresses only"
    );
    anyhow::ensure!(args.count <= 100_000, "--count is at most 100000");
    let endpoint = endpoint(&args)?;
    let attack_ends = Instant::now() + Duration::from_secs(args.seconds);
    // The attack, on tasks of its own.
    let mut held = Vec::new();
    let mut churn = None;
    match args.attack.as_str() {
        "idle" => {
            for _ in 0..args.count {
                if let Ok(s) = tokio::net::TcpStream::connect(args.target).await {
                    held.push(s);
                }
            }
        }
        "handshake" => {
            let mut channels = Vec::new();
            for _ in 0..args.count {
                if let Ok(c) = endpoint.connect().await {
                    channels.push(c);
                }
            }
            println!("handshakes completed: {}", channels.len());
            churn = Some(tokio::spawn(async move {
                tokio::time::sleep_until(attack_ends.into()).await;
                drop(channels);
                0usize
            }));
        }
        "churn" => {
            let target = args.target;
            let count = args.count;
            churn = Some(tokio::spawn(async move {
                let mut made = 0;
                while made < count && Instant::now() < attack_ends {
                    if tokio::net::TcpStream::connect(target).await.is_ok() {
                        made += 1;
                    }
                }
                made
            }));
        }
        other => anyhow::bail!("unknown attack {other}: idle, handshake or churn"),
    }
    if !held.is_empty() {
        println!("idle connections held: {}", held.len());
    }
    let mut served = 0;
    let mut failed = 0;
    let mut latencies = Vec::new();
    let mut last_error = String::new();
    while Instant::now() < attack_ends {
        match legit_call(&endpoint, args.token.as_deref()).await {
            Ok(took) => {
                served += 1;
                latencies.push(took);
            }
            Err(e) => {
                failed += 1;
                last_error = e;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(task) = churn {
        let made = task.await?;
        if made > 0 {
            println!("connections churned: {made}");
        }
    }
    drop(held);
    let ended = Instant::now();
    let recovered = loop {
        if legit_call(&endpoint, args.token.as_deref()).await.is_ok() {
            break ended.elapsed();
        }
        if ended.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("not served again within 60 s of the attack's end");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    latencies.sort();
    let ms = |d: Option<&Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    println!(
        "legit calls during the attack: {served} served, {failed} failed; latency p50 {:.1} ms, max {:.1} ms; served again {:.0} ms after it ended{}",
        ms(latencies.get(latencies.len() / 2)),
        ms(latencies.last()),
        recovered.as_secs_f64() * 1e3,
        if failed > 0 {
            format!(" (last failure: {last_error})")
        } else {
            String::new()
        }
    );
    Ok(())
}
