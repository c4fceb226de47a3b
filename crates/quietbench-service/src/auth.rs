//! Who may call the service, and who they are ([`Caller`]).
//!
//! - With mutual TLS every caller's certificate already chains to the CA (the TLS handshake
//!   checked it); this checks that it is a client's (`quietbench certs issue --client NAME`), so
//!   that a controller's or an agent's certificate, issued by the same CA for another purpose,
//!   does not open the service. The caller is the certificate's name.
//! - On plain loopback, every user of the machine can connect: the caller's uid is read from the
//!   kernel's socket table (`quietbench_host::sockets`), and only the service's own user (and
//!   root) is let in. A local `run` plan runs commands as the service's user, so anyone else
//!   would have had that user's power.
//! - `--insecure` on another address: anyone who reaches it, as "anonymous".

use std::net::SocketAddr;

use quietbench_host::HostRoot;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use quietbench_controller::tls::certs::Role;

/// Who is calling: set by [`ClientRole`] in every admitted request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `client NAME` (a client certificate's name), `uid N` (a local user on plain loopback) or
    /// `anonymous` (`--insecure`).
    pub id: String,
}

/// How callers prove who they are.
#[derive(Debug, Clone)]
pub enum Admission {
    /// Mutual TLS: every call shows a client certificate.
    Tls,
    /// Plain gRPC on loopback, bound to this address: callers are local users, known by uid.
    Loopback {
        /// The service's own address (the local end of every connection).
        local: SocketAddr,
        /// Where /proc is read (tests give a fixture).
        root: HostRoot,
        /// The uid let in besides root: the service's own.
        uid: u32,
    },
    /// `--insecure` plain gRPC off loopback: anyone.
    Anyone,
}

/// Lets a call through as [`Admission`] says, and records its [`Caller`]; its connection is
/// then an authenticated one at the connection gate, if there is one.
#[derive(Debug, Clone)]
pub struct ClientRole {
    /// How callers are admitted.
    pub admission: Admission,
    /// The gate the server's connections pass (None in unit tests).
    pub gate: Option<std::sync::Arc<quietbench_proto::gate::Gate>>,
}

impl ClientRole {
    fn caller(&self, request: &Request<()>) -> Result<Caller, Status> {
        match &self.admission {
            Admission::Tls => {
                let certs = request.peer_certs().ok_or_else(|| {
                    Status::unauthenticated("no client certificate: the service needs mutual TLS")
                })?;
                let leaf = certs
                    .first()
                    .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
                let roles = roles_of(leaf.as_ref()).map_err(Status::unauthenticated)?;
                let want = Role::Client.unit();
                if !roles.contains(&want) {
                    return Err(Status::permission_denied(format!(
                        "this certificate is not a client's (its role: {}): issue one with \
                         `quietbench certs issue --client NAME`",
                        if roles.is_empty() {
                            "none".to_string()
                        } else {
                            roles.join(", ")
                        }
                    )));
                }
                let name = quietbench_proto::roles::common_name_of(leaf.as_ref())
                    .map_err(Status::unauthenticated)?;
                Ok(Caller {
                    id: format!("client {name}"),
                })
            }
            Admission::Loopback { local, root, uid } => {
                let peer = request
                    .remote_addr()
                    .ok_or_else(|| Status::unauthenticated("the caller's address is unknown"))?;
                let found = quietbench_host::sockets::peer_uid(root, *local, peer)
                    .map_err(|e| Status::internal(format!("cannot tell who calls: {e}")))?;
                match found {
                    Some(caller) if caller == *uid || caller == 0 => Ok(Caller {
                        id: format!("uid {caller}"),
                    }),
                    Some(caller) => Err(Status::permission_denied(format!(
                        "this service on plain loopback serves its own user (uid {uid}) only, \
                         and you are uid {caller}: ask its owner, or serve it with mutual TLS \
                         (--tls-cert, --tls-key, --client-ca) and a client certificate for you"
                    ))),
                    None => Err(Status::permission_denied(
                        "cannot find the calling process's socket on this machine: on plain \
                         loopback the service serves local users only",
                    )),
                }
            }
            Admission::Anyone => Ok(Caller {
                id: "anonymous".into(),
            }),
        }
    }
}

/// The roles (organizational units) a DER certificate's subject names.
pub fn roles_of(der: &[u8]) -> Result<Vec<String>, String> {
    quietbench_proto::roles::units_of(der)
}

impl Interceptor for ClientRole {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let caller = self.caller(&request)?;
        if let (Some(gate), Some(peer)) = (&self.gate, request.remote_addr()) {
            gate.authenticate(peer)?;
        }
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quietbench_controller::tls::certs;

    fn der_of(pem_path: &std::path::Path) -> Vec<u8> {
        let pem = std::fs::read_to_string(pem_path).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).unwrap()
    }

    #[test]
    fn each_issued_certificate_names_its_role() {
        let dir = tempfile::tempdir().unwrap();
        let now = time::OffsetDateTime::now_utc();
        certs::init(dir.path(), now).unwrap();
        for (role, want) in [
            (Role::Client, "quietbench client"),
            (Role::Controller, "quietbench controller"),
            (Role::Service, "quietbench service"),
        ] {
            let sans = if role == Role::Service {
                vec!["127.0.0.1".to_string()]
            } else {
                Vec::new()
            };
            let issued = certs::issue(dir.path(), role, "n", &sans, 1, now).unwrap();
            assert_eq!(roles_of(&der_of(&issued.cert)).unwrap(), [want]);
        }
        assert!(roles_of(b"not a certificate").is_err());
        assert_eq!(Role::Client.unit(), quietbench_proto::roles::CLIENT);
    }
}
