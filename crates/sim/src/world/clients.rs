//! The logical clients, what each holds between its operations, and the processes they talk to.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::groups::Groups;
use sluice_core::groups::TopicPartition;
use sluice_core::push::Dispatcher;
use sluice_core::queues::Queues;
use sluice_core::upkeep::Janitor;
use sluice_core::Log;

use crate::fault::Life;

/// `count` is only read where the trace prints a held message (through `Debug`).
#[allow(dead_code)]
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) receipt: String,
    pub(crate) sub_id: u64,
    pub(crate) partition: u32,
    pub(crate) offset: u64,
    pub(crate) nonce: u64,
    pub(crate) count: u32,
}

pub(crate) enum Kind {
    Publisher {
        topic: &'static str,
        style: u8,
        retry: Option<u64>,
    },
    Replayer {
        topic: &'static str,
        cursors: Vec<u64>,
    },
    Lookup {
        topic: &'static str,
    },
    Janitor,
    Member(Member),
    GroupAdmin,
    Worker {
        sub: &'static str,
        holding: Vec<Held>,
        slow: bool,
    },
    QueueAdmin,
    /// Changes, pauses, resumes, seeks and purges SUB_QO (`ops/subops.rs`).
    Operator,
    TopicAdmin,
    /// A push dispatcher's worker on one push subscription.
    Pusher {
        sub: &'static str,
    },
}

#[derive(Default)]
pub(crate) struct Member {
    pub(crate) id: Option<String>,
    pub(crate) generation: u64,
    pub(crate) assignment: Vec<TopicPartition>,
    pub(crate) delivered_max: BTreeMap<u32, u64>,
    pub(crate) session: u64,
    pub(crate) auto: bool,
    /// Sends its fetch positions with each poll (a client that keeps none skips a lost answer's events).
    pub(crate) keeps_positions: bool,
    /// Its stable name (Kafka's `group.instance.id`), if it has one.
    pub(crate) instance: Option<String>,
    /// The latest clock time a heartbeat of this member may have been written at.
    pub(crate) last_poll_end_ms: i64,
}

pub(crate) struct Client {
    pub(crate) kind: Kind,
    pub(crate) busy: bool,
    /// The process it talks to (a client retries elsewhere when its process crashed).
    pub(crate) pid: usize,
}

pub(crate) struct Process {
    pub(crate) life: Arc<Life>,
    pub(crate) log: Log,
    pub(crate) groups: Groups,
    pub(crate) queues: Queues,
    pub(crate) janitor: Janitor,
    pub(crate) dispatcher: Dispatcher,
}
