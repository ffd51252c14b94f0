//! Consumer groups on the wire: the partitions members are assigned.

use serde::{Deserialize, Serialize};

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}
