//! Checksums: crc32c (Castagnoli), the polynomial Ceph uses, hardware-accelerated where the CPU
//! allows.

/// Returns the crc32c of `data`.
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a crc32c: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
#[must_use]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
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
    fn blocks_are_independent() {
        let data = vec![7u8; 8192];
        let sums = crc32c_blocks(&data, 4096);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[0], crc32c(&data[..4096]));
    }
}
