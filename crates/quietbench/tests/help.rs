//! `--help` of every command, as a user sees it, pinned by snapshots: a change to a flag or its
//! words shows up in review as a diff of these files (tests/snapshots/). Update them on purpose
//! with `cargo insta review` (or INSTA_UPDATE=always) after changing the command line.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quietbench"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_commands_help_is_pinned() {
    insta::assert_snapshot!("quietbench", help(&[]));
    for command in [
        "run", "host", "prepare", "restore", "compare", "runs", "show", "history", "resume",
        "release", "agent", "limits", "serve", "cancel",
    ] {
        insta::assert_snapshot!(command, help(&[command]));
    }
}
