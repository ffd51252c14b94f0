//! The two ports every backend implements: a transactional state store
//! ([`state::StateStore`]) and a blob store ([`objects::ObjectStore`]), with
//! the store helpers every capability shares; and the push port
//! ([`deliver::Deliver`]) a dispatcher sends through.

pub mod deliver;
pub(crate) mod drain;
pub mod objects;
pub mod state;
