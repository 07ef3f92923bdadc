//! Wire sequence numbers: widening a message's 16-bit sequence to the receiver's count.

/// The full sequence number of a 16-bit wire sequence, given the next one expected: the
/// sender's credits keep every message within a window far below 2^15 of it.
pub(super) fn widen(expected: u32, wire: u16) -> u32 {
    let delta = wire.wrapping_sub(expected as u16) as i16;
    expected.wrapping_add(delta as i32 as u32)
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn wire_sequences_widen_across_wraps() {
        for (expected, wire, full) in [
            (0, 0, 0),
            (5, 7, 7),
            (65_535, 65_535, 65_535),
            (65_535, 0, 65_536),
            (65_536, 1, 65_537),
            (131_070, 65_534, 131_070),
            (131_072, 65_535, 131_071),
            (u32::MAX, 0, 0),
        ] {
            assert_eq!(
                widen(expected, wire),
                full,
                "expected {expected}, wire {wire}"
            );
        }
    }
}
