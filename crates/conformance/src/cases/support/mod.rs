//! Helpers the cases of several capabilities share: scripted storage faults, a watched
//! clock, and the group and queue helpers. Nothing here imports a case.

pub mod clock;
pub mod entries;
pub mod faults;
pub mod groups;
pub mod queues;
pub mod race;
