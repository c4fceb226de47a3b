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

/// A server of this test process: its socket folder, and its port (which names its socket).
struct Server {
    dir: PathBuf,
    port: u16,
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

/// What a TLS server listens with: its TCP port, and the files of its certificate.
struct Tcp<'a> {
    port: u16,
    cert: &'a Path,
    key: &'a Path,
}

fn start() -> Server {
    start_server("quietbench-pg", None)
}

fn start_server(name: &str, tcp: Option<Tcp<'_>>) -> Server {
    let bin = bin_dir();
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
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
    let mut options = format!("-k {} -F", dir.display());
    match &tcp {
        None => options.push_str(" -c listen_addresses=''"),
        Some(tcp) => {
            // The server reads its key only when the server's user owns it, mode 0600.
            for (from, to) in [(tcp.cert, "server.crt"), (tcp.key, "server.key")] {
                std::fs::copy(from, data.join(to)).unwrap();
                if is_root() {
                    run(
                        Command::new("chown").arg("postgres:").arg(data.join(to)),
                        "chown postgres: (the server's certificate)",
                    );
                }
            }
            // TCP connections only over TLS: one in the clear is refused by the server, so a
            // connection that succeeds was encrypted. One database, qb_cleartext, takes them
            // in the clear too, for `prefer`'s retry without TLS.
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostnossl qb_cleartext all 127.0.0.1/32 trust\n\
                 hostnossl all all 127.0.0.1/32 reject\n",
            )
            .unwrap();
            options.push_str(&format!(
                " -c listen_addresses=127.0.0.1 -p {} -c ssl=on",
                tcp.port
            ));
        }
    }
    run(
        as_server_user(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(options)
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
    Server {
        dir,
        port: tcp.map_or(5432, |t| t.port),
    }
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start)
}

/// A second server of this test process, for TLS: on a loopback TCP port, where it takes
/// only TLS connections, with a certificate for `localhost` from a CA of its own.
pub struct TlsServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The CA certificate (PEM) that signed the server's.
    pub ca: PathBuf,
    /// Another CA's certificate, which did not.
    pub other_ca: PathBuf,
    server: Server,
}

/// This process's TLS server, started at the first call.
pub fn tls_server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        use quietbench_controller::tls::certs;
        let certs_dir =
            std::env::temp_dir().join(format!("quietbench-pg-ca-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&certs_dir);
        let now = time::OffsetDateTime::now_utc();
        let ca = certs::init(&certs_dir.join("ca"), now).unwrap();
        let other_ca = certs::init(&certs_dir.join("other"), now).unwrap();
        let issued = certs::issue(
            &certs_dir.join("ca"),
            certs::Role::Agent,
            "localhost",
            &[],
            1,
            now,
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let tcp = Tcp {
            port,
            cert: &issued.cert,
            key: &issued.key,
        };
        let server = start_server("quietbench-pg-tls", Some(tcp));
        // The CA certificates go where the server's watcher cleans up; the rest goes now.
        let (kept_ca, kept_other) = (server.dir.join("ca.pem"), server.dir.join("other-ca.pem"));
        std::fs::copy(&ca, &kept_ca).unwrap();
        std::fs::copy(&other_ca, &kept_other).unwrap();
        std::fs::remove_dir_all(&certs_dir).unwrap();
        TlsServer {
            port,
            ca: kept_ca,
            other_ca: kept_other,
            server,
        }
    })
}

impl TlsServer {
    /// The URL of a new, empty `qb_cleartext` (the one database the server lets in without
    /// TLS) by address alone (`hostaddr`, no host name, so a TLS handshake cannot start), with
    /// `tls` as the URL's TLS parameters.
    pub fn cleartext_database_by_address(&self, tls: &str) -> String {
        let mut client = admin_client(&self.server);
        for statement in [
            "DROP DATABASE IF EXISTS qb_cleartext",
            "CREATE DATABASE qb_cleartext",
        ] {
            client.batch_execute(statement).unwrap();
        }
        format!(
            "postgresql:///qb_cleartext?hostaddr=127.0.0.1&port={}&user=postgres&{tls}",
            self.port
        )
    }

    /// A new, empty database on it (made over its Unix socket), and its URL over TCP to
    /// `host` (which must resolve to 127.0.0.1; `localhost` is the certificate's name), with
    /// `tls` as the URL's TLS parameters.
    pub fn fresh_database(&self, host: &str, tls: &str) -> String {
        let name = create_database(&self.server);
        format!(
            "postgresql://postgres@{host}:{}/{name}?hostaddr=127.0.0.1&{tls}",
            self.port
        )
    }
}

fn create_database(server: &Server) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "qb_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    admin_client(server)
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    name
}

/// A client of `server`'s `postgres` database over its Unix socket.
fn admin_client(server: &Server) -> postgres::Client {
    let admin = format!(
        "postgresql:///postgres?host={}&port={}&user=postgres",
        server.dir.display(),
        server.port
    );
    postgres::Client::connect(&admin, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test server at {admin}: {e}"))
}

/// The URL of a new, empty database on this process's server.
pub fn fresh_database() -> String {
    let server = server();
    let name = create_database(server);
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
