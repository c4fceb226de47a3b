//! The roles of the certificates `quietbench certs` issues, as both ends of a connection read
//! them: every certificate of one fleet's CA chains to the same root, so a role is carried in
//! the subject's organizational unit ("quietbench client", ...) and checked by the side that
//! must refuse the others: the controller service lets in only clients, and an agent refuses
//! clients (a CI job's certificate reaches the service, never an agent directly).

/// The prefix of every role's organizational unit.
pub const UNIT_PREFIX: &str = "quietbench ";

/// A client of the controller service.
pub const CLIENT: &str = "quietbench client";

/// A controller: the one role an agent answers.
pub const CONTROLLER: &str = "quietbench controller";

/// The organizational units of a DER certificate's subject.
pub fn units_of(der: &[u8]) -> Result<Vec<String>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the peer's certificate cannot be read: {e}"))?;
    Ok(cert
        .subject()
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok().map(str::to_string))
        .collect())
}

/// The common name of a DER certificate's subject: the NAME of `certs issue --client NAME`.
pub fn common_name_of(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the peer's certificate cannot be read: {e}"))?;
    cert.subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok().map(str::to_string))
        .ok_or_else(|| "the peer's certificate names no common name".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_role() {
        assert!(units_of(b"").is_err());
        assert!(units_of(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_err());
        assert!(common_name_of(b"").is_err());
    }
}
