//! The user data each instance boots with: deploy/cloud-init/user-data.yaml with the run's CA
//! certificate and the agents' certificate and key filled in (base64, so a PEM's line breaks
//! cannot break the YAML). The agent then serves mutual TLS only, to controllers the run's CA
//! signed.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The template, as deploy/ ships it (deploy/check.sh validates it with cloud-init's schema).
const TEMPLATE: &str = include_str!("../../../../deploy/cloud-init/user-data.yaml");

/// EC2's limit on user data, before its own base64.
const USER_DATA_LIMIT: usize = 16 * 1024;

/// The user data for one run: `ca`, `cert` and `key` are PEM text; `allow_exec` turns on the
/// agent's exec probes (compare and `--probe exec` runs need them).
pub fn render(ca: &str, cert: &str, key: &str, allow_exec: bool) -> anyhow::Result<String> {
    let mut text = TEMPLATE.to_string();
    for (placeholder, pem) in [
        ("REPLACE_WITH_BASE64_OF_CA_PEM", ca),
        ("REPLACE_WITH_BASE64_OF_AGENT_CERT_PEM", cert),
        ("REPLACE_WITH_BASE64_OF_AGENT_KEY_PEM", key),
    ] {
        if !text.contains(placeholder) {
            anyhow::bail!("deploy/cloud-init/user-data.yaml lost its {placeholder}");
        }
        text = text.replace(placeholder, &STANDARD.encode(pem));
    }
    if allow_exec {
        let commented = "# allow_exec = true";
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(commented))
            .ok_or_else(|| {
                anyhow::anyhow!("deploy/cloud-init/user-data.yaml lost its allow_exec line")
            })?
            .to_string();
        let indent = &line[..line.len() - line.trim_start().len()];
        text = text.replace(&line, &format!("{indent}allow_exec = true"));
    }
    if text.len() > USER_DATA_LIMIT {
        anyhow::bail!(
            "the user data is {} bytes, over EC2's {USER_DATA_LIMIT}",
            text.len()
        );
    }
    Ok(text)
}

/// As RunInstances takes it.
pub fn encode(user_data: &str) -> String {
    STANDARD.encode(user_data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(text: &'a str, path: &str) -> &'a str {
        let at = text.find(&format!("path: {path}")).unwrap();
        let content = text[at..].find("content: ").unwrap() + at + "content: ".len();
        text[content..].lines().next().unwrap().trim()
    }

    #[test]
    fn the_certificates_land_in_the_files_the_agent_reads() {
        let text = render("CA PEM\n", "CERT PEM\n", "KEY PEM\n", false).unwrap();
        assert!(!text.contains("REPLACE_WITH"));
        let decode = |s: &str| String::from_utf8(STANDARD.decode(s).unwrap()).unwrap();
        assert_eq!(
            decode(field(&text, "/etc/quietbench/tls/ca.pem")),
            "CA PEM\n"
        );
        assert_eq!(
            decode(field(&text, "/etc/quietbench/tls/agent.pem")),
            "CERT PEM\n"
        );
        assert_eq!(
            decode(field(&text, "/etc/quietbench/tls/agent.key")),
            "KEY PEM\n"
        );
        assert!(text.contains("# allow_exec = true"));
        assert!(text.starts_with("#cloud-config"));
    }

    #[test]
    fn exec_is_allowed_only_when_asked() {
        let text = render("a", "b", "c", true).unwrap();
        assert!(text.contains("\n      allow_exec = true"), "{text}");
        assert!(!text.contains("# allow_exec"));
    }

    #[test]
    fn oversized_user_data_is_refused() {
        let huge = "x".repeat(USER_DATA_LIMIT);
        assert!(render(&huge, "b", "c", false).is_err());
    }
}
