//! Replays every checked-in fuzz corpus (`fuzz/corpus/TARGET/`) through its target: the inputs
//! the fuzzer found interesting, and those that once crashed a parser, stay tested on every
//! `cargo test` without a fuzzer.

use std::path::PathBuf;

use quietbench_fuzz::TARGETS;

fn corpus_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

#[test]
fn every_corpus_input_runs_without_a_panic() {
    let mut replayed = 0;
    for target in TARGETS {
        let dir = corpus_root().join(target.name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target has a corpus)", dir.display()));
        let mut count = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| (target.run)(&data));
            assert!(
                outcome.is_ok(),
                "{} panics on {}",
                target.name,
                path.display()
            );
            count += 1;
        }
        // A corpus of a handful of seeds means the fuzzer's findings were not checked in.
        assert!(
            count >= 20,
            "{}: only {count} inputs in {}",
            target.name,
            dir.display()
        );
        replayed += count;
    }
    eprintln!(
        "replayed {replayed} corpus inputs through {} targets",
        TARGETS.len()
    );
}

#[test]
fn every_target_has_a_libfuzzer_entry_point() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for target in TARGETS {
        let file = dir.join(format!("{}.rs", target.name));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("quietbench_fuzz::{}", target.name)),
            "{} does not call its body",
            file.display()
        );
    }
}
