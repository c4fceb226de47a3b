//! Every command's `--help` matches its snapshot in tests/snapshots/help/.

use super::*;

pub(crate) const HELP_DIR: &str = "tests/snapshots/help";

/// The subcommands a `--help` lists under "Commands:", `help` left out.
pub(crate) fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

pub(crate) fn help_of(command: &[String]) -> String {
    let out = std::process::Command::new(common::quietbench_bin())
        .args(command)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("quietbench runs");
    assert!(out.status.success(), "quietbench {command:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The lines of `expected` and `actual` that differ, as a diff (longest common subsequence).
pub(crate) fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("    + {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("    - {}\n", a[i]));
            i += 1;
        }
    }
    out
}

#[test]
pub(crate) fn every_commands_help_matches_its_snapshot() {
    // `fleet` and `gc` exist only in the binary built with the ec2 feature, the one the test
    // command builds: fail rather than pass on a smaller command tree.
    common::ec2::check_binary_has_ec2();
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(command) = queue.pop() {
        let help = help_of(&command);
        for sub in subcommands(&help) {
            let mut path = command.clone();
            path.push(sub);
            queue.push(path);
        }
        let name = if command.is_empty() {
            "quietbench".to_string()
        } else {
            command.join("-")
        };
        helps.insert(name, help);
    }
    assert!(helps.len() > 10, "found only {:?}", helps.keys());
    let dir = root().join(HELP_DIR);
    let mut stored: BTreeSet<String> = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(command) = name.strip_suffix(".txt") {
                stored.insert(command.to_string());
            }
        }
    }
    if std::env::var_os("QUIETBENCH_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, help) in &helps {
            std::fs::write(dir.join(format!("{name}.txt")), help).unwrap();
        }
        for gone in stored.iter().filter(|s| !helps.contains_key(*s)) {
            std::fs::remove_file(dir.join(format!("{gone}.txt"))).unwrap();
            eprintln!("docs_drift: removed {HELP_DIR}/{gone}.txt (no such command)");
        }
        eprintln!(
            "docs_drift: wrote {} help snapshots to {HELP_DIR}",
            helps.len()
        );
        return;
    }
    let mut problems = Vec::new();
    for (name, help) in &helps {
        let file = dir.join(format!("{name}.txt"));
        match std::fs::read_to_string(&file) {
            Err(_) => problems.push(format!("{HELP_DIR}/{name}.txt is missing (a new command)")),
            Ok(snapshot) if snapshot != *help => problems.push(format!(
                "{HELP_DIR}/{name}.txt differs from `quietbench {} --help` (- snapshot, + now):\n{}",
                name.replace('-', " "),
                line_diff(&snapshot, help)
            )),
            Ok(_) => {}
        }
    }
    for gone in stored.iter().filter(|s| !helps.contains_key(*s)) {
        problems.push(format!(
            "{HELP_DIR}/{gone}.txt names no command of this quietbench"
        ));
    }
    assert!(
        problems.is_empty(),
        "the command line changed:\n\n{}\n\nIf the change is meant, review it and rewrite the \
         snapshots: QUIETBENCH_BLESS=1 cargo test -p quietbench-tests --test docs_drift \
         every_commands_help; then check README.md and docs/ still say what the help says.",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// README's two commands, the security page's tests, and links.
