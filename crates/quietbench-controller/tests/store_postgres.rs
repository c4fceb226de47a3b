//! What only a PostgreSQL store has to get right, on a real server (Debian's postgresql,
//! started by the tests): controllers that open an empty database at once migrate it once; a
//! database with tables of another program, or a newer schema, is refused and left untouched;
//! a server that cannot be reached, or a password, is named without the password; TLS is
//! verified as libpq verifies it (`sslmode`, `sslrootcert`); a connection the server ends is
//! made again. The store's
//! other tests run on PostgreSQL too (`QUIETBENCH_TEST_STORE=postgres`, as `.ci/run` does).

use quietbench_controller::store::{RunStatus, SCHEMA_VERSION, Store, StoreError};
use std::path::Path;

#[path = "support/store_fixtures.rs"]
mod store_fixtures;
use store_fixtures::postgres_server::{execute, fresh_database, tls_server};
use store_fixtures::*;

#[test]
fn controllers_opening_an_empty_database_at_once_migrate_it_once() {
    let url = fresh_database();
    let opened: Vec<_> = (0..6)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let store = Store::open(Path::new(&url)).unwrap();
                let id = format!("run-{i}");
                let run = new_run(&id, 10 + i);
                store.begin_run(&run, None).unwrap();
                store.add_host(&id, 0, &host(0, EPYC)).unwrap();
                store.add_trial(&id, 0, &trial(0, 0, 1, 1.0)).unwrap();
                store.finish_run(&run, RunStatus::Complete).unwrap();
            })
        })
        .collect();
    for t in opened {
        t.join().unwrap();
    }
    let store = Store::open(Path::new(&url)).unwrap();
    let runs = store.list_runs(10).unwrap();
    assert_eq!(runs.len(), 6);
    assert!(
        runs.iter()
            .all(|r| r.trials == 1 && r.status == RunStatus::Complete)
    );
    // One row per version: nobody migrated twice.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let versions: Vec<i64> = client
        .query("SELECT version FROM schema_version ORDER BY version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
}

#[test]
fn another_programs_database_and_a_newer_schema_are_refused_untouched() {
    let foreign = fresh_database();
    execute(&foreign, "CREATE TABLE invoices (id BIGINT PRIMARY KEY)");
    match Store::open(Path::new(&foreign)) {
        Err(StoreError::ForeignDatabase { tables: 1, .. }) => {}
        other => panic!("a foreign database was taken: {other:?}"),
    }
    let mut client = postgres::Client::connect(&foreign, postgres::NoTls).unwrap();
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "the foreign database was changed");

    let newer = fresh_database();
    drop(Store::open(Path::new(&newer)).unwrap());
    execute(
        &newer,
        &format!(
            "INSERT INTO schema_version VALUES ({}, 0)",
            SCHEMA_VERSION + 1
        ),
    );
    let err = Store::open(Path::new(&newer)).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err}"
    );
}

#[test]
fn an_unreachable_server_is_named_without_its_password() {
    let url = "postgresql://qb:s3cret@/qb?host=/nonexistent/socket/dir&connect_timeout=2";
    let err = Store::open(Path::new(url)).unwrap_err().to_string();
    assert!(!err.contains("s3cret"), "{err}");
    assert!(err.contains("qb:***@"), "{err}");
    assert!(err.contains("connecting"), "{err}");
}

#[test]
fn a_stored_run_reads_back_from_another_connection() {
    let url = fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let mut run = new_run("shared", 100);
    {
        let store = Store::open(Path::new(&url)).unwrap();
        store.begin_run(&run, None).unwrap();
        run.hosts.push(host(0, XEON));
        store.add_host("shared", 0, &run.hosts[0]).unwrap();
        for seq in 0..3 {
            let t = trial(seq, 0, seq as u32 + 1, 2.0 + seq as f64);
            store.add_trial("shared", seq, &t).unwrap();
            run.trials.push(t);
        }
    }
    let again = Store::open(Path::new(&url)).unwrap();
    assert_same_run(&again.load_run("shar").unwrap(), &run);
    // The same run written to SQLite reads back the same: the back ends agree.
    let sqlite = Store::open(&sqlite_path(&dir)).unwrap();
    sqlite.begin_run(&run, None).unwrap();
    sqlite.add_host("shared", 0, &run.hosts[0]).unwrap();
    for (seq, t) in run.trials.iter().enumerate() {
        sqlite.add_trial("shared", seq, t).unwrap();
    }
    assert_same_run(
        &sqlite.load_run("shared").unwrap(),
        &again.load_run("shared").unwrap(),
    );
}

#[test]
fn a_connection_the_server_ends_between_transactions_is_made_again() {
    let url = fresh_database();
    let store = Store::open(Path::new(&url)).unwrap();
    let run = new_run("survivor", 300);
    store.begin_run(&run, None).unwrap();
    store.add_host("survivor", 0, &host(0, EPYC)).unwrap();
    store
        .add_trial("survivor", 0, &trial(0, 0, 1, 1.0))
        .unwrap();
    for seq in 1..3 {
        end_other_connections(&url);
        store
            .add_trial("survivor", seq, &trial(seq, 0, 1, 1.0))
            .unwrap();
    }
    end_other_connections(&url);
    store.finish_run(&run, RunStatus::Complete).unwrap();
    end_other_connections(&url);
    let loaded = store.load_run("survivor").unwrap();
    assert_eq!(loaded.trials.len(), 3);
    assert_eq!(store.list_runs(5).unwrap()[0].status, RunStatus::Complete);
}

/// Ends every other connection to the database at `url`, as a server restart, a failover or
/// an idle timeout does, and waits until they are gone: pg_terminate_backend only signals.
fn end_other_connections(url: &str) {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let others = "FROM pg_stat_activity WHERE datname = current_database() \
                  AND pid <> pg_backend_pid()";
    admin
        .batch_execute(&format!("SELECT pg_terminate_backend(pid) {others}"))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left: i64 = admin
            .query_one(&format!("SELECT count(*) {others}"), &[])
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} connection(s) still there after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Opens the store at `url`, writes a run and reads it back: what a controller does.
fn store_a_run_at(url: &str, id: &str) {
    let store = Store::open(Path::new(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
    let run = new_run(id, 200);
    store.begin_run(&run, None).unwrap();
    store.add_host(id, 0, &host(0, EPYC)).unwrap();
    store.add_trial(id, 0, &trial(0, 0, 1, 1.0)).unwrap();
    store.finish_run(&run, RunStatus::Complete).unwrap();
    assert_eq!(store.load_run(id).unwrap().trials.len(), 1);
}

#[test]
fn tls_to_the_server_is_verified_as_libpq_verifies_it() {
    let server = tls_server();
    let ca = format!("sslrootcert={}", server.ca.display());
    let other_ca = format!("sslrootcert={}", server.other_ca.display());
    // The server refuses TCP in the clear (its pg_hba.conf), so whatever connects is TLS.
    let err = Store::open(Path::new(
        &server.fresh_database("localhost", "sslmode=disable"),
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("pg_hba.conf"), "{err}");

    // verify-full to the name on the certificate; verify-ca to any name; require and prefer
    // (libpq's default) encrypt without checking.
    store_a_run_at(
        &server.fresh_database("localhost", &format!("sslmode=verify-full&{ca}")),
        "full",
    );
    store_a_run_at(
        &server.fresh_database("127.0.0.1", &format!("sslmode=verify-ca&{ca}")),
        "ca",
    );
    store_a_run_at(
        &server.fresh_database("127.0.0.1", "sslmode=require"),
        "require",
    );
    store_a_run_at(
        &server.fresh_database("127.0.0.1", "connect_timeout=10"),
        "prefer",
    );

    // A certificate from another CA, or for another name, is refused, and says why.
    for (host, tls, why) in [
        (
            "localhost",
            format!("sslmode=verify-full&{other_ca}"),
            "invalid peer certificate",
        ),
        (
            "localhost",
            format!("sslmode=require&{other_ca}"),
            "invalid peer certificate",
        ),
        (
            "127.0.0.1",
            format!("sslmode=verify-full&{ca}"),
            "not valid for name",
        ),
    ] {
        let url = server.fresh_database(host, &tls);
        let err = Store::open(Path::new(&url)).unwrap_err().to_string();
        assert!(err.contains("TLS") && err.contains(why), "{url}: {err}");
    }
    // libpq's `prefer` goes on in the clear when the handshake fails (here: no host name to
    // start one with); `require` does not.
    store_a_run_at(
        &server.cleartext_database_by_address("connect_timeout=10"),
        "prefer, in the clear",
    );
    let url = server.cleartext_database_by_address("sslmode=require");
    let err = Store::open(Path::new(&url)).unwrap_err().to_string();
    assert!(err.contains("no hostname provided for TLS"), "{url}: {err}");
    // A CA file that is not there is named before any connection.
    let url = server.fresh_database(
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    );
    let err = Store::open(Path::new(&url)).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
}
