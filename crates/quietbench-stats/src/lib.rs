//! Pure statistics for quietbench, with no I/O: everything here is a function of numbers, so it
//! can be tested on data with a known truth.
//!
//! Today: the per-metric summary every report prints (mean, median, standard deviation,
//! coefficient of variation). Verdicts, bootstrap intervals and variance components build on it.

mod summary;

pub use summary::{Summary, summarize};
