//! Deterministic, incompressible test and benchmark data.

/// `len` bytes of a xorshift64 stream seeded with `seed` (forced odd, so never the all-zero
/// state): each step's state appended little-endian. The same seed always gives the same
/// bytes, so a checker can recompute what a writer wrote from the seed alone.
#[must_use]
pub fn xorshift_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::xorshift_bytes;

    #[test]
    fn deterministic_and_distinct() {
        assert_eq!(xorshift_bytes(7, 100), xorshift_bytes(7, 100));
        assert_ne!(xorshift_bytes(7, 100), xorshift_bytes(9, 100));
        assert_eq!(&xorshift_bytes(7, 100)[..50], &xorshift_bytes(7, 50)[..]);
    }
}
