//! The workloads, one module each, every one yielding a [`Report`](crate::report::Report).
//! `load` (backlog or live publishers) serves the consuming workloads, `group` and `queue`.

pub mod group;
pub mod latency;
mod load;
pub mod produce;
pub mod publish;
pub mod push;
pub mod queue;
pub mod replay;
pub mod work;
