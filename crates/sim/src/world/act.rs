//! An operation as it is started and answered: what a client asked, what came back, and the
//! answer's line in the trace.

use sluice_core::groups::{GroupDescription, PollAnswer, SeekTarget};
use sluice_core::layout::HeadRecord;
use sluice_core::push::Drained;
use sluice_core::queues::{
    DeadLetterPage, Message, ReceiptError, SeekTo, Sought, Subscription, SubscriptionDescription, VisibilityResult,
};
use sluice_core::upkeep::UpkeepReport;
use sluice_core::{Error, Position, ReadBatch, StorageError, TopicConfig};

use std::fmt::Write as _;

use super::Held;
use crate::model::SimPatch;

/// Some fields are only read where the trace prints an operation (through `Debug`).
#[allow(dead_code)]
#[derive(Debug, Clone)]
pub(crate) enum Act {
    Publish {
        topic: &'static str,
        req: u64,
    },
    Read {
        topic: &'static str,
        partition: u32,
        offset: u64,
    },
    Lookup {
        topic: &'static str,
        partition: u32,
        ts: i64,
        head0: HeadRecord,
    },
    Janitor,
    Poll {
        auto_commit: bool,
    },
    Commit {
        generation: u64,
        offsets: Vec<(u32, u64)>,
        member: String,
    },
    Leave {
        member: String,
    },
    Seek {
        target: SeekTarget,
    },
    GDescribe,
    GDelete,
    Receive {
        sub: &'static str,
        visibility: u64,
    },
    Settle {
        sub: &'static str,
        how: SettleHow,
        held: Vec<Held>,
    },
    /// Acks of `held` riding on a receive (`ack_and_receive`).
    AckNext {
        sub: &'static str,
        visibility: u64,
        held: Vec<Held>,
    },
    QDescribe {
        sub: &'static str,
    },
    Redrive {
        sub: &'static str,
    },
    DeadLetters {
        sub: &'static str,
    },
    DlqPurge {
        sub: &'static str,
    },
    DlqDelete {
        sub: &'static str,
        partition: u32,
        offset: u64,
    },
    SubDelete {
        sub: &'static str,
    },
    SubCreate {
        sub: &'static str,
    },
    TopicDelete {
        topic: &'static str,
    },
    TopicCreate {
        topic: &'static str,
    },
    /// TOPIC_B set up in use, deleted, created again (`ops/busy_delete.rs`).
    BusyDelete,
    /// A dispatcher's receive and delivery of one batch (`Dispatcher::receive`, `deliver`).
    Push {
        sub: &'static str,
    },
    /// A dispatcher's run over TOPIC_A's push subscriptions (`Dispatcher::drain`).
    PushDrain {
        deadline_ms: i64,
    },
    /// The operator's ops on SUB_QO (`ops/subops.rs`).
    Pause {
        sub: &'static str,
    },
    Resume {
        sub: &'static str,
    },
    /// A change of some of the visibility timeout, the filter, the rate, the receive limit.
    Patch {
        sub: &'static str,
        patch: SimPatch,
    },
    /// A seek (a purge: `to` latest, `purge` set), or its dry run.
    QSeek {
        sub: &'static str,
        to: SeekTo,
        dry_run: bool,
        purge: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettleHow {
    Ack,
    Nack(u64),
    Visibility(u64),
}

/// A message a push worker received: partition, offset, its receipt's nonce, receive count.
pub(crate) type Pushed = (u32, u64, u64, u32);

/// An answer per receipt.
pub(crate) type Acks = Vec<Result<(), ReceiptError>>;

pub(crate) enum Res {
    Publish(Result<Vec<Position>, Error>),
    Read(Result<ReadBatch, Error>),
    Lookup(Result<u64, Error>),
    Janitor(Result<UpkeepReport, StorageError>),
    Poll(Result<PollAnswer, Error>),
    Unit(Result<(), Error>),
    Seek(Result<Vec<(u32, u64)>, Error>),
    GDescribe(Result<GroupDescription, Error>),
    Receive(Result<Vec<Message>, Error>),
    Acks(Result<Acks, Error>),
    AckNext(Result<(Acks, Vec<Message>), Error>),
    Vis(Result<Vec<VisibilityResult>, Error>),
    QDescribe(Box<Result<SubscriptionDescription, Error>>),
    Count(Result<u64, Error>),
    Dlq(Result<DeadLetterPage, Error>),
    SubCreate(Box<Result<(Subscription, bool), Error>>),
    TopicCreate(Result<(TopicConfig, bool), Error>),
    BusyDelete(Box<BusyDelete>),
    /// The batch received (by receipt: partition, offset, nonce, receive count), and how its
    /// delivery and settling went (the messages that failed).
    Push(Result<(Vec<Pushed>, Result<usize, Error>), Error>),
    PushDrain(Result<Drained, Error>),
    /// A pause's, a resume's or a change's answer: the subscription.
    Sub(Result<Box<Subscription>, Error>),
    Sought(Result<Sought, Error>),
    /// The process serving it crashed: the answer never came.
    Crashed,
}

/// What `ops/busy_delete.rs`'s scripted sequence was answered, step by step (`None`: not reached).
#[derive(Default)]
pub(crate) struct BusyDelete {
    pub(crate) created: Option<Result<(TopicConfig, bool), Error>>,
    /// Messages in flight for the subscription as the topic was deleted.
    pub(crate) held: usize,
    pub(crate) committed: Option<Result<(), Error>>,
    pub(crate) deleted: Option<Result<(), Error>>,
    pub(crate) receive: Option<Result<Vec<Message>, Error>>,
    pub(crate) acks: Option<Result<Acks, Error>>,
    pub(crate) describe: Option<Result<SubscriptionDescription, Error>>,
    pub(crate) group: Option<Result<GroupDescription, Error>>,
    pub(crate) recreated: Option<Result<(TopicConfig, bool), Error>>,
    pub(crate) describe_again: Option<Result<SubscriptionDescription, Error>>,
    pub(crate) group_again: Option<Result<GroupDescription, Error>>,
}

impl std::fmt::Debug for BusyDelete {
    /// One line for the trace: each step's answer, or its error code.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn c<T>(r: &Option<Result<T, Error>>) -> String {
            match r {
                None => "-".into(),
                Some(Ok(_)) => "ok".into(),
                Some(Err(e)) => code(e),
            }
        }
        let received = self.receive.as_ref().map(|r| r.as_ref().map(Vec::len).map_err(code));
        let acked =
            self.acks.as_ref().map(|r| r.as_ref().map(|rs| rs.iter().filter(|a| a.is_ok()).count()).map_err(code));
        write!(
            f,
            "held {} committed {} deleted {} then receive {received:?} acked {acked:?} describe {} group {} \
             recreated {} describe {} group {}",
            self.held,
            c(&self.committed),
            c(&self.deleted),
            c(&self.describe),
            c(&self.group),
            c(&self.recreated),
            c(&self.describe_again),
            c(&self.group_again),
        )
    }
}

pub(crate) struct Inflight {
    pub(crate) client: usize,
    pub(crate) pid: usize,
    /// A long poll: it waits on its process's commit notifications.
    pub(crate) long: bool,
    pub(crate) act: Act,
    pub(crate) start_seq: u64,
    pub(crate) start_ms: i64,
    pub(crate) start_step: u64,
    /// The topic record (id, version, live) as the op began, for ops on one topic.
    pub(crate) topic0: Option<(u64, u64, bool)>,
    /// The groups' "touch" counter (seeks and deletes) as the op began.
    pub(crate) touch0: u64,
    pub(crate) handle: tokio::task::JoinHandle<()>,
}

/// What the completion handler knows of an op.
pub(crate) struct Done {
    pub(crate) client: usize,
    pub(crate) act: Act,
    pub(crate) start_seq: u64,
    pub(crate) end_seq: u64,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) topic0: Option<(u64, u64, bool)>,
    pub(crate) touch0: u64,
    pub(crate) res: Res,
}

pub(crate) fn code(e: &Error) -> String {
    match e {
        Error::Invalid { code, .. } | Error::TooLarge { code, .. } => code.as_str().to_owned(),
        Error::NotFound { code, .. } | Error::Conflict { code, .. } => code.as_str().to_owned(),
        Error::TopicNotFound(_) => "topic_not_found".into(),
        Error::PartitionNotFound { .. } => "partition_not_found".into(),
        Error::GroupNotFound(_) => "group_not_found".into(),
        Error::SubscriptionNotFound { .. } => "subscription_not_found".into(),
        Error::TopicExists(_) => "topic_exists".into(),
        Error::IdempotencyKeyReused(_) => "idempotency_key_reused".into(),
        Error::OffsetOutOfRange { offset, log_start_offset, high_watermark } => {
            format!("416({offset} not in {log_start_offset}..={high_watermark})")
        }
        Error::Corrupt(m) => format!("corrupt({m})"),
        Error::Throttled(_) => "throttled".into(),
        Error::Unavailable(e) => format!("unavailable({e})"),
    }
}

/// A 5xx or 429: the request may or may not have been applied.
pub(crate) fn uncertain(e: &Error) -> bool {
    matches!(e, Error::Throttled(_) | Error::Unavailable(_))
}

impl Res {
    /// The answer's part of its trace line.
    pub(crate) fn write_answer(&self, line: &mut String) {
        match self {
            Res::Publish(_) | Res::Read(_) | Res::Lookup(_) | Res::Janitor(_) => self.write_log_answer(line),
            Res::Poll(_) | Res::Unit(_) | Res::Seek(_) | Res::GDescribe(_) => self.write_group_answer(line),
            Res::Crashed => line.push_str("CRASHED"),
            Res::Push(_) | Res::PushDrain(_) => self.write_push_answer(line),
            Res::Sub(_) | Res::Sought(_) => self.write_operator_answer(line),
            _ => self.write_queue_answer(line),
        }
    }

    fn write_log_answer(&self, line: &mut String) {
        match self {
            Res::Publish(r) => match r {
                Ok(ps) => {
                    let _ = write!(line, "ok {:?}", ps.iter().map(|p| (p.partition, p.offset)).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Read(r) => match r {
                Ok(b) => {
                    let _ = write!(
                        line,
                        "{} events next {} hw {} start {}",
                        b.events.len(),
                        b.next_offset,
                        b.high_watermark,
                        b.log_start_offset
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Lookup(r) => match r {
                Ok(o) => {
                    let _ = write!(line, "offset {o}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Janitor(r) => match r {
                Ok(rep) => {
                    let _ = write!(
                        line,
                        "expired {} merged {} written {} purged {} gc {}+{}",
                        rep.segments_expired,
                        rep.segments_merged,
                        rep.segments_written,
                        rep.purge.items_deleted,
                        rep.gc.objects_deleted,
                        rep.gc.orphans_deleted
                    );
                }
                Err(e) => {
                    let _ = write!(line, "{e}");
                }
            },
            // The others are written by `write_answer`'s other arms.
            _ => {}
        }
    }

    /// Group answers, and the `Unit` answers of deletes and leaves.
    fn write_group_answer(&self, line: &mut String) {
        match self {
            Res::Poll(r) => match r {
                Ok(a) => {
                    let _ = write!(
                        line,
                        "member {} gen {} assigned {:?} events {:?}",
                        a.member_id,
                        a.generation,
                        a.assignment.iter().map(|tp| tp.partition).collect::<Vec<_>>(),
                        a.events.iter().map(|e| (e.event.partition, e.event.offset)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Unit(r) => match r {
                Ok(()) => line.push_str("ok"),
                Err(e) => line.push_str(&code(e)),
            },
            Res::Seek(r) => match r {
                Ok(m) => {
                    let _ = write!(line, "moved {m:?}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::GDescribe(r) => match r {
                Ok(g) => {
                    let _ = write!(
                        line,
                        "gen {} members {} committed {:?}",
                        g.generation,
                        g.members.len(),
                        g.partitions.iter().map(|p| (p.partition, p.committed)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            _ => {}
        }
    }

    /// The answers of SUB_QO's operator (`ops/subops.rs`).
    fn write_operator_answer(&self, line: &mut String) {
        match self {
            Res::Sub(r) => match r {
                Ok(s) => {
                    let _ = write!(line, "{:?} window {}", s.state, s.spec.visibility_timeout_ms);
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Sought(r) => match r {
                Ok(s) => {
                    let moves: Vec<_> = s.partitions.iter().map(|p| (p.from, p.to, p.redeliver, p.skip)).collect();
                    let _ = write!(line, "applied {} {moves:?}", s.applied);
                }
                Err(e) => line.push_str(&code(e)),
            },
            _ => {}
        }
    }

    fn write_queue_answer(&self, line: &mut String) {
        match self {
            Res::Receive(r) => match r {
                Ok(ms) => {
                    let _ = write!(
                        line,
                        "{:?}",
                        ms.iter().map(|m| (m.event.partition, m.event.offset, m.receive_count)).collect::<Vec<_>>()
                    );
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Acks(r) => match r {
                Ok(rs) => {
                    let _ = write!(line, "{:?}", rs.iter().map(|r| r.is_ok()).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::AckNext(r) => match r {
                Ok((rs, ms)) => {
                    let acks: Vec<bool> = rs.iter().map(|r| r.is_ok()).collect();
                    let got: Vec<_> = ms.iter().map(|m| (m.event.partition, m.event.offset, m.receive_count)).collect();
                    let _ = write!(line, "{acks:?} then {got:?}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Vis(r) => match r {
                Ok(rs) => {
                    let _ = write!(line, "{:?}", rs.iter().map(|r| r.is_ok()).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::QDescribe(r) => match r.as_ref() {
                Ok(s) => {
                    let _ = write!(line, "{:?}", s.backlog);
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Count(r) => match r {
                Ok(n) => {
                    let _ = write!(line, "{n}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::Dlq(r) => match r {
                Ok(p) => {
                    let _ = write!(line, "{:?}", p.entries.iter().map(|e| &e.id).collect::<Vec<_>>());
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::SubCreate(r) => match r.as_ref() {
                Ok((_, created)) => {
                    let _ = write!(line, "created {created}");
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::TopicCreate(r) => match r {
                Ok((t, created)) => {
                    let _ = write!(line, "id {:x} created {created}", t.id);
                }
                Err(e) => line.push_str(&code(e)),
            },
            Res::BusyDelete(b) => {
                let _ = write!(line, "{b:?}");
            }

            _ => {}
        }
    }
}
