//! Which variant of an A/B run a value belongs to.
//!
//! A leaf: it imports nothing from the crate, so that [`crate::error`] (whose `SameVariant`
//! names a variant) and [`crate::paired`] (the data model, re-exporting [`Variant`]) both sit
//! above it and need not depend on each other.

use std::fmt;

use serde::Serialize;

/// A variant by index: [`Variant::A`] (0) is the usual baseline, [`Variant::B`] (1) the
/// candidate; more variants take further indices and print as letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Variant(pub u32);

impl Variant {
    /// The first variant, the usual baseline.
    pub const A: Variant = Variant(0);
    /// The second variant, the usual candidate.
    pub const B: Variant = Variant(1);
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match char::from_u32(u32::from(b'A') + self.0) {
            Some(c) if self.0 < 26 => write!(f, "{c}"),
            _ => write!(f, "#{}", self.0),
        }
    }
}
