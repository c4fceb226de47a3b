//! grpcserver: a tonic gRPC server with a known cost per call, the user's gRPC server of the
//! end-to-end tests of the `http` probe's `grpc=` (tests/grpc_server.rs) and of benches/peer/grpc_vs_h2load.sh.
//!
//! It serves `qbtest.v1.Bench` (proto/qbtest/v1/bench.proto) over HTTP/2 cleartext. `Echo`
//! answers with the request's text and how many numbers it carried; each call runs `--work`
//! iterations of a fixed integer loop and sleeps `--delay-us` (std's sleep, which blocks a
//! runtime worker: with `--workers N` and a delay D the capacity is N / D whatever the CPU).
//! `--fail-every N --fail-code C` answers every Nth call with gRPC status C instead, so a test
//! knows how many calls of each code to expect. `Watch` (server streaming) is there to be
//! refused by quietbench, which calls unary methods only. `--descriptor-out FILE` writes the
//! service's descriptor set (what `protoc --descriptor_set_out` gives) and exits.
//! SIGTERM ends it with status 0; "listening on ADDR" on stderr says it is ready.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tonic::{Request, Response, Status};

mod proto {
    tonic::include_proto!("qbtest.v1");
}

use proto::bench_server::{Bench, BenchServer};
use proto::{EchoReply, EchoRequest};

const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/qbtest_v1_descriptor.bin"));

#[derive(Debug, Parser)]
#[command(
    name = "grpcserver",
    about = "A tonic gRPC server (qbtest.v1.Bench) with a known per-call cost, for the tests of \
             the http probe's grpc=; exits 0 at SIGTERM"
)]
struct Args {
    /// The TCP port to listen on
    #[arg(long, value_name = "N", required_unless_present = "descriptor_out")]
    port: Option<u16>,
    /// The address to listen on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Iterations of a fixed CPU-bound loop per call: a known cost
    #[arg(long, value_name = "N", default_value_t = 0)]
    work: u64,
    /// Microseconds to sleep per call (blocking a runtime worker)
    #[arg(long, value_name = "N", default_value_t = 0)]
    delay_us: u64,
    /// Runtime worker threads
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
    /// Answer every Nth call with --fail-code instead
    #[arg(long, value_name = "N", requires = "fail_code",
          value_parser = clap::value_parser!(u64).range(1..))]
    fail_every: Option<u64>,
    /// The gRPC status code of the failed calls (1 to 16)
    #[arg(long, value_name = "CODE", value_parser = clap::value_parser!(i32).range(1..=16))]
    fail_code: Option<i32>,
    /// Write the service's descriptor set to FILE and exit
    #[arg(long, value_name = "FILE")]
    descriptor_out: Option<std::path::PathBuf>,
}

struct Service {
    args: &'static Args,
    calls: AtomicU64,
}

/// The fixed loop of testserver's --work: a result the compiler cannot skip.
fn work(iterations: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..iterations {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x100_0000_01b3);
    }
    x
}

#[tonic::async_trait]
impl Bench for Service {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let result = work(self.args.work);
        if self.args.delay_us > 0 {
            std::thread::sleep(Duration::from_micros(self.args.delay_us));
        }
        if let (Some(every), Some(code)) = (self.args.fail_every, self.args.fail_code)
            && call.is_multiple_of(every)
        {
            return Err(Status::new(
                tonic::Code::from_i32(code),
                format!("call {call} fails (--fail-every {every})"),
            ));
        }
        let request = request.into_inner();
        Ok(Response::new(EchoReply {
            text: request.text,
            count: request.numbers.len() as u32 + u32::from(result == 1),
        }))
    }

    type WatchStream = tonic::codegen::BoxStream<EchoReply>;

    async fn watch(&self, _: Request<EchoRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("Watch is here to be refused"))
    }
}

fn main() -> anyhow::Result<()> {
    let args: &'static Args = Box::leak(Box::new(Args::parse()));
    if let Some(path) = &args.descriptor_out {
        std::fs::write(path, DESCRIPTOR_SET)
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers as usize)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let addr = SocketAddr::new(args.bind, args.port.unwrap_or(0));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        eprintln!("listening on {}", listener.local_addr()?);
        let service = Service {
            args,
            calls: AtomicU64::new(0),
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tonic::transport::Server::builder()
            .add_service(BenchServer::new(service))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async move {
                    term.recv().await;
                },
            )
            .await
            .context("the server failed")
    })
}
