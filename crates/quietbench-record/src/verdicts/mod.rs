//! Verdicts, judged from a run's record alone so that a stored run is judged again exactly as
//! it was: [`compare`] judges B against A in a `compare` run, [`plan`] every variant of a run
//! against the first; [`spread`] says where a multi-host run's spread comes from (CPU models,
//! hosts, rounds) and names outlier hosts; [`changes`] finds change points in a metric's history of runs, [`changes_csv`] in any series a
//! user brings as CSV; [`capacity`] judges the steps of a capacity search against an SLO. Reports draw them; commands print them and act on them.

pub mod binding;
pub mod capacity;
pub mod changes;
pub mod changes_csv;
pub mod compare;
pub mod normalize;
pub mod plan;
pub mod spread;
