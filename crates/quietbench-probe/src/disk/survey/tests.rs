use super::*;

#[test]
fn regions_are_aligned_and_cover_the_target() {
    for (size, regions) in [
        (1u64 << 30, 64),
        (10 * 4096 + 100, 3),
        (4096, 1),
        (1 << 20, 256),
    ] {
        let mut next = 0;
        for r in 0..regions {
            let (start, end) = region_bounds(size, regions, r);
            assert_eq!(start, next, "size {size} regions {regions}");
            assert_eq!(start % 4096, 0);
            assert!(end > start, "region {r} of {regions} over {size} is empty");
            next = end;
        }
        assert_eq!(next, size);
    }
}

#[test]
fn samples_spread_over_distinct_regions() {
    assert_eq!(spread(64, 8), [4, 12, 20, 28, 36, 44, 52, 60]);
    assert_eq!(spread(3, 8), [0, 1, 2]);
    assert_eq!(spread(10, 0), Vec::<usize>::new());
    let s = spread(1000, 999);
    assert!(s.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_walk_reads_each_range_whole_and_rounds_the_tail_up() {
    let mut walk = Walk::new(vec![(0, 0, 10_000), (3, 1 << 20, (1 << 20) + 4096)]);
    let mut reads = Vec::new();
    while let Some(r) = walk.next(4096) {
        reads.push(r);
    }
    assert_eq!(
        reads,
        [
            (0, 0, 4096),
            (0, 4096, 4096),
            (0, 8192, 4096),
            (3, 1 << 20, 4096)
        ]
    );
}

#[test]
fn cold_regions_are_those_much_slower_the_first_time() {
    let passes = vec![RegionPass::default(); 3];
    // Three sampled regions, two reads each: cold (10x), warm (1x), cold (3x).
    let first = [1000, 1200, 100, 100, 300, 300];
    let second = [100, 120, 100, 100, 100, 100];
    let s = summarize(&passes, &first, &second, 2, 2.0);
    assert_eq!((s.resampled, s.cold), (3, 2));
    // Medians: first reads {100,100,300,300,1000,1200} -> 300; re-reads -> 100.
    assert_eq!(s.slowdown, Some(3.0));
    // Unread samples do not count.
    let s = summarize(&passes, &[0, 0], &[0, 0], 2, 2.0);
    assert_eq!((s.resampled, s.slowdown), (0, None));
}
