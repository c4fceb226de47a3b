//! A real PostgreSQL server for the store's tests: Debian's `postgresql` package, started once
//! per test process in a temporary folder (a Unix socket there, no TCP port), a fresh database
//! for each test, and stopped by a watcher when the test process exits. As root (CI), the
//! server runs as the `postgres` user: initdb refuses root. Without the package the tests fail
//! and say what to install; they never skip.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The server of this test process: its socket folder.
struct Server {
    dir: PathBuf,
}

fn bin_dir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin: install Debian's \
             postgresql package (apt-get install postgresql; .ci/run does)"
        )
    })
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `program args` as the server's user: `postgres` when we are root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start() -> Server {
    let bin = bin_dir();
    let dir = std::env::temp_dir().join(format!("quietbench-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if is_root() {
        run(
            Command::new("chown").arg("postgres:").arg(&dir),
            "chown postgres: (the server's folder)",
        );
    }
    let data = dir.join("data");
    run(
        as_server_user(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            ]),
        "initdb",
    );
    run(
        as_server_user(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!("-c listen_addresses='' -k {} -F", dir.display()))
            .arg("start"),
        "pg_ctl start",
    );
    // Stops the server and removes its folder once this test process is gone, however it ends.
    let stop = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {runuser}{pg_ctl} -D {data} -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        runuser = if is_root() {
            "runuser -u postgres -- "
        } else {
            ""
        },
        pg_ctl = bin.join("pg_ctl").display(),
        data = data.display(),
        dir = dir.display(),
    );
    // setsid --fork: the watcher lives on in a session of its own; setsid itself returns.
    let forked = Command::new("setsid")
        .args(["--fork", "sh", "-c", &stop])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("start the server's watcher (setsid)");
    assert!(forked.success(), "setsid --fork failed: {forked}");
    Server { dir }
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start)
}

/// The URL of a new, empty database on this process's server.
pub fn fresh_database() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let server = server();
    let name = format!(
        "qb_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let admin = format!(
        "postgresql:///postgres?host={}&user=postgres",
        server.dir.display()
    );
    let mut client = postgres::Client::connect(&admin, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test server at {admin}: {e}"));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    format!(
        "postgresql:///{name}?host={}&user=postgres",
        server.dir.display()
    )
}

/// A statement on the database at `url`, outside the store (to damage it, say).
pub fn execute(url: &str, sql: &str) {
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap()
        .batch_execute(sql)
        .unwrap();
}
