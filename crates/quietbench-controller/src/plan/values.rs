//! The plan file's values that TOML does not type the way a plan means them: `hosts` ("local"
//! or a list), numbers written as integers or floats, seeds above 2^63 - 1, and probe
//! parameters of any scalar type.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Unexpected, Visitor};
use toml::Spanned;

/// `hosts`: the word "local" or a list of addresses.
#[derive(Debug)]
pub(super) enum Hosts {
    Local,
    Agents(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for Hosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HostsVisitor;
        impl<'de> Visitor<'de> for HostsVisitor {
            type Value = Hosts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#""local" or a list of "HOST:PORT" strings, e.g. ["10.0.0.5:7700"]"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Hosts, E> {
                if v == "local" {
                    Ok(Hosts::Local)
                } else {
                    Err(E::invalid_value(Unexpected::Str(v), &self))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Hosts, A::Error> {
                let mut agents = Vec::new();
                while let Some(agent) = seq.next_element()? {
                    agents.push(agent);
                }
                Ok(Hosts::Agents(agents))
            }
        }
        d.deserialize_any(HostsVisitor)
    }
}

/// A number of seconds or a percentage: TOML has integers and floats, and `budget_s = 600`
/// should not be a type error for want of `600.0`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Number(pub(super) f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl Visitor<'_> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
        }
        d.deserialize_any(NumberVisitor)
    }
}

/// `seed`: an integer, or a string of digits for seeds above 2^63 - 1, which TOML integers
/// cannot hold but random seeds (and so the seeds reports record) often are.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seed(pub(super) u64);

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SeedVisitor;
        impl Visitor<'_> for SeedVisitor {
            type Value = Seed;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an integer from 0 to 18446744073709551615 (write seeds above \
                     9223372036854775807 as a string, e.g. \"18000000000000000000\")",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seed, E> {
                u64::try_from(v)
                    .map(Seed)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seed, E> {
                Ok(Seed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Seed, E> {
                v.parse()
                    .map(Seed)
                    .map_err(|_| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(SeedVisitor)
    }
}

/// A probe parameter: agents take parameters as text, so TOML's scalars are written out as
/// text (`threads = 2` is "2", `shell = true` is "true"); the agent checks them against the
/// probe. Arrays, tables and dates are refused here, where the error can name the line.
#[derive(Debug, Clone)]
pub(super) struct ParamValue(pub(super) String);

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ParamVisitor;
        impl Visitor<'_> for ParamVisitor {
            type Value = ParamValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a probe parameter: a string, integer, float or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
            // Display, not Debug: 2.5 is "2.5" and 2.0 is "2", never "2.0" or "2.5e0".
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }
        }
        d.deserialize_any(ParamVisitor)
    }
}
