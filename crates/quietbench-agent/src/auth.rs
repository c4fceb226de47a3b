//! Who may call. A certificate issued for a client of the controller service is refused: it
//! reaches the service, never an agent ([`refuse_service_clients`]). Token mode: every call to
//! the agent's service must carry `authorization: Bearer TOKEN`, the token of the agent's
//! `--token-file`, compared in constant time (subtle) so that the time a
//! refusal takes says nothing about how much of a guess was right. Only over TLS: the settings
//! refuse a token without `--tls-cert`.

use std::sync::Arc;

use subtle::ConstantTimeEq;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Checks each call's token; lets every call through when the agent has none (mutual TLS, or
/// plain loopback).
#[derive(Debug, Clone, Default)]
pub struct TokenCheck {
    token: Option<Arc<[u8]>>,
}

impl TokenCheck {
    /// Requires `token` on every call, or nothing with `None`.
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token: token.map(|t| Arc::from(t.as_bytes())),
        }
    }
}

impl Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        refuse_service_clients(&request)?;
        let Some(want) = &self.token else {
            return Ok(request);
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
            Some(token) if bool::from(token.as_bytes().ct_eq(want)) => Ok(request),
            Some(_) => Err(Status::unauthenticated(
                "wrong token: it is not this agent's --token-file",
            )),
        }
    }
}

/// A certificate issued for a client of the controller service (`quietbench certs issue
/// --client`) chains to the same CA as a controller's: it reaches the service, never an agent.
fn refuse_service_clients(request: &Request<()>) -> Result<(), Status> {
    let Some(certs) = request.peer_certs() else {
        return Ok(());
    };
    let Some(leaf) = certs.first() else {
        return Ok(());
    };
    let units =
        quietbench_proto::roles::units_of(leaf.as_ref()).map_err(Status::unauthenticated)?;
    if units.iter().any(|u| u == quietbench_proto::roles::CLIENT) {
        return Err(Status::permission_denied(
            "this is a certificate for a client of the controller service (certs issue \
             --client): agents answer controllers only (certs issue --controller)",
        ));
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
