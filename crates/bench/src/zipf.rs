//! A skewed pick from a pool: ranks 1..=n drawn with probability proportional to 1/k^s (Zipf),
//! so a few hot keys get most requests, as in real traffic. O(1) per draw and no table, by
//! rejection-inversion sampling (Hörmann and Derflinger, 1996): invert the integral of the
//! density x^-s, then accept or reject against the exact probability of the rounded rank.

/// A Zipf distribution over 1..=n with exponent s > 0.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

impl Zipf {
    /// The distribution over 1..=n (n >= 1) with exponent `s` (> 0; 1.0 is classic Zipf).
    pub fn new(n: u64, s: f64) -> Result<Self, String> {
        if n == 0 {
            return Err("a zipf pool needs at least one value".into());
        }
        if !(s > 0.0 && s.is_finite()) {
            return Err(format!("zipf exponent {s} must be a positive number"));
        }
        let mut z = Self {
            n: n as f64,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(z.n + 0.5);
        z.threshold = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        Ok(z)
    }

    /// The density x^-s.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// An antiderivative of the density: (x^(1-s) - 1) / (1-s), or ln x when s = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// Draws a rank in 1..=n; `u` gives uniform numbers in [0, 1).
    pub fn sample(&self, mut u: impl FnMut() -> f64) -> u64 {
        loop {
            let v = self.h_n + u() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(v);
            let k = x.round().clamp(1.0, self.n);
            if k - x <= self.threshold || v >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// ln(1+x)/x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1)/x, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frequencies(n: u64, s: f64, draws: usize) -> Vec<f64> {
        let z = Zipf::new(n, s).unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut counts = vec![0usize; n as usize + 1];
        for _ in 0..draws {
            let k = z.sample(|| rng.f64());
            assert!((1..=n).contains(&k));
            counts[k as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    #[test]
    fn matches_the_exact_probabilities() {
        for s in [0.5, 1.0, 1.2, 2.0] {
            let n = 50u64;
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
            let f = frequencies(n, s, 400_000);
            for k in [1u64, 2, 3, 10, 50] {
                let p = (k as f64).powf(-s) / norm;
                let tol = 4.0 * (p * (1.0 - p) / 400_000.0).sqrt() + 1e-4;
                assert!(
                    (f[k as usize] - p).abs() < tol,
                    "s={s} k={k}: got {} want {p}",
                    f[k as usize]
                );
            }
        }
    }

    #[test]
    fn single_value_and_bad_parameters() {
        let z = Zipf::new(1, 1.0).unwrap();
        assert_eq!(z.sample(|| 0.3), 1);
        assert!(Zipf::new(0, 1.0).is_err());
        assert!(Zipf::new(10, 0.0).is_err());
        assert!(Zipf::new(10, f64::NAN).is_err());
    }
}
