//! Which arm of an A/B run a value belongs to.
//!
//! A leaf: it imports nothing from the crate, so that [`crate::error`] (whose `SameArm`
//! names an arm) and [`crate::paired`] (the data model, re-exporting [`Arm`]) both sit
//! above it and need not depend on each other.

use std::fmt;

use serde::Serialize;

/// An arm by index: [`Arm::A`] (0) is the usual baseline, [`Arm::B`] (1) the
/// candidate; more arms take further indices and print as letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Arm(pub u32);

impl Arm {
    /// The first arm, the usual baseline.
    pub const A: Arm = Arm(0);
    /// The second arm, the usual candidate.
    pub const B: Arm = Arm(1);
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match char::from_u32(u32::from(b'A') + self.0) {
            Some(c) if self.0 < 26 => write!(f, "{c}"),
            _ => write!(f, "#{}", self.0),
        }
    }
}
