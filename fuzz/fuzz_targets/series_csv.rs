#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quietbench_fuzz::series_csv(data));
