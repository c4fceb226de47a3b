//! Caps and the cap that binds: the instance's and each volume's published limits, and the pure
//! attribution of a disk or network result to the one that binds it (CONTEXT.md §2, §4).

pub mod attribution;
pub mod cache;
pub mod caps;
pub mod lookup;
pub mod prewarm;
pub mod volume_spec;
pub mod volume_types;

pub use attribution::{Attribution, DiskMeasure, EbsExceeded, NetMeasure, Standing};
pub use caps::{EbsCaps, HostCaps, InstanceCaps, NetworkCaps, NetworkCard, VolumeInfo};
