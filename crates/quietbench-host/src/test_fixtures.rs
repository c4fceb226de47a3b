//! The one way tests reach the captured files under `tests/fixtures` (see its README): as a fake
//! root for the readers, or as text for the `parse_*` functions. Test-only.

use crate::HostRoot;

/// This crate's `tests/fixtures` directory.
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The development VM's folder, the capture most tests read.
pub(crate) const DEV_VM: &str = "kvm-2vcpu-xeon";

/// A fixture folder below `tests/fixtures` (`kvm-2vcpu-xeon`, `public/goprocinfo-8vcpu-vm`) as
/// the root directory of a fake machine.
pub(crate) fn fixture_root(folder: &str) -> HostRoot {
    HostRoot::at(format!("{DIR}/{folder}"))
}

/// The development VM's capture as a fake root.
pub(crate) fn dev_vm() -> HostRoot {
    fixture_root(DEV_VM)
}

/// The text of a file of the development VM's capture, by its path below the fake root
/// (`proc/cmdline`).
pub(crate) fn dev_vm_file(path: &str) -> String {
    read_fixture(&format!("{DEV_VM}/{path}"))
}

/// The text of the fixture file at `path` below `tests/fixtures`
/// (`kvm-2vcpu-xeon/proc/cmdline`). Panics naming the file when it cannot be read: a missing
/// fixture is a broken test, not a case to handle.
pub(crate) fn read_fixture(path: &str) -> String {
    let full = format!("{DIR}/{path}");
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read fixture {full}: {e}"))
}
