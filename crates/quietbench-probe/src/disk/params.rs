//! Text parameters of the disk probes (paths, modes, flags), beside the integer ones the
//! catalog's table parses: each with the error a user reads when it is wrong.

use std::collections::BTreeMap;

use crate::ParamError;
use crate::spec::{IntParam, resolve_integers};

/// A text parameter: name, default ("" for none), meaning.
pub(crate) type TextParam = (&'static str, &'static str, &'static str);

/// The parameters given, checked against both tables: unknown keys are refused naming every
/// known one, integers are parsed and defaulted.
pub(crate) struct Params<'a> {
    probe: &'static str,
    given: &'a BTreeMap<String, String>,
    /// The integer parameters after defaults.
    pub ints: BTreeMap<&'static str, u64>,
    texts: &'static [TextParam],
}

impl<'a> Params<'a> {
    pub(crate) fn parse(
        probe: &'static str,
        given: &'a BTreeMap<String, String>,
        ints: &'static [IntParam],
        texts: &'static [TextParam],
    ) -> Result<Self, ParamError> {
        let known: Vec<&str> = texts
            .iter()
            .map(|t| t.0)
            .chain(ints.iter().map(|i| i.name))
            .collect();
        if let Some(key) = given.keys().find(|k| !known.contains(&k.as_str())) {
            let mut sorted = known.clone();
            sorted.sort_unstable();
            return Err(ParamError::UnknownParam {
                probe,
                key: key.clone(),
                known: sorted.join(", "),
            });
        }
        let int_given: BTreeMap<String, String> = given
            .iter()
            .filter(|(k, _)| ints.iter().any(|i| i.name == k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Self {
            probe,
            given,
            ints: resolve_integers(probe, ints, &int_given)?,
            texts,
        })
    }

    /// Whether the user gave `key`.
    pub(crate) fn given(&self, key: &str) -> bool {
        self.given.contains_key(key)
    }

    /// A text parameter, or its default; trimmed.
    pub(crate) fn text(&self, key: &'static str) -> String {
        match self.given.get(key) {
            Some(v) => v.trim().to_string(),
            None => self
                .texts
                .iter()
                .find(|t| t.0 == key)
                .map(|t| t.1.to_string())
                .unwrap_or_default(),
        }
    }

    /// An integer parameter after defaults.
    pub(crate) fn int(&self, key: &'static str) -> u64 {
        self.ints[key]
    }

    /// The error for `key`'s value.
    pub(crate) fn bad(&self, key: &str, why: impl Into<String>) -> ParamError {
        ParamError::BadValue {
            probe: self.probe,
            key: key.to_string(),
            value: self.given.get(key).cloned().unwrap_or_default(),
            why: why.into(),
        }
    }

    /// A required, non-empty parameter.
    pub(crate) fn required(&self, key: &'static str, what: &str) -> Result<String, ParamError> {
        let v = self.text(key);
        if v.is_empty() {
            return Err(ParamError::BadValue {
                probe: self.probe,
                key: key.to_string(),
                value: String::new(),
                why: format!("required: {what}"),
            });
        }
        Ok(v)
    }

    /// A boolean flag: true/false, yes/no, 1/0, on/off.
    pub(crate) fn flag(&self, key: &'static str) -> Result<bool, ParamError> {
        parse_bool(&self.text(key))
            .ok_or_else(|| self.bad(key, "expected true or false (also yes/no, 1/0, on/off)"))
    }

    /// One of `choices`.
    pub(crate) fn choice(
        &self,
        key: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, ParamError> {
        let v = self.text(key);
        choices
            .iter()
            .find(|c| **c == v)
            .copied()
            .ok_or_else(|| self.bad(key, format!("expected one of: {}", choices.join(", "))))
    }
}

/// Parses a boolean flag.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Some(true),
        "false" | "no" | "0" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTS: &[IntParam] = &[IntParam {
        name: "qd",
        default: 16,
        min: 1,
        max: 1024,
        meaning: "queue depth",
    }];
    const TEXTS: &[TextParam] = &[("path", "", "target"), ("mode", "read", "mode")];

    fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_keys_name_every_parameter() {
        let g = given(&[("depth", "4")]);
        let err = Params::parse("disk.seq", &g, INTS, TEXTS)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("'depth'") && err.contains("mode, path, qd"),
            "{err}"
        );
    }

    #[test]
    fn texts_default_and_integers_parse() {
        let g = given(&[("qd", "8"), ("path", " /tmp/x ")]);
        let p = Params::parse("disk.seq", &g, INTS, TEXTS).unwrap();
        assert_eq!(p.int("qd"), 8);
        assert_eq!(p.text("path"), "/tmp/x");
        assert_eq!(p.text("mode"), "read");
        assert!(p.given("qd") && !p.given("mode"));
        let g = given(&[("qd", "0")]);
        let err = Params::parse("disk.seq", &g, INTS, TEXTS).err().unwrap();
        assert!(err.to_string().contains("from 1 to 1024"), "{err}");
    }

    #[test]
    fn required_choice_and_flags() {
        let g = given(&[("mode", "writ")]);
        let p = Params::parse("disk.seq", &g, INTS, TEXTS).unwrap();
        let err = p.required("path", "a file or block device").unwrap_err();
        assert!(err.to_string().contains("required: a file"), "{err}");
        let err = p.choice("mode", &["read", "write"]).unwrap_err();
        assert!(err.to_string().contains("mode=writ") && err.to_string().contains("read, write"));
        for (text, value) in [("true", true), ("YES", true), ("0", false), ("off", false)] {
            assert_eq!(parse_bool(text), Some(value), "{text}");
        }
        assert_eq!(parse_bool("maybe"), None);
    }
}
