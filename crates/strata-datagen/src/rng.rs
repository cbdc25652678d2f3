//! The random source of every generator, and the skewed (Zipf-like) draws built on it.
//!
//! Output must be byte-identical for the same seed forever, so the generator does not lean on
//! `rand`'s `SmallRng` (documented as free to change algorithm between releases) nor on `rand`'s
//! range-sampling algorithms (value-breaking between minor versions). xoshiro256++ seeded through
//! splitmix64 and a multiply-shift range reduction are written out here instead; both are a few
//! lines and fully specified.

/// splitmix64's finaliser: a bijective 64-bit mix, also used to derive stable per-entity values
/// (a user's DID, a post's CID) from an id without consuming the stream.
pub fn mix64(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN))
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn finalize(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A uniform value in `[0, 1)` derived from `x` (53 random bits).
pub fn unit_of(x: u64) -> f64 {
    (mix64(x) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// xoshiro256++.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(GOLDEN);
            finalize(state)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (`n > 0`). Multiply-shift without rejection: the bias is below 2^-40 for
    /// every range used here, and skipping rejection keeps one draw per call (simpler to reason
    /// about determinism).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..hi` (`lo < hi`).
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    #[inline]
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    #[inline]
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `percent / 100`.
    #[inline]
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// True with probability `n / 1_000_000`.
    #[inline]
    pub fn per_million(&mut self, n: u64) -> bool {
        self.below(1_000_000) < n
    }
}

/// A discrete power law over ranks `0..population`: P(rank = k) ∝ (k + offset)^-exponent,
/// sampled by inverting the continuous CDF. The offset flattens the head (no single user owns
/// several percent of a stream) while the exponent sets how fast distinct ranks accumulate.
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    offset: f64,
    base: f64,
    span: f64,
    inverse: f64,
    log_ratio: f64,
    population: u64,
}

impl Zipf {
    pub fn new(population: u64, exponent: f64, offset: f64) -> Self {
        let population = population.max(1);
        let top = population as f64 + offset;
        let one_minus_s = 1.0 - exponent;
        let (base, span, inverse) = if one_minus_s.abs() < 1e-9 {
            (0.0, 0.0, 0.0)
        } else {
            let base = offset.powf(one_minus_s);
            (base, top.powf(one_minus_s) - base, 1.0 / one_minus_s)
        };
        Zipf {
            offset,
            base,
            span,
            inverse,
            log_ratio: (top / offset).ln(),
            population,
        }
    }

    /// The rank at quantile `u` in `[0, 1)`.
    #[inline]
    pub fn at(&self, u: f64) -> u64 {
        let x = if self.span == 0.0 {
            self.offset * (u * self.log_ratio).exp() - self.offset
        } else {
            (self.base + u * self.span).powf(self.inverse) - self.offset
        };
        // `as` saturates (NaN -> 0), and the min keeps rounding at u -> 1 inside the population.
        (x.max(0.0) as u64).min(self.population - 1)
    }

    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        self.at(rng.unit())
    }
}

/// A bijection on `0..2^bits`: lets ids be scattered over a realistic range while staying unique.
pub fn permute(x: u64, bits: u32) -> u64 {
    let mask = (1u64 << bits) - 1;
    let mut v = x & mask;
    for round in 0..3u64 {
        v = v
            .wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1)
            .wrapping_add(round)
            & mask;
        v ^= v >> (bits / 2 + 1);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_xoshiro256plusplus() {
        // rand's SmallRng is xoshiro256++ seeded through splitmix64 on 64-bit targets: the same
        // algorithm, so the two streams must agree.
        use rand::{RngCore, SeedableRng};
        for seed in [0, 1, 42, u64::MAX] {
            let mut ours = Rng::new(seed);
            let mut reference = rand::rngs::SmallRng::seed_from_u64(seed);
            for _ in 0..100 {
                assert_eq!(ours.next_u64(), reference.next_u64());
            }
        }
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let v = rng.below(10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn zipf_is_skewed_and_bounded() {
        let zipf = Zipf::new(1_000_000, 1.1, 20.0);
        let mut rng = Rng::new(3);
        let mut low = 0;
        for _ in 0..10_000 {
            let r = zipf.sample(&mut rng);
            assert!(r < 1_000_000);
            if r < 1000 {
                low += 1;
            }
        }
        // The first 0.1% of ranks receive far more than 0.1% of draws.
        assert!(low > 2_000, "{low}");
        assert_eq!(Zipf::new(10, 1.0, 1.0).at(0.999_999_999), 9);
    }

    #[test]
    fn permute_is_a_bijection() {
        let mut seen = vec![false; 1 << 12];
        for x in 0..(1u64 << 12) {
            let y = permute(x, 12) as usize;
            assert!(!seen[y]);
            seen[y] = true;
        }
    }
}
