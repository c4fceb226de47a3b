use super::*;
use crate::disk::ScratchDir;

#[test]
fn a_new_file_has_every_region_pending_and_marks_persist() {
    let dir = ScratchDir::new();
    let path = dir.path().join("sub/dir/t.qbscan");
    let mut a = ScanState::open(&path, 1 << 30, 8).unwrap();
    assert!((0..8).all(|r| !a.is_done(r)));
    a.mark_done(2).unwrap();
    // A second handle (another thread) marks its own region; neither overwrites the other.
    let mut b = ScanState::open(&path, 1 << 30, 8).unwrap();
    assert!(b.is_done(2));
    b.mark_done(7).unwrap();
    a.mark_done(3).unwrap();
    a.sync().unwrap();
    b.sync().unwrap();
    let content = std::fs::read(&path).unwrap();
    assert_eq!(
        String::from_utf8(content).unwrap(),
        format!("{}..##...#", header(1 << 30, 8))
    );
    let resumed = ScanState::open(&path, 1 << 30, 8).unwrap();
    let done: Vec<usize> = (0..8).filter(|&r| resumed.is_done(r)).collect();
    assert_eq!(done, [2, 3, 7]);
}

#[test]
fn another_layout_is_refused_with_the_fix() {
    let dir = ScratchDir::new();
    let path = dir.path().join("t.qbscan");
    ScanState::open(&path, 4096 * 100, 10).unwrap();
    let err = ScanState::open(&path, 4096 * 100, 20).err().unwrap();
    assert!(
        err.contains("another layout") && err.contains("delete it"),
        "{err}"
    );
    let err = ScanState::open(&path, 4096 * 200, 10).err().unwrap();
    assert!(err.contains("size=409600 regions=10"), "{err}");
}

#[test]
fn parse_accepts_short_and_zeroed_bodies_and_rejects_garbage() {
    let h = header(1000, 4);
    assert_eq!(
        parse(format!("{h}#").as_bytes(), 1000, 4).unwrap(),
        [true, false, false, false]
    );
    let mut zeroed = h.clone().into_bytes();
    zeroed.extend([b'#', 0, 0, b'#']);
    assert_eq!(parse(&zeroed, 1000, 4).unwrap(), [true, false, false, true]);
    assert!(
        parse(format!("{h}#x").as_bytes(), 1000, 4)
            .unwrap_err()
            .contains("0x78")
    );
    assert!(
        parse(format!("{h}.....").as_bytes(), 1000, 4)
            .unwrap_err()
            .contains("5 region")
    );
    assert!(
        parse(b"garbage", 1000, 4)
            .unwrap_err()
            .contains("no header")
    );
}
