//! The words both ends of quietbench use, and nothing that moves them.
//!
//! The probes produce metrics and histograms; the agent sends them over gRPC; the controller
//! reads them back by name and decodes the histograms. The names and the histogram format are
//! the vocabulary all three share. They used to live in the wire crate (quietbench-proto), so
//! the probes, which know nothing of gRPC or async, compiled tonic, hyper, h2 and tokio to get a
//! dozen strings and a decoder. Here they depend on three small crates (hdrhistogram, flate2,
//! thiserror); quietbench-proto re-exports both modules, so code that reads them through the
//! wire crate is unchanged.
//!
//! - [`metrics`]: every metric name a probe emits, with its unit, its kind and the form it
//!   travels in, so a rename is one edit and the two ends cannot drift apart.
//! - [`histogram`]: decoding `Histogram.hdr_v2_deflate` bytes with every stated size checked.

pub mod histogram;
pub mod metrics;
