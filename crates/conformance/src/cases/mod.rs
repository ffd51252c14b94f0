//! The conformance cases, a folder per capability (log, groups, queues, push, retention, and
//! the lost-answer faults that cross them), each with its suite's macro; `support` holds the
//! helpers several of them share, and imports none of them.

pub mod faults;
pub mod groups;
pub mod log;
pub mod push;
pub mod queues;
pub mod retention;
pub mod support;
