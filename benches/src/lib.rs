//! Benches live in benches/; this library is empty on purpose (cargo needs a target).
