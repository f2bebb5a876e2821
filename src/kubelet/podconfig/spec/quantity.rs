//! Kubernetes resource quantities ("500m", "1.5Gi", "2e3"), parsed exactly enough for what the
//! kubelet derives from them: integer values and milli-values, both rounded up.

use std::fmt;
use std::str::FromStr;

/// A parsed quantity, held in nano-units (rounded up) so milli and whole values are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    nanos: i128,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

/// More significant digits than this cannot matter for a resource value and could overflow.
const MAX_DIGITS: usize = 24;
const NANOS_PER_UNIT: i128 = 1_000_000_000;

impl Quantity {
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: i128::from(units) * NANOS_PER_UNIT,
        }
    }

    pub fn from_millis(millis: i64) -> Self {
        Quantity {
            nanos: i128::from(millis) * 1_000_000,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The value in whole units, rounded up (as `resource.Quantity.Value()`), saturating.
    pub fn value(&self) -> i64 {
        saturate(div_ceil(self.nanos, NANOS_PER_UNIT))
    }

    /// The value in thousandths, rounded up (as `resource.Quantity.MilliValue()`), saturating.
    pub fn milli_value(&self) -> i64 {
        saturate(div_ceil(self.nanos, 1_000_000))
    }

    /// Parses an optional API quantity; `None` and empty strings are zero.
    pub fn parse_opt(
        q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    ) -> Result<Quantity, QuantityError> {
        match q {
            Some(q) if !q.0.trim().is_empty() => q.0.parse(),
            _ => Ok(Quantity::default()),
        }
    }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Ceiling division for a positive divisor.
fn div_ceil(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % 1_000_000 != 0 {
            write!(f, "{}n", self.nanos)
        } else if self.nanos % NANOS_PER_UNIT != 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}", self.nanos / NANOS_PER_UNIT)
        }
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            Some(_) => (false, s),
            None => return Err(err("empty")),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') {
            return Err(err("more than one decimal point"));
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("no digits"));
        }
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err(err("too many digits"));
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err("bad digits"))?
        };
        let frac_len = i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;
        // value = mantissa * 2^binary_exp * 10^(decimal_exp - frac_len)
        let (binary_exp, decimal_exp) =
            parse_suffix(suffix).ok_or_else(|| err("unknown suffix"))?;
        let overflow = || err("value out of range");
        let mut scaled = mantissa
            .checked_mul(1i128.checked_shl(binary_exp).ok_or_else(overflow)?)
            .ok_or_else(overflow)?;
        // to nano-units: multiply by 10^(decimal_exp - frac_len + 9)
        let exp10 = decimal_exp - frac_len + 9;
        if exp10 >= 0 {
            let factor = 10i128
                .checked_pow(u32::try_from(exp10).map_err(|_| overflow())?)
                .ok_or_else(overflow)?;
            scaled = scaled.checked_mul(factor).ok_or_else(overflow)?;
        } else {
            let divisor = 10i128
                .checked_pow(exp10.unsigned_abs())
                .ok_or_else(overflow)?;
            scaled = div_ceil(scaled, divisor);
        }
        Ok(Quantity {
            nanos: if negative { -scaled } else { scaled },
        })
    }
}

/// `(binary exponent, decimal exponent)` of a suffix.
fn parse_suffix(suffix: &str) -> Option<(u32, i32)> {
    let found = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let valid = !exp.is_empty()
                && exp
                    .trim_start_matches(['+', '-'])
                    .bytes()
                    .all(|b| b.is_ascii_digit());
            if !valid {
                return None;
            }
            let exp: i32 = exp.parse().ok()?;
            if !(-30..=30).contains(&exp) {
                return None;
            }
            (0, exp)
        }
    };
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_api() {
        let cases: &[(&str, i64, i64)] = &[
            // input, value(), milli_value()
            ("1", 1, 1000),
            ("500m", 1, 500),
            ("0.5", 1, 500),
            (".5", 1, 500),
            ("1.", 1, 1000),
            ("250m", 1, 250),
            ("1001m", 2, 1001),
            ("1k", 1000, 1_000_000),
            ("1Ki", 1024, 1_024_000),
            ("128Mi", 134_217_728, 134_217_728_000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("2e3", 2000, 2_000_000),
            ("2E-3", 1, 2),
            ("1n", 1, 1),
            ("100u", 1, 1),
            ("0", 0, 0),
            ("+3", 3, 3000),
            ("-1", -1, -1000),
            ("00012", 12, 12000),
        ];
        for (input, value, milli) in cases {
            let q: Quantity = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.value(), *value, "value of {input}");
            assert_eq!(q.milli_value(), *milli, "milli of {input}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for input in [
            "", "abc", "1.2.3", "1Qi", "1e", "1e+", "--1", "1 Gi", "1e99", "m",
        ] {
            assert!(input.parse::<Quantity>().is_err(), "{input:?} accepted");
        }
        let huge = "9".repeat(40);
        assert!(huge.parse::<Quantity>().is_err());
    }

    #[test]
    fn saturates_instead_of_wrapping() {
        let q: Quantity = "9000Ei".parse().expect("fits in nanos");
        assert_eq!(q.value(), i64::MAX);
    }

    #[test]
    fn displays_compactly() {
        assert_eq!(Quantity::from_millis(1500).to_string(), "1500m");
        assert_eq!(Quantity::from_units(3).to_string(), "3");
    }
}
