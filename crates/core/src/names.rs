//! Names of topics, groups and subscriptions: `[A-Za-z0-9._-]{1,249}`, as in Kafka.

use crate::Code;
use crate::Error;

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 249;

/// Checks a topic, group or subscription name; `kind` says which in the error.
pub fn validate(kind: &'static str, name: &str) -> Result<(), Error> {
    let valid_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > MAX_NAME_LEN || !valid_chars || name == "." || name == ".." {
        return Err(Error::invalid(
            Code::InvalidName,
            format!("{kind} name must match [A-Za-z0-9._-]{{1,249}} and not be '.' or '..'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kafka_style_names() {
        for name in ["orders", "a", "x.y_z-1", &"n".repeat(249)] {
            assert!(validate("topic", name).is_ok(), "{name}");
        }
    }

    #[test]
    fn refuses_empty_long_dotted_and_odd_characters() {
        for name in ["", ".", "..", "a/b", "a b", "ü", &"n".repeat(250)] {
            assert!(validate("topic", name).is_err(), "{name}");
        }
    }
}
