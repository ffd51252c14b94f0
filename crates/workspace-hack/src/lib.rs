//! No code; see Cargo.toml.
