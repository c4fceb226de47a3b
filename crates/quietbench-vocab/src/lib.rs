//! The words both ends of quietbench use, and nothing that moves them.
//!
//! The probes produce metrics and histograms; the agent sends them over gRPC; the controller
//! reads them back by name and decodes the histograms. The names and the histogram format are
//! the vocabulary all three share. They used to live in the wire crate (quietbench-proto), so
//! the probes, which know nothing of gRPC or async, compiled tonic, hyper, h2 and tokio to get a
//! dozen strings and a decoder. Here they depend on three small crates (hdrhistogram, flate2,
//! thiserror); quietbench-proto re-exports `metrics` and `histogram`, so code that reads them
//! through the wire crate is unchanged.
//!
//! - [`metrics`]: every metric name a probe emits, with its unit, its kind and the form it
//!   travels in, so a rename is one edit and the two ends cannot drift apart.
//! - [`histogram`]: decoding `Histogram.hdr_v2_deflate` bytes with every stated size checked.
//! - [`requests`]: the `http` probe's request files, which the controller checks before a run
//!   and the probe parses again on the agent: one parser, so a file one end takes the other
//!   takes too.
//! - [`raw_requests`]: the `tcp` probe's escapes (`request=`) and its request files of raw
//!   requests, one per line in those escapes, checked and parsed the same way.
//! - [`grpc`]: the `http` probe's gRPC parameters, which the controller fills in from the
//!   user's files and the probe reads.
//! - [`PROBE_FAILED`] and [`VOID`]: how a failed trial's message starts, and how a probe says
//!   its trial is void (it measured itself, not the workload), so the controller runs it again.

/// How the agent words a probe's failure: this, then the probe's own message.
pub const PROBE_FAILED: &str = "the probe failed: ";

/// How a probe's own message starts when its trial is void: what it measured was itself (the
/// `http` load generator fell behind its schedule), not the workload. The controller runs such
/// a trial again, a few times, rather than keep it or fail the run.
pub const VOID: &str = "void: ";

pub mod grpc;
pub mod histogram;
pub mod metrics;
pub mod raw_requests;
pub mod requests;
