//! Checksums: crc32c (Castagnoli), the polynomial Ceph uses, hardware-accelerated where the CPU
//! allows.
//!
//! The implementation is `crc-fast`, which folds with carry-less multiplication (VPCLMULQDQ on
//! AVX-512 machines) instead of issuing the `crc32` instruction eight bytes at a time: on this
//! project's test machine it checksums a 512 KiB buffer 3.6x and a 4 KiB block 1.5x faster than
//! the `crc32c` crate did (decision 0026). The values are the same CRC-32C (iSCSI) either way, so
//! checksums already on disk or on the wire are unaffected.

use crc_fast::{CrcAlgorithm, Digest};

/// Returns the crc32c of `data`.
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// Continues a crc32c: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
#[must_use]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    // The running state of this reflected CRC is the finished value with its final inversion
    // undone.
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    // A CRC-32 digest's value fits in 32 bits.
    digest.finalize() as u32
}

/// The reflected CRC-32C polynomial.
const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// Undoes [`crc32c_append`]: `crc32c_unappend(crc32c(a ++ b), b) == crc32c(a)`.
///
/// A receiver that checksummed a whole payload while it arrived (the bytes still in cache) gets
/// the checksum of its leading part from this without reading that part again. It runs the
/// register backwards one bit at a time, about a nanosecond per bit of `tail`: meant for tails
/// of a few hundred bytes (a message's header), not for bulk data.
#[must_use]
pub fn crc32c_unappend(crc: u32, tail: &[u8]) -> u32 {
    // Forward, each byte is XORed into the low bits and then eight shifts each XOR the
    // polynomial in when the bit shifted out was set. The polynomial's top bit is set and a
    // right shift clears it, so the top bit after a step tells whether the XOR happened, and the
    // step can be undone exactly.
    let mut state = !crc;
    for &byte in tail.iter().rev() {
        for _ in 0..8 {
            state = if state & 0x8000_0000 != 0 { ((state ^ POLY_REFLECTED) << 1) | 1 } else { state << 1 };
        }
        state ^= u32::from(byte);
    }
    !state
}

/// Returns one crc32c per `block_bytes`-sized block of `data`, in order.
///
/// `data.len()` must be a multiple of `block_bytes`; the engine only checksums whole blocks so
/// that a checksum always covers exactly what one aligned device read returns.
#[must_use]
pub fn crc32c_blocks(data: &[u8], block_bytes: usize) -> Vec<u32> {
    assert!(block_bytes > 0, "block size must be positive");
    assert_eq!(data.len() % block_bytes, 0, "checksummed data must be whole blocks");
    data.chunks_exact(block_bytes).map(crc32c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
    }

    #[test]
    fn append_matches_the_whole_at_every_split() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
        let whole = crc32c(&data);
        for at in [0, 1, 15, 16, 17, 255, 256, 4096, 4999, 5000] {
            assert_eq!(crc32c_append(crc32c(&data[..at]), &data[at..]), whole, "split at {at}");
        }
        assert_eq!(crc32c(&[]), 0);
        assert_eq!(crc32c_append(whole, &[]), whole);
    }

    #[test]
    fn unappend_undoes_append_for_any_split() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for at in [0, 1, 7, 64, 1000, 2999, 3000] {
            let whole = crc32c(&data);
            assert_eq!(crc32c_unappend(whole, &data[at..]), crc32c(&data[..at]), "split at {at}");
        }
        assert_eq!(crc32c_unappend(crc32c(b"123456789"), b"56789"), crc32c(b"1234"));
        assert_eq!(crc32c_unappend(0x1234_5678, &[]), 0x1234_5678);
    }

    #[test]
    fn blocks_are_independent() {
        let data = vec![7u8; 8192];
        let sums = crc32c_blocks(&data, 4096);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[0], crc32c(&data[..4096]));
    }
}
