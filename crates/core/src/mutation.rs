//! Test-only switches, each skipping one safety check of the core, so that the simulation
//! can show that it catches the skip (a mutation test: a checker that finds nothing wrong
//! with a core missing its fence is a checker that cannot fail).
//!
//! The switches exist only with the `sim-mutations` feature, which only sluice-sim's
//! dev-dependency turns on (its `tests/quiet.rs` checks that no other manifest does); even
//! then each is off until a test turns it on, for its own thread only. Without the feature,
//! `skipped` is a constant `false` and the checks behind it are the product's, unchanged.

/// A safety check a test may skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// `Groups::commit` accepts a commit of a stale generation (its fence skipped).
    CommitGenerationFence,
}

#[cfg(feature = "sim-mutations")]
thread_local! {
    static SKIPPED: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// Skips `mutation`'s check on this thread from now on (`None`: skips nothing).
#[cfg(feature = "sim-mutations")]
pub fn skip(mutation: Option<Mutation>) {
    SKIPPED.with(|s| s.set(mutation));
}

/// Whether a test skips `mutation`'s check on this thread.
#[inline]
pub(crate) fn skipped(mutation: Mutation) -> bool {
    #[cfg(feature = "sim-mutations")]
    return SKIPPED.with(|s| s.get() == Some(mutation));
    #[cfg(not(feature = "sim-mutations"))]
    {
        let _ = mutation;
        false
    }
}
