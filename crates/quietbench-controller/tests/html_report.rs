//! The HTML report as a browser draws it: headless Chromium opens the page from a file and
//! screenshots it, and the PNG must be the asked-for size, not blank, and show the CPU-model
//! colours of the per-host chart. The page is self-contained, so Chromium runs with every
//! network feature off.
//!
//! Needs Chromium (Debian: `apt-get install -y chromium`; or set CHROMIUM to a Chrome binary).
//! Without it the test fails rather than skips: a skipped browser check reads as a passed one.
//! Set QUIETBENCH_KEEP_REPORT=DIR to keep the page and its screenshot there for a look.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quietbench_controller as qb;
use quietbench_record::record::test_records::sample_run;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 2400;

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "headless Chromium is needed to check the HTML report: install it \
         (Debian/Ubuntu: `apt-get install -y chromium`) or set CHROMIUM=/path/to/chrome"
    );
}

/// Runs Chromium to screenshot `page` into `shot`, killing it after a minute.
fn screenshot(page: &Path, shot: &Path, profile: &Path) {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("--window-size={WIDTH},{HEIGHT}"))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start Chromium ({e}): install it (`apt-get install -y chromium`)")
        });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait().expect("wait for Chromium") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("Chromium did not finish the screenshot within 60 s");
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let output = child.wait_with_output().expect("Chromium's output");
    assert!(
        output.status.success() && shot.is_file(),
        "Chromium did not write the screenshot ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Decodes an 8-bit PNG to width, height and RGB pixels.
fn decode(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let mut decoder = png::Decoder::new(std::io::BufReader::new(
        File::open(path).expect("open screenshot"),
    ));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a valid PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
    let frame = reader.next_frame(&mut buf).expect("PNG pixels");
    let channels = match frame.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let pixels = buf[..frame.buffer_size()]
        .chunks_exact(channels)
        .map(|p| match channels {
            1 | 2 => [p[0]; 3],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    (frame.width, frame.height, pixels)
}

fn hex(colour: &str) -> [u8; 3] {
    let v = u32::from_str_radix(colour.trim_start_matches('#'), 16).expect("#rrggbb");
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

#[test]
fn chromium_draws_the_report() {
    let run = sample_run::sample_run();
    let html = qb::report::html::render_html(&run);
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, &html).expect("write the page");
    let shot = dir.path().join("shot.png");
    screenshot(&page, &shot, &dir.path().join("profile"));
    if let Some(keep) = std::env::var_os("QUIETBENCH_KEEP_REPORT") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).expect("make the directory to keep the report in");
        std::fs::copy(&page, keep.join("report.html")).expect("keep the page");
        std::fs::copy(&shot, keep.join("shot.png")).expect("keep the screenshot");
    }

    let (width, height, pixels) = decode(&shot);
    assert_eq!((width, height), (WIDTH, HEIGHT));
    let distinct: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 100,
        "only {} colours: the page looks blank",
        distinct.len()
    );
    let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
    let inked = pixels.len() - white;
    assert!(
        inked > pixels.len() / 50,
        "only {inked} of {} pixels are not white",
        pixels.len()
    );
    // The three CPU models of the sample (sorted: 8124M, 8223CL, 8275CL) in their colours, in
    // the hosts table's swatches and the per-host chart's dots: solid areas, so exact colours
    // (within rounding) must appear on many pixels.
    for colour in &qb::report::html::CPU_MODEL_COLOURS[..3] {
        let want = hex(colour);
        let close = pixels
            .iter()
            .filter(|p| p.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 3))
            .count();
        assert!(
            close >= 200,
            "CPU-model colour {colour} is on only {close} pixels: the per-host chart or the \
             hosts table is missing"
        );
    }
}

/// How many pixels are `colour`, within rounding.
fn pixels_of(pixels: &[[u8; 3]], colour: &str) -> usize {
    let want = hex(colour);
    pixels
        .iter()
        .filter(|p| p.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 3))
        .count()
}

#[test]
fn chromium_draws_the_compare_verdict() {
    let run = sample_run::sample_compare_run();
    let html = qb::report::html::render_html(&run);
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("compare.html");
    std::fs::write(&page, &html).expect("write the page");
    let shot = dir.path().join("compare.png");
    screenshot(&page, &shot, &dir.path().join("profile"));
    if let Some(keep) = std::env::var_os("QUIETBENCH_KEEP_REPORT") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).expect("make the directory to keep the report in");
        std::fs::copy(&page, keep.join("compare.html")).expect("keep the page");
        std::fs::copy(&shot, keep.join("compare.png")).expect("keep the screenshot");
    }
    let (width, height, pixels) = decode(&shot);
    assert_eq!((width, height), (WIDTH, HEIGHT));
    // The verdict sentence's bar in the colour of "A is faster", and the ratio chart's
    // interval band: both solid areas, drawn only if the verdict section is there.
    let bar = pixels_of(&pixels, qb::report::html::VERDICT_COLOURS[1]);
    assert!(bar >= 100, "the verdict's bar is on only {bar} pixels");
    let band = pixels_of(&pixels, qb::report::html::INTERVAL_COLOUR);
    assert!(
        band >= 1000,
        "the ratio chart's interval band is on only {band} pixels"
    );
}

#[test]
fn chromium_draws_the_http_section() {
    use quietbench_record::record::test_records::http_run;
    let run = http_run::sample_http_run();
    let html = qb::report::html::render_html(&run);
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("http.html");
    std::fs::write(&page, &html).expect("write the page");
    let shot = dir.path().join("http.png");
    screenshot(&page, &shot, &dir.path().join("profile"));
    if let Some(keep) = std::env::var_os("QUIETBENCH_KEEP_REPORT") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).expect("make the directory to keep the report in");
        std::fs::copy(&page, keep.join("http.html")).expect("keep the page");
        std::fs::copy(&shot, keep.join("http.png")).expect("keep the screenshot");
    }
    let (width, height, pixels) = decode(&shot);
    assert_eq!((width, height), (WIDTH, HEIGHT));
    let distinct: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 100,
        "only {} colours: the page looks blank",
        distinct.len()
    );
    // B fell 6% short of the rate offered: its note's fill, a solid area drawn only in the
    // http section.
    let note = pixels_of(&pixels, qb::report::html::SHORTFALL_COLOUR);
    assert!(note >= 5000, "the shortfall note is on only {note} pixels");
    // A's and B's curves, solid and dashed, in their colours.
    for colour in &qb::report::html::VARIANT_COLOURS[..2] {
        let on = pixels_of(&pixels, colour);
        assert!(on >= 300, "variant colour {colour} is on only {on} pixels");
    }
}

#[test]
fn chromium_draws_the_load_curve_and_its_knees() {
    use quietbench_record::record::test_records::http_run;
    let run = http_run::capacity_run();
    let html = qb::report::html::render_html(&run);
    assert!(html.contains(r#"id="chart-load-curve""#));
    let dir = tempfile::tempdir().expect("temp dir");
    let page = dir.path().join("capacity.html");
    std::fs::write(&page, &html).expect("write the page");
    let shot = dir.path().join("capacity.png");
    screenshot(&page, &shot, &dir.path().join("profile"));
    if let Some(keep) = std::env::var_os("QUIETBENCH_KEEP_REPORT") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).expect("make the directory to keep the report in");
        std::fs::copy(&page, keep.join("capacity.html")).expect("keep the page");
        std::fs::copy(&shot, keep.join("capacity.png")).expect("keep the screenshot");
    }
    let (width, height, pixels) = decode(&shot);
    assert_eq!((width, height), (WIDTH, HEIGHT));
    // Two knees (A at 2,000 requests/s, B at 1,682), each an 8-px band the plot's height
    // (about 250 px), less the grid and curves drawn over them.
    let knees = pixels_of(&pixels, qb::report::html::KNEE_COLOUR);
    assert!(knees >= 2000, "the knees' bands are on only {knees} pixels");
    // A's and B's curves in their colours.
    for colour in &qb::report::html::VARIANT_COLOURS[..2] {
        let on = pixels_of(&pixels, colour);
        assert!(on >= 300, "variant colour {colour} is on only {on} pixels");
    }
}
