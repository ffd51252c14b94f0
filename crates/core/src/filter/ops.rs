//! The value tests behind the richer operators: `wildcard` globs, `cidr` blocks, `numeric`
//! ranges and case-insensitive comparison. Each operand is checked and compiled here once;
//! matching then allocates nothing.

use std::net::IpAddr;

use serde_json::Value;

/// A `wildcard` operand split at its unescaped stars: `"a*b*"` is `["a", "b", ""]`.
#[derive(Debug, Clone)]
pub(super) struct Wildcard {
    /// Literal pieces; there is always at least one, and one more than there are stars.
    parts: Vec<String>,
}

impl Wildcard {
    /// Compiles `*` (any run of characters, possibly empty), `\*` (a literal star) and
    /// `\\` (a literal backslash); `**` and any other escape are refused.
    pub(super) fn parse(text: &str) -> Result<Wildcard, String> {
        let mut parts = Vec::new();
        let mut current = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(escaped @ ('*' | '\\')) => current.push(escaped),
                    _ => return Err("in a wildcard, a backslash must be followed by * or \\".to_owned()),
                },
                '*' if chars.peek() == Some(&'*') => {
                    return Err("consecutive wildcard characters (**) are not allowed".to_owned())
                }
                '*' => parts.push(std::mem::take(&mut current)),
                other => current.push(other),
            }
        }
        parts.push(current);
        Ok(Wildcard { parts })
    }

    /// Whether `value` is the pattern with each star replaced by some run of characters.
    pub(super) fn matches(&self, value: &str) -> bool {
        let Some((first, rest)) = self.parts.split_first() else { return false };
        let Some(after_first) = value.strip_prefix(first.as_str()) else { return false };
        let Some((last, middle)) = rest.split_last() else { return after_first.is_empty() };
        // Taking the last piece off the end before the middle ones keeps the pieces from
        // overlapping; the middle ones then match greedily from the left, which is enough
        // when the only metacharacter is `*`.
        let Some(mut inner) = after_first.strip_suffix(last.as_str()) else { return false };
        for part in middle {
            match inner.find(part.as_str()) {
                Some(at) => inner = &inner[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A `cidr` operand: a network of either family, its host bits cleared.
#[derive(Debug, Clone)]
pub(super) enum Cidr {
    /// Network bits and mask of an IPv4 block.
    V4 { network: u32, mask: u32 },
    /// Network bits and mask of an IPv6 block.
    V6 { network: u128, mask: u128 },
}

impl Cidr {
    /// Parses `address/length`, such as `10.0.0.0/24` or `2001:db8::/32`.
    pub(super) fn parse(text: &str) -> Result<Cidr, String> {
        let invalid = || format!("cidr needs an address/prefix-length such as 10.0.0.0/24, got {text:?}");
        let (address, length) = text.split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let length: u32 = length.parse().map_err(|_| invalid())?;
        match address {
            IpAddr::V4(v4) if length <= 32 => {
                let mask = u32::MAX.checked_shl(32 - length).unwrap_or(0);
                Ok(Cidr::V4 { network: u32::from(v4) & mask, mask })
            }
            IpAddr::V6(v6) if length <= 128 => {
                let mask = u128::MAX.checked_shl(128 - length).unwrap_or(0);
                Ok(Cidr::V6 { network: u128::from(v6) & mask, mask })
            }
            _ => Err(format!("cidr prefix length {length} is too long for {address}")),
        }
    }

    /// Whether `value` is an address of the same family inside the block.
    pub(super) fn contains(&self, value: &str) -> bool {
        match (self, value.parse::<IpAddr>()) {
            (Cidr::V4 { network, mask }, Ok(IpAddr::V4(ip))) => u32::from(ip) & mask == *network,
            (Cidr::V6 { network, mask }, Ok(IpAddr::V6(ip))) => u128::from(ip) & mask == *network,
            _ => false,
        }
    }
}

/// One end of a numeric range.
#[derive(Debug, Clone, Copy)]
struct Bound {
    value: f64,
    inclusive: bool,
}

/// A `numeric` operand: an optional lower and an optional upper bound.
#[derive(Debug, Clone)]
pub(super) struct Range {
    lower: Option<Bound>,
    upper: Option<Bound>,
}

/// What one comparison of a `numeric` operand bounds.
enum Side {
    Lower(Bound),
    Upper(Bound),
    Exactly(f64),
}

const NUMERIC_SHAPE: &str =
    r#"numeric needs [op, number] or [">" or ">=", number, "<" or "<=", number], where op is one of = < <= > >="#;

impl Range {
    /// Parses `["=", n]`, `[op, n]` or `[lower-op, n, upper-op, m]`, lower bound first.
    pub(super) fn parse(operand: &Value) -> Result<Range, String> {
        let items = operand.as_array().ok_or_else(|| NUMERIC_SHAPE.to_owned())?;
        let range = match items.as_slice() {
            [op, bound] => match comparison(op, bound)? {
                Side::Lower(b) => Range { lower: Some(b), upper: None },
                Side::Upper(b) => Range { lower: None, upper: Some(b) },
                Side::Exactly(value) => {
                    let b = Bound { value, inclusive: true };
                    Range { lower: Some(b), upper: Some(b) }
                }
            },
            [op1, bound1, op2, bound2] => match (comparison(op1, bound1)?, comparison(op2, bound2)?) {
                (Side::Lower(lower), Side::Upper(upper)) => Range { lower: Some(lower), upper: Some(upper) },
                _ => return Err(format!("{NUMERIC_SHAPE}; with two comparisons the lower bound comes first")),
            },
            _ => return Err(NUMERIC_SHAPE.to_owned()),
        };
        if let (Some(lower), Some(upper)) = (range.lower, range.upper) {
            let empty =
                lower.value > upper.value || (lower.value == upper.value && !(lower.inclusive && upper.inclusive));
            if empty {
                return Err(format!("numeric range from {} to {} is empty", lower.value, upper.value));
            }
        }
        Ok(range)
    }

    /// Whether `n` lies within both bounds.
    pub(super) fn contains(&self, n: f64) -> bool {
        let above = |b: &Bound| if b.inclusive { n >= b.value } else { n > b.value };
        let below = |b: &Bound| if b.inclusive { n <= b.value } else { n < b.value };
        self.lower.as_ref().is_none_or(above) && self.upper.as_ref().is_none_or(below)
    }
}

/// One `op, number` pair of a `numeric` operand.
fn comparison(op: &Value, bound: &Value) -> Result<Side, String> {
    let Some(value) = bound.as_f64() else {
        return Err(format!("numeric bounds must be numbers, got {bound}"));
    };
    let side = match op.as_str() {
        Some(">") => Side::Lower(Bound { value, inclusive: false }),
        Some(">=") => Side::Lower(Bound { value, inclusive: true }),
        Some("<") => Side::Upper(Bound { value, inclusive: false }),
        Some("<=") => Side::Upper(Bound { value, inclusive: true }),
        Some("=") => Side::Exactly(value),
        _ => return Err(format!("unknown numeric operator {op}; use one of = < <= > >=")),
    };
    Ok(side)
}

/// `text` in lower case, character by character, as the `*_folded` tests expect it.
pub(super) fn fold(text: &str) -> String {
    text.chars().flat_map(char::to_lowercase).collect()
}

/// Whether `value` equals `folded` ignoring case.
pub(super) fn eq_folded(value: &str, folded: &str) -> bool {
    value.chars().flat_map(char::to_lowercase).eq(folded.chars())
}

/// Whether `value` starts with `folded` ignoring case.
pub(super) fn starts_with_folded(value: &str, folded: &str) -> bool {
    let mut lowered = value.chars().flat_map(char::to_lowercase);
    folded.chars().all(|c| lowered.next() == Some(c))
}

/// Whether `value` ends with `folded` ignoring case.
pub(super) fn ends_with_folded(value: &str, folded: &str) -> bool {
    let mut lowered = value.chars().flat_map(char::to_lowercase).rev();
    folded.chars().rev().all(|c| lowered.next() == Some(c))
}
