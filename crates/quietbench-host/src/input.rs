//! Reading a file a user names (a plan, a hosts file, a config, a certificate, a token):
//! bounded, so that `--plan /dev/zero` is an error at once, not a process that reads until the
//! kernel kills it.

use std::io::Read;
use std::path::Path;

/// Most bytes of a plan, hosts file, config or PEM file: far above any real one.
pub const MAX_INPUT_BYTES: u64 = 4 << 20;

/// A file that could not be read as text.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The OS refused.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Longer than the limit (or endless, as /dev/zero).
    #[error(
        "it is larger than {limit} bytes, more than such a file ever holds (is it the right file?)"
    )]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// Not UTF-8 text.
    #[error("it is not UTF-8 text (is it the right file?)")]
    NotText,
}

/// The text of `path`, refused past `limit` bytes. Reads at most `limit + 1` bytes whatever
/// the file is.
pub fn read_text(path: &Path, limit: u64) -> Result<String, InputError> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    String::from_utf8(bytes).map_err(|_| InputError::NotText)
}

/// A warning when a secret's file (a token, a key) can be read by other users of the machine:
/// its mode gives the group or everyone read access. None when only its owner can, or when it
/// cannot be looked at.
pub fn readable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "{} can be read by other users (mode {:03o}): anyone on this machine can use the \
             secret in it; chmod 600 it",
            path.display(),
            mode & 0o777
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_or_binary_file_is_refused_at_once() {
        let err = read_text(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { limit: 1024 }), "{err}");
        assert!(err.to_string().contains("larger than 1024 bytes"));
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("b");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read_text(&binary, 1024), Err(InputError::NotText)));
        let text = dir.path().join("t");
        std::fs::write(&text, "a:1\n").unwrap();
        assert_eq!(read_text(&text, 4).unwrap(), "a:1\n");
        assert!(read_text(&text, 3).is_err());
        let err = read_text(&dir.path().join("missing"), 10).unwrap_err();
        assert!(matches!(err, InputError::Io(_)));
    }

    #[test]
    fn a_secret_readable_by_others_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "secret").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let warning = readable_by_others(&token).unwrap();
        assert!(
            warning.contains("mode 644") && warning.contains("chmod 600"),
            "{warning}"
        );
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(readable_by_others(&token), None);
    }
}
