use super::*;
use crate::disk::ScratchDir;

#[test]
fn a_missing_path_is_a_file_to_create() {
    let dir = ScratchDir::new();
    let info = inspect(&dir.path().join("new.dat")).unwrap();
    assert_eq!(info.kind, TargetKind::File);
    assert_eq!(info.size, None);
    let err = inspect(dir.path()).unwrap_err();
    assert!(
        err.contains("neither a regular file nor a block device"),
        "{err}"
    );
}

#[test]
fn fills_with_real_data_once_and_completes_a_short_file() {
    let dir = ScratchDir::new();
    let path = dir.path().join("t.dat");
    let size = 3 * FILL_CHUNK as u64;
    let first = prepare_file(&path, size, 1, false).unwrap();
    assert_eq!((first.found, first.filled), (0, size));
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len() as u64, HEADER_BYTES + size);
    assert!(data.starts_with(MARK), "the probe's mark opens the file");
    let body = &data[HEADER_BYTES as usize..];
    assert!(body.chunks(ALIGN).all(|b| b.iter().any(|&x| x != 0)));
    // Distinct blocks: the offsets stamped in them differ.
    assert_ne!(&body[..ALIGN], &body[ALIGN..2 * ALIGN]);

    let again = prepare_file(&path, size, 1, false).unwrap();
    assert_eq!((again.found, again.filled, again.id), (size, 0, first.id));

    // A fill cut short mid-chunk: the partial chunk is redone, the rest kept.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(HEADER_BYTES + size - 100).unwrap();
    let resumed = prepare_file(&path, size, 1, false).unwrap();
    assert_eq!(
        (resumed.found, resumed.filled),
        (2 * FILL_CHUNK as u64, FILL_CHUNK as u64)
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER_BYTES + size);
}

#[test]
fn a_sparse_file_is_filled() {
    let dir = ScratchDir::new();
    let path = dir.path().join("sparse.dat");
    let size = 2 * FILL_CHUNK as u64;
    File::create(&path).unwrap().set_len(size).unwrap();
    // Not the probe's: refused, and left as it was.
    let err = prepare_file(&path, size, 5, false).unwrap_err();
    assert!(err.contains("not made by a quietbench disk probe"), "{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    // Claimed with destructive: its holes are filled.
    let prepared = prepare_file(&path, size, 5, true).unwrap();
    assert_eq!(prepared.filled, size, "{prepared:?}");
}
