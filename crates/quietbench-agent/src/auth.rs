//! Who may call. A certificate issued for a client of the controller service is refused: it
//! reaches the service, never an agent: an agent answers controller certificates only
//! ([`controllers_only`]). Token mode: every call to
//! the agent's service must carry `authorization: Bearer TOKEN`, the token of the agent's
//! `--token-file`, compared in constant time (subtle) so that the time a
//! refusal takes says nothing about how much of a guess was right. Only over TLS: the settings
//! refuse a token without `--tls-cert`.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Checks each call's token; lets every call through when the agent has none (mutual TLS, or
/// plain loopback). A call that passes makes its connection an authenticated one at the
/// connection gate (`quietbench_proto::gate`): until then it counts among the few, short-lived pending ones.
#[derive(Debug, Clone, Default)]
pub struct TokenCheck {
    token: Option<Arc<[u8]>>,
    gate: Option<Arc<quietbench_proto::gate::Gate>>,
}

impl TokenCheck {
    /// Requires `token` on every call, or nothing with `None`.
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token: token.map(|t| Arc::from(t.as_bytes())),
            gate: None,
        }
    }

    /// Tells `gate` which connections passed.
    pub fn with_gate(mut self, gate: Arc<quietbench_proto::gate::Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The connection of a call that passed is authenticated.
    fn passed(&self, request: Request<()>) -> Result<Request<()>, Status> {
        if let (Some(gate), Some(peer)) = (&self.gate, request.remote_addr()) {
            gate.authenticate(peer)?;
        }
        Ok(request)
    }
}

impl Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        controllers_only(&request)?;
        let Some(want) = &self.token else {
            return self.passed(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            None => Err(Status::unauthenticated(
                "no token: this agent runs in token mode; give the controller --token-file \
                 (or QUIETBENCH_TOKEN)",
            )),
            Some(token) if bool::from(token.as_bytes().ct_eq(want)) => self.passed(request),
            Some(_) => Err(Status::unauthenticated(
                "wrong token: it is not this agent's --token-file",
            )),
        }
    }
}

/// Fewest bytes of a local agent's secret: what a controller makes is 64 hex digits.
const MIN_SECRET_BYTES: usize = 32;

/// A controller's own agent's secret: the first line of `input` (its standard input, a pipe
/// from the controller that started it), printable, at least [`MIN_SECRET_BYTES`] long.
pub fn read_secret(mut input: impl std::io::BufRead) -> anyhow::Result<String> {
    use std::io::{BufRead, Read};
    let mut line = String::new();
    // Bounded: a secret is one short line, and a stdin that never ends must not be read whole.
    (&mut input)
        .take(1024)
        .read_line(&mut line)
        .map_err(|e| anyhow::anyhow!("cannot read the secret on standard input: {e}"))?;
    let secret = line.trim();
    if secret.len() < MIN_SECRET_BYTES || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!(
            "--secret-stdin: standard input must start with a line of at least \
             {MIN_SECRET_BYTES} printable characters (the controller that starts this agent \
             writes it)"
        );
    }
    Ok(secret.to_string())
}

/// An agent answers controllers: a certificate of the fleet's CA with another role (a service
/// client's from `certs issue --client`, an agent's, or one with no role) is refused.
fn controllers_only(request: &Request<()>) -> Result<(), Status> {
    let Some(certs) = request.peer_certs() else {
        return Ok(());
    };
    let Some(leaf) = certs.first() else {
        return Ok(());
    };
    let units =
        quietbench_proto::roles::units_of(leaf.as_ref()).map_err(Status::unauthenticated)?;
    check_role(&units)
}

/// The rule of [`controllers_only`] on a certificate's roles.
fn check_role(units: &[String]) -> Result<(), Status> {
    if units.iter().any(|u| u == quietbench_proto::roles::CLIENT) {
        return Err(Status::permission_denied(
            "this is a certificate for a client of the controller service (certs issue \
             --client): agents answer controllers only (certs issue --controller)",
        ));
    }
    // An allow-list, not a deny-list: an agent's or the service's certificate, or one with no
    // role at all, chains to the same CA but is no controller's.
    if !units
        .iter()
        .any(|u| u == quietbench_proto::roles::CONTROLLER)
    {
        return Err(Status::permission_denied(format!(
            "this certificate's role is {}, not a controller's: agents answer controllers only \
             (certs issue --controller NAME)",
            if units.is_empty() {
                "none".to_string()
            } else {
                units.join(", ")
            }
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(check: &mut TokenCheck, header: Option<&str>) -> Result<(), Status> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request
                .metadata_mut()
                .insert("authorization", h.parse().unwrap());
        }
        check.call(request).map(|_| ())
    }

    #[test]
    fn only_a_controllers_certificate_is_answered() {
        let roles = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_role(&roles(&["quietbench controller"])).is_ok());
        for (units, says) in [
            (
                roles(&["quietbench client"]),
                "client of the controller service",
            ),
            (roles(&["quietbench agent"]), "role is quietbench agent"),
            (roles(&[]), "role is none"),
            (roles(&["ops"]), "role is ops"),
        ] {
            let err = check_role(&units).unwrap_err();
            assert_eq!(err.code(), tonic::Code::PermissionDenied);
            assert!(err.message().contains(says), "{units:?}: {}", err.message());
        }
    }

    #[test]
    fn only_the_right_token_passes() {
        let mut check = TokenCheck::new(Some("0123456789abcdef0123"));
        assert!(call(&mut check, Some("Bearer 0123456789abcdef0123")).is_ok());
        let wrong = call(&mut check, Some("Bearer 0123456789abcdef0124")).unwrap_err();
        assert!(wrong.message().starts_with("wrong token"));
        assert!(call(&mut check, Some("Bearer 0123")).is_err());
        assert!(call(&mut check, Some("0123456789abcdef0123")).is_err());
        let none = call(&mut check, None).unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unauthenticated);
        assert!(none.message().starts_with("no token"));
        assert!(call(&mut TokenCheck::new(None), None).is_ok());
    }
}
