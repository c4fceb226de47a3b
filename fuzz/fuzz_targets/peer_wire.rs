#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quietbench_fuzz::peer_wire(data));
