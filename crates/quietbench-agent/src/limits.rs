//! Bounds on what a request may carry. An agent on a network serves whoever reaches it (with
//! TLS, whoever holds a certificate); a request too large or too long is refused with the field
//! named, before any work, and the agent goes on serving the next one.

use std::collections::HashMap;

use quietbench_probe::http::{MAX_REQUESTS_TEXT_BYTES, REQUESTS_TEXT};
use tonic::Status;

/// Largest request message the transport decodes: requests are a probe name, a few parameters
/// and CPU lists, far below 1 MiB, but an `http` or `tcp` trial may carry a request file's text
/// ([`MAX_REQUESTS_TEXT_BYTES`]) besides. Above it tonic answers OUT_OF_RANGE itself.
pub const MAX_REQUEST_BYTES: usize = (1 << 20) + MAX_REQUESTS_TEXT_BYTES;
/// Concurrent requests on one connection (a controller needs one trial stream and a call or two).
pub const MAX_REQUESTS_PER_CONNECTION: usize = 16;
/// How long a TLS handshake may take before the connection is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// HTTP/2 streams one connection may open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 32;
/// Parameters of one probe request.
pub const MAX_PARAMS: usize = 64;
/// Bytes of a parameter's name.
pub const MAX_PARAM_NAME_BYTES: usize = 64;
/// Bytes of a parameter's value (an `exec` command line fits many times over), but
/// [`REQUESTS_TEXT`]'s ([`max_value_bytes`]).
pub const MAX_PARAM_VALUE_BYTES: usize = 16 * 1024;
/// Entries of a CPU list: more than any machine has CPUs.
pub const MAX_CPUS: usize = 4096;
/// Default longest trial, seconds (`--max-trial-secs`): a typo cannot hold a machine for days.
pub const DEFAULT_MAX_TRIAL_SECS: u64 = 3600;

/// The longest value of parameter `name`: [`MAX_PARAM_VALUE_BYTES`], and for the one
/// exception, `http`'s and `tcp`'s `requests_text`, [`MAX_REQUESTS_TEXT_BYTES`]. That
/// parameter is a request file's text, which the controller reads on its machine and sends
/// whole (agents read no caller's files), and a file of queries that differ per request is
/// rightly larger than any one value; the probe parses it under the same bound, and formats it
/// under its own ([`quietbench_probe::http::MAX_REQUESTS`] requests, 64 MiB formatted). Named
/// here, one name and no pattern, so that no other parameter grows with it.
pub fn max_value_bytes(name: &str) -> usize {
    if name == REQUESTS_TEXT {
        MAX_REQUESTS_TEXT_BYTES
    } else {
        MAX_PARAM_VALUE_BYTES
    }
}

/// Refuses too many, too long or NUL-carrying parameters, naming the parameter.
pub fn check_params(params: &HashMap<String, String>) -> Result<(), Status> {
    if params.len() > MAX_PARAMS {
        return Err(Status::invalid_argument(format!(
            "params: {} entries, at most {MAX_PARAMS}",
            params.len()
        )));
    }
    // Sorted, so the same request always names the same parameter.
    let mut names: Vec<&String> = params.keys().collect();
    names.sort();
    for name in names {
        let value = &params[name];
        let shown: String = name.chars().take(MAX_PARAM_NAME_BYTES).collect();
        if name.len() > MAX_PARAM_NAME_BYTES {
            return Err(Status::invalid_argument(format!(
                "params: the name '{shown}…' is {} bytes, at most {MAX_PARAM_NAME_BYTES}",
                name.len()
            )));
        }
        let max = max_value_bytes(name);
        if value.len() > max {
            return Err(Status::invalid_argument(format!(
                "params.{name}: {} bytes, at most {max}",
                value.len()
            )));
        }
        if name.contains('\0') || value.contains('\0') {
            return Err(Status::invalid_argument(format!(
                "params.{}: contains a NUL byte",
                shown.replace('\0', "\\0")
            )));
        }
    }
    Ok(())
}

/// Refuses a CPU list longer than any machine's.
pub fn check_cpus(field: &str, cpus: &[u32]) -> Result<(), Status> {
    if cpus.len() > MAX_CPUS {
        return Err(Status::invalid_argument(format!(
            "{field}: {} entries, at most {MAX_CPUS}",
            cpus.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_names_its_field() {
        let many: HashMap<String, String> = (0..=MAX_PARAMS)
            .map(|i| (format!("p{i}"), "1".into()))
            .collect();
        assert!(
            check_params(&many)
                .unwrap_err()
                .message()
                .starts_with("params: 65 entries")
        );
        let long_value =
            HashMap::from([("cmd".to_string(), "x".repeat(MAX_PARAM_VALUE_BYTES + 1))]);
        assert!(
            check_params(&long_value)
                .unwrap_err()
                .message()
                .starts_with("params.cmd: ")
        );
        let long_name = HashMap::from([("n".repeat(100), "1".to_string())]);
        assert!(
            check_params(&long_name)
                .unwrap_err()
                .message()
                .contains("100 bytes")
        );
        let nul = HashMap::from([("cmd".to_string(), "a\0b".to_string())]);
        assert!(check_params(&nul).unwrap_err().message().contains("NUL"));
        assert!(check_params(&HashMap::from([("threads".into(), "2".into())])).is_ok());
        // A request file's text may pass 16 KiB up to its own bound; no other value may.
        let text =
            |name: &str, len: usize| HashMap::from([(name.to_string(), "/\n".repeat(len / 2))]);
        assert!(check_params(&text(REQUESTS_TEXT, MAX_REQUESTS_TEXT_BYTES)).is_ok());
        assert!(
            check_params(&text(REQUESTS_TEXT, MAX_REQUESTS_TEXT_BYTES + 2))
                .unwrap_err()
                .message()
                .contains("at most 1048576")
        );
        for other in ["requests", "body", "requests_text2"] {
            assert!(
                check_params(&text(other, MAX_PARAM_VALUE_BYTES + 2))
                    .unwrap_err()
                    .message()
                    .contains("at most 16384"),
                "{other}"
            );
        }
        let cpus = vec![0; MAX_CPUS + 1];
        assert!(
            check_cpus("cpus", &cpus)
                .unwrap_err()
                .message()
                .starts_with("cpus: 4097")
        );
        assert!(check_cpus("cpus", &[0, 1]).is_ok());
    }
}
