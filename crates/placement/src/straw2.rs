//! Weighted straw2 selection.
//!
//! To choose one item among weighted candidates for a given input `x` and draw index `r`, every
//! candidate draws a straw `ln(u) / weight`, where `u` in (0, 1] is a hash of `(x, item, r)`,
//! and the longest straw (the largest, i.e. closest to zero, since `ln(u) <= 0`) wins. The straw
//! `-ln(u) / weight` is exponentially distributed with rate `weight`, and the minimum of
//! independent exponentials falls on item `i` with probability `weight_i / sum(weights)`: the
//! choice is exactly proportional to weight. Each candidate's straw depends only on its own
//! hash and weight, so adding an item, removing one or changing one item's weight only moves
//! choices to or from that item: the minimal movement that Ceph's straw2 is known for.
//!
//! The logarithm is computed in integer fixed point, not with `f64::ln`. IEEE-754 does not
//! require `ln` to be correctly rounded, and libm implementations (glibc, musl, macOS, Windows)
//! do differ in the last bit for some inputs; two clients disagreeing on one bit could disagree
//! on a winner, and so on where a PG lives. Ceph solves this with a fixed-point table too. Here
//! [`log2_q48`] computes `log2` with 48 fractional bits from a 1025-entry table of
//! `log2(1 + i/1024)` (itself computed at compile time with integer arithmetic only) and linear
//! interpolation between entries. The interpolation error is at most
//! `h^2/8 * max|f''| = 2^-20 / 8 * 1.443 ≈ 1.7e-7` (in log2 units), far below sampling noise,
//! and the result is monotone in the input, so the draw order is never inverted by more than
//! that error. Using `log2` instead of `ln` scales every straw by the same constant, which does
//! not change the winner. Straws are compared exactly, without division: `a.log / a.weight >
//! b.log / b.weight` is evaluated as `a.log * b.weight > b.log * a.weight` in 128-bit integers.
//! Exact ties (astronomically rare) go to the smaller key, so the result never depends on the
//! order of candidates. We use all 64 bits of the hash for `u` (Ceph uses 16), so collisions of
//! straws are negligible.
//!
//! A zero weight never wins (its straw would be minus infinity); such candidates are skipped.

use crate::hash::hash3;

/// Fractional bits of [`log2_q48`]'s result.
pub const LOG2_FRAC_BITS: u32 = 48;

/// The table holds `log2(1 + i / 2^TABLE_BITS)` for `i` in `0..=2^TABLE_BITS`.
const TABLE_BITS: u32 = 10;
const TABLE_LEN: usize = (1 << TABLE_BITS) + 1;
/// Bits of the mantissa's fraction below the table index, used for interpolation.
const INTERP_BITS: u32 = 64 - TABLE_BITS;

/// `log2(1 + i / 1024)` in Q0.48, computed by the classic square-and-compare method on a Q2.62
/// fixed-point mantissa: squaring `y` doubles its logarithm, so after each squaring, `y >= 2`
/// means the next bit of `log2` is one (and `y` is halved). Integer-only, so the table is the
/// same on every machine and every compiler.
const fn build_log2_table() -> [u64; TABLE_LEN] {
    const ONE_Q62: u128 = 1 << 62;
    let mut table = [0u64; TABLE_LEN];
    let mut i = 0;
    while i < TABLE_LEN - 1 {
        let mut y: u128 = ONE_Q62 + ((i as u128) << (62 - TABLE_BITS));
        let mut result: u64 = 0;
        let mut bit = 0;
        while bit < LOG2_FRAC_BITS {
            y = (y * y) >> 62;
            if y >= 2 * ONE_Q62 {
                y >>= 1;
                result |= 1 << (LOG2_FRAC_BITS - 1 - bit);
            }
            bit += 1;
        }
        table[i] = result;
        i += 1;
    }
    // log2(2) = 1 exactly; the loop above would round it down by one unit.
    table[TABLE_LEN - 1] = 1 << LOG2_FRAC_BITS;
    table
}

static LOG2_TABLE: [u64; TABLE_LEN] = build_log2_table();

/// `log2(x)` in Q16.48 fixed point (so at most `63 << 48` plus a fraction). Contract: `x >= 1`;
/// `x = 0` is treated as 1 (result 0). Monotone non-decreasing in `x`; absolute error below
/// 2e-7 (see the module docs).
pub fn log2_q48(x: u64) -> u64 {
    let x = if x == 0 { 1 } else { x };
    let lz = x.leading_zeros();
    let int_part = u64::from(63 - lz);
    // Drop the leading one: the fraction of the mantissa, in Q0.64.
    let frac = (x << lz) << 1;
    let idx = (frac >> INTERP_BITS) as usize;
    let rem = frac & ((1u64 << INTERP_BITS) - 1);
    let lo = LOG2_TABLE[idx];
    let hi = LOG2_TABLE[idx + 1];
    // (hi - lo) * rem / 2^INTERP_BITS < hi - lo, so lo + interp <= hi <= 2^48.
    let interp = ((u128::from(hi - lo) * u128::from(rem)) >> INTERP_BITS) as u64;
    (int_part << LOG2_FRAC_BITS) + lo + interp
}

/// `log2(u)` in Q.48 for `u = (h + 1) / 2^64`, uniform in (0, 1] when `h` is a uniform hash:
/// a value in `[-64 << 48, 0]`.
pub fn unit_log2(h: u64) -> i64 {
    if h == u64::MAX {
        return 0;
    }
    // log2_q48(h + 1) < 64 << 48 < 2^54: both fit in i64.
    log2_q48(h + 1) as i64 - (64i64 << LOG2_FRAC_BITS)
}

/// One candidate's straw: `log / weight`, kept as a fraction and compared exactly.
#[derive(Debug, Clone, Copy)]
struct Straw {
    log: i64,
    weight: u64,
    key: u64,
}

impl Straw {
    /// Whether this straw beats `other`: a larger `log / weight`, or an exact tie and a smaller
    /// key. Both weights are positive.
    fn beats(&self, other: &Straw) -> bool {
        // |log| < 2^55 and weight < 2^64: each product fits in an i128.
        let lhs = i128::from(self.log) * i128::from(other.weight);
        let rhs = i128::from(other.log) * i128::from(self.weight);
        lhs > rhs || (lhs == rhs && self.key < other.key)
    }
}

/// Chooses among `candidates`, given as `(key, weight)` pairs, by straw2 with input `x` and
/// draw index `r`, and returns the winner's index; `None` if no candidate has a positive weight.
/// Keys must be distinct (they identify items in the hash). The result depends only on the set
/// of `(key, weight)` pairs, `x` and `r`, not on their order.
pub fn straw2_choose(candidates: &[(u64, u64)], x: u64, r: u64) -> Option<usize> {
    straw2_choose_by(candidates, |&pair| pair, x, r)
}

/// [`straw2_choose`] over any slice, with `key_weight` giving each item's `(key, weight)`.
pub fn straw2_choose_by<T>(items: &[T], key_weight: impl Fn(&T) -> (u64, u64), x: u64, r: u64) -> Option<usize> {
    // An index loop rather than iterator adaptors: this is the hot loop of placement, and debug
    // builds (where the tests run) do not inline adaptors.
    let mut best: Option<(usize, Straw)> = None;
    let mut i = 0;
    while i < items.len() {
        let (key, weight) = key_weight(&items[i]);
        if weight > 0 {
            let straw = Straw { log: unit_log2(hash3(x, key, r)), weight, key };
            let wins = match &best {
                Some((_, b)) => straw.beats(b),
                None => true,
            };
            if wins {
                best = Some((i, straw));
            }
        }
        i += 1;
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table_matches_float_log2() {
        for (i, &v) in LOG2_TABLE.iter().enumerate() {
            let exact = (1.0 + i as f64 / 1024.0).log2();
            let got = v as f64 / (1u64 << 48) as f64;
            assert!((exact - got).abs() < 1e-12, "entry {i}: {got} vs {exact}");
        }
    }

    #[test]
    fn log2_is_accurate_and_monotone() {
        let mut prev = 0;
        let mut x: u64 = 1;
        // A geometric-ish walk over the whole u64 range, plus neighbours of powers of two.
        for _ in 0..20_000 {
            let got = log2_q48(x) as f64 / (1u64 << 48) as f64;
            assert!((got - (x as f64).log2()).abs() < 2e-7, "x={x}");
            let v = log2_q48(x);
            assert!(v >= prev, "not monotone at {x}");
            prev = v;
            x = x.saturating_add(x / 997 + 1);
        }
        assert_eq!(log2_q48(1), 0);
        assert_eq!(log2_q48(1 << 40), 40 << 48);
        assert_eq!(unit_log2(u64::MAX), 0);
        assert_eq!(unit_log2(0), -64 << 48);
    }

    #[test]
    fn zero_weight_never_wins_and_empty_is_none() {
        assert_eq!(straw2_choose(&[], 1, 2), None);
        assert_eq!(straw2_choose(&[(1, 0), (2, 0)], 1, 2), None);
        for x in 0..2000 {
            assert_eq!(straw2_choose(&[(1, 0), (2, 5), (3, 0)], x, 0), Some(1));
        }
    }

    #[test]
    fn choice_is_proportional_to_weight() {
        let weights = [1u64, 2, 3, 4, 10];
        let total: u64 = weights.iter().sum();
        let mut counts = [0u64; 5];
        let n = 40_000u64;
        let items: Vec<(u64, u64)> = weights.iter().enumerate().map(|(k, &w)| (k as u64, w << 16)).collect();
        for x in 0..n {
            let pick = straw2_choose(&items, x, 7);
            counts[pick.expect("positive weights")] += 1;
        }
        // Chi-square with 4 degrees of freedom: 99.99th percentile is about 23.5.
        let chi2: f64 = weights
            .iter()
            .zip(counts)
            .map(|(&w, c)| {
                let e = n as f64 * w as f64 / total as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum();
        assert!(chi2 < 23.5, "chi2 = {chi2}, counts {counts:?}");
    }

    proptest! {
        /// Adding a candidate only ever moves choices onto the new candidate; changing one
        /// weight only moves choices to or from that candidate.
        #[test]
        fn minimal_movement(
            weights in prop::collection::vec(0u64..1_000_000, 1..12),
            extra in 1u64..1_000_000,
            x in any::<u64>(),
            r in 0u64..4,
        ) {
            let items: Vec<(u64, u64)> = weights.iter().enumerate().map(|(k, &w)| (k as u64, w)).collect();
            let before = straw2_choose(&items, x, r);
            let mut grown = items.clone();
            grown.push((items.len() as u64, extra));
            let after = straw2_choose(&grown, x, r);
            prop_assert!(after == before || after == Some(items.len()));

            let mut changed = items.clone();
            changed[0].1 = extra;
            let after = straw2_choose(&changed, x, r);
            prop_assert!(after == before || after == Some(0) || before == Some(0));
        }

        /// The order of candidates does not matter.
        #[test]
        fn order_independent(weights in prop::collection::vec(1u64..100, 1..10), x in any::<u64>()) {
            let items: Vec<(u64, u64)> = weights.iter().enumerate().map(|(k, &w)| (k as u64 * 3, w)).collect();
            let fwd = straw2_choose(&items, x, 0).map(|i| items[i].0);
            let rev: Vec<(u64, u64)> = items.iter().rev().copied().collect();
            let back = straw2_choose(&rev, x, 0).map(|i| rev[i].0);
            prop_assert_eq!(fwd, back);
        }
    }
}
