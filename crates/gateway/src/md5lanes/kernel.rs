//! MD5's compression function (RFC 1321) over one stream, and over many streams at once in the
//! lanes of a vector register: 16 with AVX-512, 8 with AVX2. MD5 of one stream cannot go faster
//! than its serial chain of additions allows (about 600 MB/s on this project's machines), but
//! independent streams can share an instruction stream, each lane carrying one of them.

/// The additive constants `floor(abs(sin(i + 1)) * 2^32)`.
const K: [u32; 64] = [
    0xd76a_a478,
    0xe8c7_b756,
    0x2420_70db,
    0xc1bd_ceee,
    0xf57c_0faf,
    0x4787_c62a,
    0xa830_4613,
    0xfd46_9501,
    0x6980_98d8,
    0x8b44_f7af,
    0xffff_5bb1,
    0x895c_d7be,
    0x6b90_1122,
    0xfd98_7193,
    0xa679_438e,
    0x49b4_0821,
    0xf61e_2562,
    0xc040_b340,
    0x265e_5a51,
    0xe9b6_c7aa,
    0xd62f_105d,
    0x0244_1453,
    0xd8a1_e681,
    0xe7d3_fbc8,
    0x21e1_cde6,
    0xc337_07d6,
    0xf4d5_0d87,
    0x455a_14ed,
    0xa9e3_e905,
    0xfcef_a3f8,
    0x676f_02d9,
    0x8d2a_4c8a,
    0xfffa_3942,
    0x8771_f681,
    0x6d9d_6122,
    0xfde5_380c,
    0xa4be_ea44,
    0x4bde_cfa9,
    0xf6bb_4b60,
    0xbebf_bc70,
    0x289b_7ec6,
    0xeaa1_27fa,
    0xd4ef_3085,
    0x0488_1d05,
    0xd9d4_d039,
    0xe6db_99e5,
    0x1fa2_7cf8,
    0xc4ac_5665,
    0xf429_2244,
    0x432a_ff97,
    0xab94_23a7,
    0xfc93_a039,
    0x655b_59c3,
    0x8f0c_cc92,
    0xffef_f47d,
    0x8584_5dd1,
    0x6fa8_7e4f,
    0xfe2c_e6e0,
    0xa301_4314,
    0x4e08_11a1,
    0xf753_7e82,
    0xbd3a_f235,
    0x2ad7_d2bb,
    0xeb86_d391,
];

/// The left rotations of each step.
const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15,
    21,
];

/// The message word each step reads.
const fn word_of(step: usize) -> usize {
    match step / 16 {
        0 => step,
        1 => (5 * step + 1) % 16,
        2 => (3 * step + 5) % 16,
        _ => (7 * step) % 16,
    }
}

/// MD5's initial state.
pub const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// Bytes of one MD5 block.
pub const BLOCK_BYTES: usize = 64;

/// Advances `state` over `data`, whole blocks (`data.len()` a multiple of [`BLOCK_BYTES`]).
///
/// The 64 steps are written out (four per [`four_steps`] call, with constant step numbers) rather
/// than looped over: a loop choosing its round function by step number was not unrolled by the
/// compiler and ran at ~465 MiB/s here, and small uploads hash on the request's own thread
/// (`benches/md5_lanes.rs` prints both this and the `md-5` crate's speed).
pub fn compress(state: &mut [u32; 4], data: &[u8]) {
    assert!(data.len().is_multiple_of(BLOCK_BYTES), "MD5 compresses whole blocks, not {} bytes", data.len());
    for block in data.chunks_exact(BLOCK_BYTES) {
        let mut m = [0u32; 16];
        for (w, bytes) in m.iter_mut().zip(block.chunks_exact(4)) {
            *w = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        let [mut a, mut b, mut c, mut d] = *state;
        // The round functions in forms whose newest input (b, the one the previous step just
        // made) passes through as few operations as possible: F picks c or d by b's bits, G picks
        // b or c by d's bits, the two halves of G never overlap, so adding them is or-ing them.
        let f = |b: u32, c: u32, d: u32| d ^ (b & (c ^ d));
        let g = |b: u32, c: u32, d: u32| (b & d).wrapping_add(c & !d);
        let h = |b: u32, c: u32, d: u32| b ^ c ^ d;
        let i = |b: u32, c: u32, d: u32| c ^ (b | !d);
        four_steps!(f, m, a, b, c, d, 0);
        four_steps!(f, m, a, b, c, d, 4);
        four_steps!(f, m, a, b, c, d, 8);
        four_steps!(f, m, a, b, c, d, 12);
        four_steps!(g, m, a, b, c, d, 16);
        four_steps!(g, m, a, b, c, d, 20);
        four_steps!(g, m, a, b, c, d, 24);
        four_steps!(g, m, a, b, c, d, 28);
        four_steps!(h, m, a, b, c, d, 32);
        four_steps!(h, m, a, b, c, d, 36);
        four_steps!(h, m, a, b, c, d, 40);
        four_steps!(h, m, a, b, c, d, 44);
        four_steps!(i, m, a, b, c, d, 48);
        four_steps!(i, m, a, b, c, d, 52);
        four_steps!(i, m, a, b, c, d, 56);
        four_steps!(i, m, a, b, c, d, 60);
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
}

/// Steps `at`..`at + 4` of MD5 with round function `$f` over message words `$m`: each step
/// updates one of the four words, which take turns (a, then d, then c, then b).
macro_rules! four_steps {
    ($f:ident, $m:ident, $a:ident, $b:ident, $c:ident, $d:ident, $at:expr) => {
        one_step!($f, $m, $a, $b, $c, $d, $at);
        one_step!($f, $m, $d, $a, $b, $c, $at + 1);
        one_step!($f, $m, $c, $d, $a, $b, $at + 2);
        one_step!($f, $m, $b, $c, $d, $a, $at + 3);
    };
}
use four_steps;

/// One step of MD5: `$a` becomes `$b + (($a + K + word + f($b, $c, $d)) <<< S)`, summed in that
/// order so that only the last addition waits for the previous step.
macro_rules! one_step {
    ($f:ident, $m:ident, $a:ident, $b:ident, $c:ident, $d:ident, $at:expr) => {
        $a = $b.wrapping_add(
            $a.wrapping_add(K[$at]).wrapping_add($m[word_of($at)]).wrapping_add($f($b, $c, $d)).rotate_left(S[$at]),
        );
    };
}
use one_step;

/// The digest of a stream whose whole blocks made `state` and which ends with `tail` (fewer
/// than [`BLOCK_BYTES`]), `len_bytes` long in all: the padding and length, then the state's bytes.
pub fn finish(mut state: [u32; 4], tail: &[u8], len_bytes: u64) -> [u8; 16] {
    assert!(tail.len() < BLOCK_BYTES, "a tail of {} bytes is not less than a block", tail.len());
    let mut last = [0u8; 2 * BLOCK_BYTES];
    last[..tail.len()].copy_from_slice(tail);
    last[tail.len()] = 0x80;
    let end = if tail.len() < BLOCK_BYTES - 8 { BLOCK_BYTES } else { 2 * BLOCK_BYTES };
    last[end - 8..end].copy_from_slice(&len_bytes.wrapping_mul(8).to_le_bytes());
    compress(&mut state, &last[..end]);
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// How many streams one call of [`compress_lanes`] advances at most on this machine (16 with
/// AVX-512, 8 with AVX2, 1 otherwise).
pub fn lane_count() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    1
}

/// Advances each `states[i]` over `data[i]`; every `data[i]` has the same length, a multiple of
/// [`BLOCK_BYTES`]. Up to [`lane_count`] streams go through the vector unit together.
pub fn compress_lanes(states: &mut [[u32; 4]], data: &[&[u8]]) {
    assert_eq!(states.len(), data.len(), "one state per stream");
    let Some(first) = data.first() else { return };
    let len = first.len();
    assert!(data.iter().all(|d| d.len() == len), "every stream advances by the same number of bytes");
    assert!(len.is_multiple_of(BLOCK_BYTES), "MD5 compresses whole blocks, not {len} bytes");
    #[cfg(target_arch = "x86_64")]
    if states.len() > 1 {
        // One stream alone goes through the one-stream function, which is faster than one lane
        // of either vector kernel (650 against 500 MiB/s for AVX-512's here).
        if std::arch::is_x86_feature_detected!("avx512f") {
            for (s, d) in states.chunks_mut(16).zip(data.chunks(16)) {
                // SAFETY: the CPU has AVX-512F (checked above); every slice is `len` bytes long.
                unsafe { x86::lanes16(s, d, len / BLOCK_BYTES) };
            }
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            for (s, d) in states.chunks_mut(8).zip(data.chunks(8)) {
                // SAFETY: the CPU has AVX2 (checked above); every slice is `len` bytes long.
                unsafe { x86::lanes8(s, d, len / BLOCK_BYTES) };
            }
            return;
        }
    }
    for (s, d) in states.iter_mut().zip(data) {
        compress(s, d);
    }
}

/// The vector kernels. Word `w` of every lane's block is gathered into one register (each lane
/// reads its own buffer: 64-bit offsets from the first lane's, so buffers anywhere in memory
/// work), and the 64 steps run on all lanes at once. Unused lanes repeat the first lane's data
/// and their results are dropped.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCK_BYTES, K, S, word_of};

    /// AVX-512: up to 16 streams, `blocks` blocks each.
    ///
    /// # Safety
    /// The CPU supports AVX-512F, and every `data[i]` holds at least `blocks * 64` bytes.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn lanes16(states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
        const LANES: usize = 16;
        debug_assert!(!data.is_empty() && data.len() <= LANES && states.len() == data.len());
        debug_assert!(data.iter().all(|d| d.len() >= blocks * BLOCK_BYTES));
        let base = data[0].as_ptr();
        let offset = |i: usize| (data.get(i).unwrap_or(&data[0]).as_ptr() as i64).wrapping_sub(base as i64);
        let lo =
            _mm512_set_epi64(offset(7), offset(6), offset(5), offset(4), offset(3), offset(2), offset(1), offset(0));
        let hi = _mm512_set_epi64(
            offset(15),
            offset(14),
            offset(13),
            offset(12),
            offset(11),
            offset(10),
            offset(9),
            offset(8),
        );
        let mut init = [_mm512_setzero_si512(); 4];
        for (w, v) in init.iter_mut().enumerate() {
            let words: [i32; LANES] = std::array::from_fn(|i| states.get(i).map_or(0, |s| s[w] as i32));
            // SAFETY: `words` holds 16 i32s, one 512-bit load.
            *v = unsafe { _mm512_loadu_si512(words.as_ptr().cast()) };
        }
        let [mut a0, mut b0, mut c0, mut d0] = init;
        for block in 0..blocks {
            let at = (block * BLOCK_BYTES) as i64;
            let (lo, hi) = (_mm512_add_epi64(lo, _mm512_set1_epi64(at)), _mm512_add_epi64(hi, _mm512_set1_epi64(at)));
            let mut m = [_mm512_setzero_si512(); 16];
            for (w, mw) in m.iter_mut().enumerate() {
                // SAFETY: each lane's address is its buffer plus `at + 4 w`, inside its first
                // `blocks * 64` bytes.
                let p = unsafe { base.add(4 * w) }.cast::<i32>();
                let l = unsafe { _mm512_i64gather_epi32::<1>(lo, p) };
                let h = unsafe { _mm512_i64gather_epi32::<1>(hi, p) };
                *mw = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(l), h);
            }
            let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
            for step in 0..64 {
                let f = match step / 16 {
                    0 => _mm512_ternarylogic_epi32::<0xCA>(b, c, d),
                    1 => _mm512_ternarylogic_epi32::<0xE4>(b, c, d),
                    2 => _mm512_ternarylogic_epi32::<0x96>(b, c, d),
                    _ => _mm512_ternarylogic_epi32::<0x39>(b, c, d),
                };
                let k = _mm512_add_epi32(_mm512_set1_epi32(K[step] as i32), m[word_of(step)]);
                let sum = _mm512_add_epi32(_mm512_add_epi32(a, f), k);
                let rotated = _mm512_rolv_epi32(sum, _mm512_set1_epi32(S[step] as i32));
                (a, d, c) = (d, c, b);
                b = _mm512_add_epi32(b, rotated);
            }
            (a0, b0, c0, d0) =
                (_mm512_add_epi32(a0, a), _mm512_add_epi32(b0, b), _mm512_add_epi32(c0, c), _mm512_add_epi32(d0, d));
        }
        let mut out = [[0i32; LANES]; 4];
        for (o, v) in out.iter_mut().zip([a0, b0, c0, d0]) {
            // SAFETY: `o` holds 16 i32s, one 512-bit store.
            unsafe { _mm512_storeu_si512(o.as_mut_ptr().cast(), v) };
        }
        for (i, s) in states.iter_mut().enumerate() {
            *s = [out[0][i] as u32, out[1][i] as u32, out[2][i] as u32, out[3][i] as u32];
        }
    }

    /// AVX2: up to 8 streams, `blocks` blocks each.
    ///
    /// # Safety
    /// The CPU supports AVX2, and every `data[i]` holds at least `blocks * 64` bytes.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn lanes8(states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
        const LANES: usize = 8;
        debug_assert!(!data.is_empty() && data.len() <= LANES && states.len() == data.len());
        debug_assert!(data.iter().all(|d| d.len() >= blocks * BLOCK_BYTES));
        let base = data[0].as_ptr();
        let offset = |i: usize| (data.get(i).unwrap_or(&data[0]).as_ptr() as i64).wrapping_sub(base as i64);
        let lo = _mm256_set_epi64x(offset(3), offset(2), offset(1), offset(0));
        let hi = _mm256_set_epi64x(offset(7), offset(6), offset(5), offset(4));
        let mut init = [_mm256_setzero_si256(); 4];
        for (w, v) in init.iter_mut().enumerate() {
            let words: [i32; LANES] = std::array::from_fn(|i| states.get(i).map_or(0, |s| s[w] as i32));
            // SAFETY: `words` holds 8 i32s, one 256-bit load.
            *v = unsafe { _mm256_loadu_si256(words.as_ptr().cast()) };
        }
        let [mut a0, mut b0, mut c0, mut d0] = init;
        let ones = _mm256_set1_epi32(-1);
        for block in 0..blocks {
            let at = (block * BLOCK_BYTES) as i64;
            let (lo, hi) = (_mm256_add_epi64(lo, _mm256_set1_epi64x(at)), _mm256_add_epi64(hi, _mm256_set1_epi64x(at)));
            let mut m = [_mm256_setzero_si256(); 16];
            for (w, mw) in m.iter_mut().enumerate() {
                // SAFETY: each lane's address is its buffer plus `at + 4 w`, inside its first
                // `blocks * 64` bytes.
                let p = unsafe { base.add(4 * w) }.cast::<i32>();
                let l = unsafe { _mm256_i64gather_epi32::<1>(p, lo) };
                let h = unsafe { _mm256_i64gather_epi32::<1>(p, hi) };
                *mw = _mm256_set_m128i(h, l);
            }
            let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
            for step in 0..64 {
                let f = match step / 16 {
                    0 => _mm256_or_si256(_mm256_and_si256(b, c), _mm256_andnot_si256(b, d)),
                    1 => _mm256_or_si256(_mm256_and_si256(b, d), _mm256_andnot_si256(d, c)),
                    2 => _mm256_xor_si256(_mm256_xor_si256(b, c), d),
                    _ => _mm256_xor_si256(c, _mm256_or_si256(b, _mm256_xor_si256(d, ones))),
                };
                let k = _mm256_add_epi32(_mm256_set1_epi32(K[step] as i32), m[word_of(step)]);
                let sum = _mm256_add_epi32(_mm256_add_epi32(a, f), k);
                let left = _mm256_sllv_epi32(sum, _mm256_set1_epi32(S[step] as i32));
                let right = _mm256_srlv_epi32(sum, _mm256_set1_epi32(32 - S[step] as i32));
                (a, d, c) = (d, c, b);
                b = _mm256_add_epi32(b, _mm256_or_si256(left, right));
            }
            (a0, b0, c0, d0) =
                (_mm256_add_epi32(a0, a), _mm256_add_epi32(b0, b), _mm256_add_epi32(c0, c), _mm256_add_epi32(d0, d));
        }
        let mut out = [[0i32; LANES]; 4];
        for (o, v) in out.iter_mut().zip([a0, b0, c0, d0]) {
            // SAFETY: `o` holds 8 i32s, one 256-bit store.
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), v) };
        }
        for (i, s) in states.iter_mut().enumerate() {
            *s = [out[0][i] as u32, out[1][i] as u32, out[2][i] as u32, out[3][i] as u32];
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use md5::Digest;

    use super::*;

    /// `len` pseudo-random bytes from `seed` (xorshift), for the tests of both modules.
    pub(crate) fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn digest_of(data: &[u8]) -> [u8; 16] {
        let whole = data.len() / BLOCK_BYTES * BLOCK_BYTES;
        let mut state = INIT;
        compress(&mut state, &data[..whole]);
        finish(state, &data[whole..], data.len() as u64)
    }

    #[test]
    fn one_stream_matches_the_md5_crate_at_every_length_around_the_padding() {
        for len in (0..300).chain([4096, 65_535, 65_536, 1 << 20]) {
            let data = bytes(len, len as u64);
            assert_eq!(digest_of(&data), <[u8; 16]>::from(md5::Md5::digest(&data)), "{len} bytes");
        }
        // RFC 1321's own test suite.
        assert_eq!(crate::text::hex(&digest_of(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(crate::text::hex(&digest_of(b"message digest")), "f96b697d7cb7938d525a2f31aaf161d0");
    }

    /// Every lane count (more than one register's worth too), each lane its own buffer, against
    /// the one-stream function, on the widest kernel this machine has and on AVX2 directly.
    #[test]
    fn lanes_advance_each_stream_as_the_one_stream_function_does() {
        for streams in [1, 2, 3, 7, 8, 9, 15, 16, 17, 33] {
            for blocks in [1, 2, 5] {
                let data: Vec<Vec<u8>> =
                    (0..streams).map(|i| bytes(blocks * BLOCK_BYTES, (streams * 100 + i) as u64)).collect();
                let slices: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                let start: Vec<[u32; 4]> =
                    (0..streams as u32).map(|i| [INIT[0] ^ i, INIT[1], INIT[2].rotate_left(i), INIT[3]]).collect();
                let expected: Vec<[u32; 4]> = start
                    .iter()
                    .zip(&slices)
                    .map(|(s, d)| {
                        let mut s = *s;
                        compress(&mut s, d);
                        s
                    })
                    .collect();
                let mut got = start.clone();
                compress_lanes(&mut got, &slices);
                assert_eq!(got, expected, "{streams} streams of {blocks} blocks (widest kernel)");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    let mut got = start.clone();
                    for (s, d) in got.chunks_mut(8).zip(slices.chunks(8)) {
                        // SAFETY: AVX2 was detected; every slice holds `blocks` blocks.
                        unsafe { x86::lanes8(s, d, blocks) };
                    }
                    assert_eq!(got, expected, "{streams} streams of {blocks} blocks (AVX2)");
                }
            }
        }
    }
}
