//! Request files on the controller's side, `http`'s and `tcp`'s. `requests=FILE` names a file
//! on this machine (relative to the directory quietbench runs in); the load agent replays its
//! requests.
//! Agents read no caller's files, so the controller reads it and sends its text in the
//! internal `requests_text` parameter, beside `requests=FILE` itself, which the trial's record
//! keeps as given (the probe resolves it to the name, never the text).
//!
//! The file is read **once per run**, before any host is reached, and every trial of the run
//! sends that one text: a file edited while the run goes on cannot make its trials replay
//! different requests under one name, and a file that is missing or malformed stops the run
//! before any server starts, with the line at fault. (Once per trial would have re-read and
//! re-checked it for every trial, after the fleet was up, and let the trials disagree.)
//!
//! The formats are the vocabulary's, [`quietbench_vocab::requests`] for `http` (a path per
//! line) and [`quietbench_vocab::raw_requests`] for `tcp` (a request's bytes per line, in
//! `request=`'s escapes): the probe parses the text by the same parser on the agent, so a file
//! this check passes is one the probe takes. Here is only what is the controller's: reading the
//! file (bounded, UTF-8), and the `requests=` parameters around it.
//!
//! `requests_order=random` draws from `requests_seed`; when the user gave none, the run's seed
//! goes in, so every trial of the run (and both servers of a compare) get the same draw, and a
//! rerun with the recorded `--seed` replays it.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use quietbench_vocab::raw_requests::parse_raw_requests;
pub use quietbench_vocab::requests::REQUESTS_TEXT;
use quietbench_vocab::requests::{MAX_REQUESTS_TEXT_BYTES, parse_requests};

use crate::schedule::VariantSpec;

/// The parameter naming the file.
pub const REQUESTS: &str = "requests";

/// Reads and checks the request file of every `http` or `tcp` variant that names one, and puts
/// its text (and for random order without a seed of the user's, `run_seed`) in the variant's
/// parameters, which the trials send. Called once per run on the trials' copy of the
/// variants; the run's record keeps the variants as given. Also checks, before any host is
/// reached, everything else of such a variant that the controller can: the server's
/// parameters ([`super::server::split`]) and how the request parameters go together.
pub fn read_for_run(variants: &mut [VariantSpec], run_seed: u64) -> anyhow::Result<()> {
    for variant in variants
        .iter_mut()
        .filter(|v| crate::run::runs_server(&v.probe))
    {
        let who = if variant.name == variant.probe {
            variant.probe.clone()
        } else {
            format!("variant {} ({})", variant.name, variant.probe)
        };
        prepare(&variant.probe, &mut variant.params, run_seed)
            .map_err(|why| anyhow::anyhow!("{who}: {why}"))?;
    }
    Ok(())
}

/// How a probe's request file is read: what its lines replace, and its parser.
struct FileFormat {
    /// The parameters that give the one request a file's lines replace.
    replaces: &'static [&'static str],
    /// What one line of the file is, for the refusal of both.
    a_line_is: &'static str,
    /// The vocabulary's parser, the one the probe parses the text with again on the agent.
    check: fn(&str) -> Result<(), String>,
}

/// The request file format of a probe that starts a server: `http`'s paths, `tcp`'s raw
/// requests; None for a probe that takes no file.
fn file_format(probe: &str) -> Option<FileFormat> {
    match probe {
        "http" => Some(FileFormat {
            replaces: &["path", "method"],
            a_line_is: "PATH or METHOD PATH",
            check: |text| parse_requests(text).map(drop),
        }),
        "tcp" => Some(FileFormat {
            replaces: &["request"],
            a_line_is: "the bytes of one request, in request='s escapes",
            check: |text| parse_raw_requests(text).map(drop),
        }),
        _ => None,
    }
}

/// One variant's part of [`read_for_run`]. `ready_path` is `http`'s alone (an HTTP GET, which
/// a raw server would not answer).
fn prepare(
    probe: &str,
    params: &mut BTreeMap<String, String>,
    run_seed: u64,
) -> Result<(), String> {
    if params.contains_key(REQUESTS_TEXT) {
        return Err(format!(
            "{REQUESTS_TEXT}= is not yours to set: give requests=FILE, and quietbench reads the \
             file and sends its text"
        ));
    }
    let as_map: HashMap<String, String> = params.clone().into_iter().collect();
    super::server::split(&as_map)?;
    if probe != "http" && params.contains_key("ready_path") {
        return Err(format!(
            "ready_path= is http's (a GET the server must answer): a {probe} server is ready \
             when its port accepts"
        ));
    }
    let Some(format) = file_format(probe) else {
        if let Some(key) = [REQUESTS, "requests_order", "requests_seed"]
            .into_iter()
            .find(|k| params.contains_key(*k))
        {
            return Err(format!(
                "{key}= is for http and tcp: {probe} takes no request file"
            ));
        }
        return Ok(());
    };
    let order = params.get("requests_order").map(String::as_str);
    if !matches!(order, None | Some("sequence" | "random")) {
        return Err(format!(
            "requests_order='{}': give sequence (the file's order) or random",
            order.unwrap_or_default()
        ));
    }
    if let Some(seed) = params.get("requests_seed")
        && seed.trim().parse::<u64>().is_err()
    {
        return Err(format!("requests_seed='{seed}': give a whole number"));
    }
    let Some(path) = params.get(REQUESTS).cloned() else {
        if let Some(key) = ["requests_order", "requests_seed"]
            .into_iter()
            .find(|k| params.contains_key(*k))
        {
            return Err(format!(
                "{key}= orders the requests of a file: give requests=FILE too"
            ));
        }
        return Ok(());
    };
    if let Some(key) = format.replaces.iter().find(|k| params.contains_key(**k)) {
        return Err(format!(
            "{key}= and requests= both say what to send: give one or the other (a file's line \
             is {})",
            format.a_line_is
        ));
    }
    let text =
        read_requests(&path, format.check).map_err(|why| format!("requests={path}: {why}"))?;
    let random = order == Some("random");
    params.insert(REQUESTS_TEXT.into(), text);
    if random && !params.contains_key("requests_seed") {
        params.insert("requests_seed".into(), run_seed.to_string());
    }
    Ok(())
}

/// Why [`read_bounded`] gave no bytes.
pub(super) enum Unread {
    /// The file has more than the bound.
    TooBig,
    /// It could not be opened or read: the message says why.
    Io(String),
}

/// A user's file (a request file, a gRPC message or descriptor set), read whole if it is at
/// most `max` bytes, and never more than `max` + 1 bytes of it.
pub(super) fn read_bounded(path: &str, max: u64) -> Result<Vec<u8>, Unread> {
    let file = std::fs::File::open(path).map_err(|e| {
        Unread::Io(format!(
            "cannot read it: {e} (a file on this machine, relative to where quietbench runs)"
        ))
    })?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Unread::Io(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(Unread::TooBig);
    }
    Ok(bytes)
}

/// Reads a request file and checks it with the probe's parser; an error says what is wrong,
/// with the line.
fn read_requests(path: &str, check: fn(&str) -> Result<(), String>) -> Result<String, String> {
    let bytes = read_bounded(path, MAX_REQUESTS_TEXT_BYTES as u64).map_err(|why| match why {
        Unread::TooBig => format!(
            "over {MAX_REQUESTS_TEXT_BYTES} bytes (1 MiB): replay a sample of the requests, or \
             split them over variants"
        ),
        Unread::Io(why) => why,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        format!("line {line}: not UTF-8 text")
    })?;
    check(&text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(pairs: &[(&str, &str)]) -> VariantSpec {
        VariantSpec {
            name: "http".into(),
            probe: "http".into(),
            params: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn file(dir: &tempfile::TempDir, name: &str, text: &[u8]) -> String {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn the_file_is_read_into_the_trials_params_and_the_seed_is_the_runs() {
        let dir = tempfile::tempdir().unwrap();
        let text = "# Monday\n/search?from=A&to=B\r\nhead /health\n";
        let path = file(&dir, "routes.txt", text.as_bytes());
        let mut variants = vec![
            variant(&[("server", "./s"), ("requests", &path)]),
            variant(&[
                ("server", "./s"),
                ("requests", &path),
                ("requests_order", "random"),
            ]),
            variant(&[
                ("server", "./s"),
                ("requests", &path),
                ("requests_order", "random"),
                ("requests_seed", "9"),
            ]),
            variant(&[("server", "./s"), ("path", "/x")]),
            VariantSpec {
                name: "cpu".into(),
                probe: "cpu.primes".into(),
                params: BTreeMap::from([("requests_text".into(), "not http's".into())]),
            },
        ];
        read_for_run(&mut variants, 77).unwrap();
        for v in &variants[..3] {
            assert_eq!(v.params[REQUESTS_TEXT], text);
            assert_eq!(
                v.params[REQUESTS], path,
                "the name goes too, for the record"
            );
        }
        assert!(!variants[0].params.contains_key("requests_seed"));
        assert_eq!(variants[1].params["requests_seed"], "77");
        assert_eq!(variants[2].params["requests_seed"], "9");
        assert!(!variants[3].params.contains_key(REQUESTS_TEXT));
        assert_eq!(variants[4].params.len(), 1, "other probes are not touched");
        // The text goes to the load; the server's agent gets none of it.
        let split =
            super::super::server::split(&variants[0].params.clone().into_iter().collect()).unwrap();
        assert_eq!(split.load[REQUESTS_TEXT], text);
        assert!(!split.server.contains_key(REQUESTS_TEXT));
    }

    #[test]
    fn bad_files_are_refused_with_the_line_and_bad_params_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        // The format's every rule is tested in quietbench-vocab; here, that a file is read,
        // parsed by it and refused with the variant, the file and the line, and what only
        // reading it can find.
        let files: &[(&[u8], &str)] = &[
            (
                b"/a\nsearch?q=1\n",
                "line 2: 'search?q=1' must start with '/'",
            ),
            (b"# only\n\n  \n", "no requests"),
            (b"/ok\n/\xff\n", "line 2: not UTF-8 text"),
            (b"/ok\n\n\xe9\n", "line 3: not UTF-8 text"),
        ];
        for (i, (text, expected)) in files.iter().enumerate() {
            let path = file(&dir, &format!("bad{i}.txt"), text);
            let mut variants = vec![variant(&[("server", "./s"), ("requests", &path)])];
            let err = format!("{:#}", read_for_run(&mut variants, 1).unwrap_err());
            assert!(
                err.starts_with(&format!("http: requests={path}: {expected}")),
                "{text:?}: {err}"
            );
        }
        let large = file(
            &dir,
            "large.txt",
            "/x\n".repeat(MAX_REQUESTS_TEXT_BYTES / 3 + 1).as_bytes(),
        );
        assert!(
            read_requests(&large, file_format("http").unwrap().check)
                .unwrap_err()
                .contains("over 1048576 bytes")
        );
        let missing = dir
            .path()
            .join("missing.txt")
            .to_string_lossy()
            .into_owned();
        assert!(
            read_requests(&missing, file_format("http").unwrap().check)
                .unwrap_err()
                .starts_with("cannot read it: No such file")
        );
        assert!(
            read_requests(
                &dir.path().to_string_lossy(),
                file_format("http").unwrap().check
            )
            .unwrap_err()
            .starts_with("cannot read it")
        );

        let good = file(&dir, "good.txt", b"/a\n");
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("requests_text", "/a")],
                "requests_text= is not yours to set",
            ),
            (
                &[("requests", &good), ("requests_text", "/a")],
                "not yours to set",
            ),
            (&[("requests_order", "random")], "give requests=FILE too"),
            (&[("requests_seed", "3")], "give requests=FILE too"),
            (
                &[("requests", &good), ("requests_order", "shuffled")],
                "give sequence",
            ),
            (
                &[("requests", &good), ("requests_seed", "x")],
                "whole number",
            ),
            (
                &[("requests", &good), ("path", "/b")],
                "give one or the other",
            ),
            (
                &[("requests", &good), ("method", "POST")],
                "give one or the other",
            ),
            (
                &[("requests", &good), ("server_aslr", "maybe")],
                "server_aslr='maybe'",
            ),
        ];
        for (pairs, expected) in cases {
            let mut params = vec![("server", "./s")];
            params.extend_from_slice(pairs);
            let mut variants = vec![VariantSpec {
                name: "A".into(),
                ..variant(&params)
            }];
            let err = format!("{:#}", read_for_run(&mut variants, 1).unwrap_err());
            assert!(err.starts_with("variant A (http): "), "{err}");
            assert!(err.contains(expected), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn a_tcp_file_is_read_by_its_own_format_and_its_server_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let tcp = |pairs: &[(&str, &str)]| VariantSpec {
            name: "tcp".into(),
            probe: "tcp".into(),
            ..variant(pairs)
        };
        // A line of raw bytes in escapes: not a path, which http's format would refuse.
        let text = "# keys\nGET user:42\\r\\n\r\nSET k \\x01\\n\n";
        let keys = file(&dir, "keys.txt", text.as_bytes());
        let mut variants = vec![
            tcp(&[("server", "./s"), ("request", "GET k\\r\\n")]),
            tcp(&[
                ("server", "./s"),
                ("requests", &keys),
                ("requests_order", "random"),
            ]),
        ];
        read_for_run(&mut variants, 5).unwrap();
        assert!(!variants[0].params.contains_key(REQUESTS_TEXT));
        assert_eq!(variants[1].params[REQUESTS_TEXT], text);
        assert_eq!(variants[1].params["requests_seed"], "5");

        let bad = file(&dir, "bad.txt", b"PING\\n\n\n# ok\nGET \\q\\n\n");
        let paths = file(&dir, "paths.txt", b"/a\n");
        let bad_said =
            format!("tcp: requests={bad}: line 4: 'GET \\q\\n': unknown escape \\q at byte 4");
        for (pairs, expected) in [
            (&[("server", "./s"), ("requests", &bad)][..], &bad_said[..]),
            (
                &[("server", "./s"), ("requests", &paths), ("request", "x")],
                "request= and requests= both say what to send",
            ),
            (
                &[("server", "./s"), ("requests_order", "random")],
                "requests_order= orders the requests of a file: give requests=FILE too",
            ),
            (&[("request", "x")], "needs the server to start"),
            (
                &[("server", "./s"), ("ready_path", "/health")],
                "a tcp server is ready when its port accepts",
            ),
        ] {
            let err = format!("{:#}", read_for_run(&mut [tcp(pairs)], 1).unwrap_err());
            assert!(err.contains(expected), "{pairs:?}: {err}");
        }
        // Each probe's file by its own format: a path is a raw request's bytes too, but a raw
        // request is no path.
        read_for_run(&mut [tcp(&[("server", "./s"), ("requests", &paths)])], 1).unwrap();
        let err = format!(
            "{:#}",
            read_for_run(&mut [variant(&[("server", "./s"), ("requests", &keys)])], 1).unwrap_err()
        );
        assert!(
            err.contains("line 2: 'user:42\\r\\n' must start with '/'"),
            "{err}"
        );
    }
}
