//! Replays the fuzz inputs kept in git through their targets on every `cargo test` (so on every
//! CI run: `.ci/run` runs `cargo test --workspace`): the named seeds of `fuzz/seeds/TARGET/`, and
//! every input that once crashed a parser or got past one of its bounds, `fuzz/regressions/
//! TARGET/` (fuzz/README.md). Where a local fuzzing run left `fuzz/corpus/` (benches/fuzz/seed.sh
//! regenerates it; git ignores it), that is replayed too.
//!
//! A folder that should hold inputs and holds none fails the test: a replay of nothing passes
//! whatever the parsers do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::io::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use quietbench_fuzz::{TARGETS, Target};

/// The most one allocation may ask for while inputs replay. benches/fuzz/run.sh runs libFuzzer
/// with `-rss_limit_mb=1024`, and libFuzzer's `-malloc_limit_mb` defaults to that, so a parser
/// that asks for more than 1 GiB at once is a crash there; here it aborts the test binary, naming
/// the input. Without the limit, an input like fuzz/regressions/histogram/payload-length-4gib
/// (4 GiB zeroed for 40 bytes) would pass slowly on any machine with the memory.
const MALLOC_LIMIT: usize = 1 << 30;

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// The system allocator, refusing any one allocation over [`MALLOC_LIMIT`].
struct Limited;

thread_local! {
    /// The input this thread is replaying, for the message of a refused allocation.
    static REPLAYING: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Limited {
    /// Says which input asked for `size` bytes, and refuses: Rust then reports the failed
    /// allocation and aborts. Nothing here allocates (the name was allocated before the input
    /// ran, and stderr is unbuffered).
    fn refuse(size: usize) -> *mut u8 {
        REPLAYING.with(|input| {
            if let Ok(input) = input.try_borrow() {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "replay: {input} asked for {size} bytes at once, over the {MALLOC_LIMIT}-byte \
                     limit libFuzzer applies under benches/fuzz/run.sh"
                );
            }
        });
        std::ptr::null_mut()
    }
}

// SAFETY: every call goes to `System` unchanged, except allocations over the limit, which get
// the null pointer that `GlobalAlloc` allows for a failed allocation.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MALLOC_LIMIT {
            return Self::refuse(layout.size());
        }
        // SAFETY: the caller's guarantees about `layout`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MALLOC_LIMIT {
            return Self::refuse(layout.size());
        }
        // SAFETY: the caller's guarantees about `layout`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MALLOC_LIMIT {
            return Self::refuse(new_size);
        }
        // SAFETY: `ptr` came from `System` through this allocator, with this `layout`; the
        // caller's guarantees about `new_size`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn fuzz_dir() -> PathBuf {
    // crates/quietbench-fuzz -> the repository root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2);
    root.expect("the crate sits two folders down").join("fuzz")
}

/// Replays every file in `dir` through `target` and returns how many ran. The error names the
/// folder when it is missing or empty, or every input that panicked (each panic's message is
/// printed above it).
fn replay_dir(target: &Target, dir: &Path) -> Result<usize, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        format!(
            "{}: {e} (fuzz/README.md says what belongs there)",
            dir.display()
        )
    })?;
    let mut inputs = entries
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if inputs.is_empty() {
        return Err(format!(
            "{} is empty: a replay of nothing passes whatever the parser does \
             (fuzz/README.md says what belongs there)",
            dir.display()
        ));
    }
    inputs.sort();
    let mut panicked = Vec::new();
    for input in &inputs {
        let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
        let name = input.display().to_string();
        REPLAYING.with(|replaying| *replaying.borrow_mut() = name.clone());
        if panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&data))).is_err() {
            panicked.push(name);
        }
    }
    if panicked.is_empty() {
        Ok(inputs.len())
    } else {
        Err(format!(
            "{} panics on {} of the {} inputs in {}: {}",
            target.name,
            panicked.len(),
            inputs.len(),
            dir.display(),
            panicked.join(", ")
        ))
    }
}

/// The folders under `root`, each of which must be named after a target: a misspelt or renamed
/// one would otherwise never be replayed.
fn target_folders(root: &Path) -> Result<Vec<(&'static Target, PathBuf)>, String> {
    let entries = std::fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let mut folders = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("{}: {e}", root.display()))?
            .path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let target = TARGETS.iter().find(|t| *t.name == *name).ok_or_else(|| {
            let known: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
            format!(
                "{} is not a target's folder (the targets: {})",
                path.display(),
                known.join(", ")
            )
        })?;
        folders.push((target, path));
    }
    folders.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(folders)
}

/// Fails with every error at once, so one run shows all that is wrong.
fn assert_no_errors(errors: &[String]) {
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
}

#[test]
fn every_target_has_named_seeds_and_none_panics() {
    let root = fuzz_dir().join("seeds");
    let mut errors = Vec::new();
    if let Err(e) = target_folders(&root) {
        errors.push(e);
    }
    let mut replayed = 0;
    for target in TARGETS {
        match replay_dir(target, &root.join(target.name)) {
            Ok(n) => replayed += n,
            Err(e) => errors.push(e),
        }
    }
    assert_no_errors(&errors);
    eprintln!(
        "replayed {replayed} named seeds through {} targets",
        TARGETS.len()
    );
}

#[test]
fn every_regression_replays_and_says_what_it_caught() {
    let root = fuzz_dir().join("regressions");
    let readme_path = fuzz_dir().join("README.md");
    let readme = std::fs::read_to_string(&readme_path)
        .unwrap_or_else(|e| panic!("{}: {e}", readme_path.display()));
    let folders = target_folders(&root).unwrap_or_else(|e| panic!("{e}"));
    let mut errors = Vec::new();
    let mut replayed = 0;
    for (target, dir) in &folders {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = format!("{}/{}", target.name, entry.file_name().to_string_lossy());
            if !readme.contains(&format!("`{name}`")) {
                errors.push(format!(
                    "fuzz/regressions/{name} has no line in {} saying what it caught",
                    readme_path.display()
                ));
            }
        }
        match replay_dir(target, dir) {
            Ok(n) => replayed += n,
            Err(e) => errors.push(e),
        }
    }
    if folders.is_empty() {
        errors.push(format!(
            "{} holds no target's folder: the inputs that once crashed a target are gone \
             (fuzz/README.md lists them)",
            root.display()
        ));
    }
    assert_no_errors(&errors);
    eprintln!(
        "replayed {replayed} regressions from {} target folders",
        folders.len()
    );
}

/// The corpus is optional (git does not keep it), but one that is there is replayed whole.
#[test]
fn the_local_corpus_replays_where_there_is_one() {
    let root = fuzz_dir().join("corpus");
    if !root.exists() {
        eprintln!(
            "no {}: only the named seeds and regressions were replayed (benches/fuzz/seed.sh \
             regenerates the corpus)",
            root.display()
        );
        return;
    }
    let folders = target_folders(&root).unwrap_or_else(|e| panic!("{e}"));
    let mut errors = Vec::new();
    let mut replayed = 0;
    for (target, dir) in &folders {
        match replay_dir(target, dir) {
            Ok(n) => replayed += n,
            Err(e) => errors.push(e),
        }
    }
    assert_no_errors(&errors);
    eprintln!(
        "replayed {replayed} corpus inputs from {} target folders in {}",
        folders.len(),
        root.display()
    );
}

#[test]
fn every_target_has_a_libfuzzer_entry_point() {
    let dir = fuzz_dir().join("fuzz_targets");
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

/// The replay itself: an input that panics fails it and is named, and a missing or empty
/// folder fails it rather than passing as a replay of nothing.
#[test]
fn a_panicking_input_fails_the_replay_and_is_named() {
    let fragile = Target {
        name: "fragile",
        run: |data| {
            assert!(
                !data.starts_with(b"boom"),
                "deliberate panic: this test's input"
            )
        },
    };
    let dir = std::env::temp_dir().join(format!("qb-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let empty = replay_dir(&fragile, &dir).unwrap_err();
    assert!(empty.contains("is empty"), "{empty}");
    let missing = replay_dir(&fragile, &dir.join("absent")).unwrap_err();
    assert!(missing.contains("absent"), "{missing}");

    std::fs::write(dir.join("calm-1"), b"fine").unwrap();
    std::fs::write(dir.join("calm-2"), b"").unwrap();
    assert_eq!(replay_dir(&fragile, &dir), Ok(2));

    std::fs::write(dir.join("crash-boom"), b"boom!").unwrap();
    let crashed = replay_dir(&fragile, &dir).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        crashed.contains("fragile panics on 1 of the 3 inputs") && crashed.contains("crash-boom"),
        "{crashed}"
    );
}

/// A folder named after no target is an error, not a folder quietly left out.
#[test]
fn a_folder_named_after_no_target_is_refused() {
    let dir = std::env::temp_dir().join(format!("qb-replay-folders-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("histogram")).unwrap();
    assert_eq!(target_folders(&dir).unwrap().len(), 1);
    std::fs::create_dir_all(dir.join("histgram")).unwrap();
    let Err(err) = target_folders(&dir) else {
        panic!("a folder named histgram was taken for a target's");
    };
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("histgram is not a target's folder"), "{err}");
}

#[test]
fn an_allocation_over_the_limit_is_refused() {
    REPLAYING.with(|replaying| {
        *replaying.borrow_mut() = "(no input: this test's deliberate request)".to_string();
    });
    let huge = Layout::from_size_align(MALLOC_LIMIT + 1, 8).unwrap();
    // SAFETY: the layout has a non-zero size; a refusal returns null and allocates nothing to
    // free.
    let ptr = unsafe { ALLOCATOR.alloc(huge) };
    assert!(ptr.is_null());
    let small = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: as above; what was allocated is freed with its own layout.
    unsafe {
        let ptr = ALLOCATOR.alloc(small);
        assert!(!ptr.is_null());
        ALLOCATOR.dealloc(ptr, small);
    }
}
