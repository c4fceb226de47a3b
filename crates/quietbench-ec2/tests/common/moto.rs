//! A moto server (EC2's API on loopback) for the EC2 tests of this crate and of the end-to-end
//! suite (tests/tests/common/ec2.rs includes this file by path). std only, so both can.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A moto server on a free loopback port, killed when dropped.
pub struct Moto {
    child: Child,
    /// Its URL (http://127.0.0.1:PORT).
    pub url: String,
    /// Its port.
    pub port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto_server: $QUIETBENCH_MOTO_SERVER, else the virtualenv `.ci/run` makes in the workspace's
/// target/ (found above the including crate's folder), else PATH. A missing server fails the
/// test with how to install it: these tests never skip.
fn moto_server() -> String {
    if let Some(path) = std::env::var_os("QUIETBENCH_MOTO_SERVER") {
        return path.to_string_lossy().into_owned();
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("target/ci-venvs/moto/bin/moto_server"))
        .find(|venv| venv.exists())
        .map_or_else(
            || "moto_server".to_string(),
            |venv| venv.to_string_lossy().into_owned(),
        )
}

/// Starts moto on a free loopback port and waits until it listens.
pub fn start_moto() -> Moto {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = moto_server();
    let child = Command::new(&server)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {server}: {e}. Install it with `python3 -m venv target/ci-venvs/moto \
                 && target/ci-venvs/moto/bin/pip install 'moto[server]==5.2.5'` (.ci/run does)"
            )
        });
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not listen in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Moto {
        child,
        url: format!("http://127.0.0.1:{port}"),
        port,
    }
}
