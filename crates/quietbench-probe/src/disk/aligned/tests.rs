use super::*;

#[test]
fn buffers_are_page_aligned_and_whole_pages() {
    for len in [1, 512, 4096, 4097, 16 << 10, 128 << 10, 1 << 20] {
        let buf = AlignedBuf::new(len).unwrap();
        assert_eq!(buf.as_ptr() as usize % ALIGN, 0, "len {len}");
        assert_eq!(buf.len() % ALIGN, 0);
        assert!(buf.len() >= len);
        assert!(buf.as_slice().iter().all(|&b| b == 0));
    }
}

#[test]
fn a_batch_lies_back_to_back_in_one_huge_page_aligned_region() {
    let bufs = AlignedBuf::many_random(16, 128 << 10, |i| i as u64).unwrap();
    let base = bufs[0].as_ptr() as usize;
    assert_eq!(base % HUGE_PAGE, 0);
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(buf.as_ptr() as usize, base + i * (128 << 10));
        assert_eq!(buf.len(), 128 << 10);
    }
    // Touched, so smaps can say what backs the region.
    assert!(
        bufs[0]
            .huge_page_pct()
            .is_some_and(|pct| (0.0..=100.0).contains(&pct))
    );
    // Each filled from its own seed, none left zero.
    assert_ne!(bufs[0].as_slice(), bufs[1].as_slice());
    assert!(bufs.iter().all(|b| b.as_slice().iter().any(|&x| x != 0)));
    // The region outlives any one buffer: dropping all but the last leaves it usable.
    let mut last = bufs.into_iter().last().unwrap();
    last.stamp(7, 9);
    assert_eq!(&last.as_slice()[..8], &7u64.to_le_bytes());
}

#[test]
fn rounding_is_to_whole_pages() {
    assert_eq!(round_up(0), 0);
    assert_eq!(round_up(1), 4096);
    assert_eq!(round_up(4096), 4096);
    assert_eq!(round_up(4097), 8192);
    assert_eq!(round_down(4095), 0);
    assert_eq!(round_down(8191), 4096);
}

#[test]
fn random_data_is_not_zero_and_differs_by_seed() {
    let a = AlignedBuf::random(64 << 10, 1).unwrap();
    let b = AlignedBuf::random(64 << 10, 2).unwrap();
    assert_ne!(a.as_slice(), b.as_slice());
    let zeros = a.as_slice().iter().filter(|&&b| b == 0).count();
    // About 1 in 256 bytes is zero in random data.
    assert!(zeros < a.len() / 100, "{zeros} zero bytes");
}

#[test]
fn stamps_make_blocks_differ() {
    let mut a = AlignedBuf::random(4096, 7).unwrap();
    let before = a.as_slice().to_vec();
    a.stamp(8192, 3);
    assert_eq!(&a.as_slice()[..8], &8192u64.to_le_bytes());
    assert_eq!(&a.as_slice()[8..16], &3u64.to_le_bytes());
    assert_eq!(&a.as_slice()[16..], &before[16..]);
}
