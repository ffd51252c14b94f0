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
    /// `push::Dispatcher::deliver` drops the acks of what its target took (they stay held
    /// until their window ends, then go out again).
    PushAck,
    /// `push::Dispatcher::deliver` acks a batch before sending it (not held while its attempt
    /// is under way: the ack lands before the delivery, and a key's next batch may go out
    /// during it).
    PushHoldDuringAttempt,
    /// A take of a key-ordered queue lets a lease still held (not yet due) block its keys no
    /// more: a key's next message goes out while the one before it is in flight.
    KeyedLeaseBlocks,
    /// A take treats a scheduled message (`crate::schedule`) as due at once: delivered before
    /// its time.
    ScheduleIgnored,
    /// A receive takes no tokens from its subscription's rate: as many as it asks for go out.
    RateIgnored,
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
