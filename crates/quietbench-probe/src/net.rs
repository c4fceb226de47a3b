//! (being written)

use std::collections::BTreeMap;

use crate::{ParamError, ProbeSpec};

/// Resolves this module's probes.
pub fn resolve(
    probe: &'static str,
    _params: &BTreeMap<String, String>,
) -> Result<ProbeSpec, ParamError> {
    Err(ParamError::UnknownProbe(probe.to_string()))
}
