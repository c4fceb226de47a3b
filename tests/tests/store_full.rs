//! The result store's disk fills mid-run: the run stops with a clear error naming the store,
//! the database passes SQLite's integrity_check, and every trial stored before it is kept.
//!
//! Needs root to mount a small tmpfs (CI runs as root); fails, rather than skips, without it.

mod common;

use std::process::Command;

/// A tmpfs of `size` mounted on a fresh folder, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "mounting a small tmpfs needs root (CI runs as root)"
        );
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs failed");
        Self { dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A run of 200 short rounds, more than a small disk holds, into `db` and `json`.
fn long_run(db: &std::path::Path, json: &std::path::Path) -> std::process::Output {
    common::quietbench()
        .args([
            "run",
            "--local",
            "--rounds",
            "200",
            "--warmup",
            "0",
            "--duration",
            "0.1",
            "--db",
        ])
        .arg(db)
        .arg("--json")
        .arg(json)
        .output()
        .unwrap()
}

#[test]
fn a_full_disk_stops_the_run_clearly_and_keeps_every_stored_trial() {
    let disk = SmallDisk::mount("400k");
    let db = disk.dir.path().join("store.sqlite3");
    let json_dir = tempfile::tempdir().unwrap();
    let json = json_dir.path().join("run.json");
    let out = long_run(&db, &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("database or disk is full") || stderr.contains("database or disk is full"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains(&db.display().to_string()), "{stderr}");
    assert!(stderr.contains("the store refused"), "{stderr}");

    // The store is whole, and holds the trials before the failure.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let finished = report["trials"].as_array().unwrap().len();
    let check = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
             print(c.execute('pragma integrity_check').fetchone()[0], \
             c.execute('select count(*) from trials').fetchone()[0])",
        )
        .arg(&db)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    let mut words = said.split_whitespace();
    assert_eq!(words.next(), Some("ok"), "integrity_check: {said}");
    let stored: usize = words.next().unwrap().parse().unwrap();
    assert!(stored > 0, "nothing was stored before the disk filled");
    // Every finished trial but the one the store refused.
    assert_eq!(stored + 1, finished, "stored {stored}, finished {finished}");
    println!("disk full after {stored} stored trials; integrity_check ok");
}

/// The store and the JSON report on one full disk: the run never points at a JSON report that
/// was not written (an older one left there would not have the trials the store refused).
#[test]
fn a_full_disk_under_the_json_report_too_is_said_so() {
    let disk = SmallDisk::mount("400k");
    let db = disk.dir.path().join("store.sqlite3");
    let json = disk.dir.path().join("run.json");
    let out = long_run(&db, &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    if stderr.contains("has them") {
        // Claimed: then the report is there and whole.
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert!(!report["trials"].as_array().unwrap().is_empty(), "{stderr}");
    } else {
        assert!(
            stderr.contains("could not be written either")
                || stderr.contains(&json.display().to_string()),
            "the JSON report's fate is not said:\n{stderr}"
        );
    }
}
