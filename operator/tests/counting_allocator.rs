//! `muster bench`'s memory figure: the counting allocator counts what a measured piece of
//! code leaves allocated, and nothing outside a measurement.

use muster_operator::bench::CountingAllocator;

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

const MIB: usize = 1 << 20;

#[test]
fn a_measurement_counts_what_its_value_holds_and_nothing_from_before() {
    // What the value holds (a little more may come from the test harness's own thread).
    let (held, bytes) = ALLOC.measure(|| vec![7u8; MIB]);
    assert!((MIB..MIB + 64 * 1024).contains(&bytes), "{bytes} bytes");

    // A temporary freed before the end counts nothing.
    let ((), bytes) = ALLOC.measure(|| {
        let t = vec![1u8; 4 * MIB];
        std::hint::black_box(&t);
    });
    assert!(bytes < 64 * 1024, "{bytes} bytes");

    // Allocated while not counting: freeing it in a measurement would count negative, and
    // the figure is floored at zero rather than wrapping to an absurd size.
    let before = vec![0u8; 4 * MIB];
    std::hint::black_box(&before);
    let ((), bytes) = ALLOC.measure(|| drop(before));
    assert_eq!(bytes, 0);
    assert_eq!(held.len(), MIB);
}
