//! What a poll and a commit read before they decide, in one batch of the state store
//! ([`StateStore::read_many`]: one read transaction on SQLite, where each call on its own
//! paid one): the topics, the group's collection, the committed offsets (a commit's), the
//! heads of each topic, and (a poll's) the segment index where the member fetches next.
//!
//! A topic's heads are keyed by its id, which only the topic's read tells. The batch reads
//! them at the id this process last saw the topic under (a guess, not a cache: nothing is
//! answered from it), and they count only if the topic read in the same batch has that id;
//! otherwise (a topic new to this process, or re-created) they are read after it, as before.
//! A poll's index reads are guesses the same way: from where the member's last poll in this
//! process left each partition, used only for a fetch that starts exactly there (the
//! topic's id, the partition and the offset all agree), else the fetch queries as before.
//! Each answer is as fresh as a read of its own (the port's contract), so what is decided
//! from them is what was decided from the reads one by one; a fetch's first index page
//! older or newer than its head is one the fetch already copes with (it reads on from
//! where the page ends, bounded by the head).
//!
//! Guesses cost a read each whether right or not, so they are made only where the store
//! batches reads cheaply ([`StateStore::cheap_batched_reads`]); a commit's heads, which it
//! needs anyway, are guessed everywhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::keys::{heads_pk, offset_sk, segments_pk, topic_key};
use crate::log::index::index_page;
use crate::ports::state::{Item, Read};

/// Topics whose ids one process remembers: beyond it the guesses start again (a few heads
/// read a second time), so the memory stays bounded.
const MAX_GUESSES: usize = 4_096;

/// The id each topic had when this process last read it (see the module doc).
#[derive(Clone, Default)]
pub(super) struct TopicIds(Arc<Mutex<HashMap<String, u64>>>);

impl TopicIds {
    fn guess(&self, name: &str) -> Option<u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(name).copied()
    }

    fn saw(&self, topics: &BTreeMap<String, TopicConfig>) {
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ids.len() + topics.len() > MAX_GUESSES {
            ids.clear();
        }
        for (name, topic) in topics {
            if ids.get(name) != Some(&topic.id) {
                ids.insert(name.clone(), topic.id);
            }
        }
    }
}

/// Most index items a poll's batch reads from each guessed fetch start: enough for a live
/// member's next poll (a few segments since its last), few enough that the guesses for
/// partitions with nothing new, or a backlog's (its fetch queries on from the page's end),
/// cost little.
const GUESSED_INDEX_ITEMS: usize = 4;

/// Where a fetch starts: (topic id, partition, offset).
pub(super) type At = (u64, u32, u64);

/// The heads of each topic read, by topic id: each partition's head and its version.
pub(super) type HeadsById = BTreeMap<u64, Vec<(HeadRecord, u64)>>;

/// Index items read from guessed fetch starts on, by start.
pub(super) type IndexPages = HashMap<At, Vec<Item>>;

/// Fetch starts by group, then member.
type ByMember = HashMap<String, HashMap<String, Vec<At>>>;

/// Where each member this process answered fetches next, as its last poll here left it
/// (see the module doc): by group, then member.
#[derive(Clone, Default)]
pub(super) struct NextFetches(Arc<Mutex<ByMember>>);

impl NextFetches {
    fn guess(&self, group: &str, member: &str) -> Vec<At> {
        let fetches = self.0.lock().unwrap_or_else(|e| e.into_inner());
        fetches.get(group).and_then(|members| members.get(member)).cloned().unwrap_or_default()
    }

    /// Notes where `member` of `group` fetches next.
    pub(super) fn left(&self, group: &str, member: &str, next: Vec<At>) {
        let mut fetches = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = fetches.get_mut(group).and_then(|members| members.get_mut(member)) {
            *slot = next;
            return;
        }
        // Beyond the bound the guesses start again: a few index queries made on their own.
        if fetches.values().map(HashMap::len).sum::<usize>() >= MAX_GUESSES {
            fetches.clear();
        }
        fetches.entry(group.to_owned()).or_default().insert(member.to_owned(), next);
    }
}

/// Which heads a batch reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Heads {
    /// Every named topic's (a commit checks each offset against its partition's head): at the
    /// guessed ids in the batch, the rest after it.
    All,
    /// At the guessed ids, only where the store batches reads cheaply
    /// ([`StateStore::cheap_batched_reads`]); none after: a poll reads the heads of only the
    /// topics the member holds partitions of, which the batch's group read tells, so on a
    /// store billed per read (DynamoDB) a member assigned nothing of a topic reads none of it.
    IfCheap,
}

/// What the first batch found.
pub(super) struct Batch {
    /// Every topic named that is live (the caller answers `TopicNotFound` for the others
    /// where it did when it read them one by one).
    pub topics: BTreeMap<String, TopicConfig>,
    pub state: GroupState,
    /// The committed offsets, if asked for.
    pub offsets: Option<BTreeMap<String, (OffsetRecord, u64)>>,
    /// The heads of topics named, by topic id: every live one's under [`Heads::All`], else
    /// those the batch read at the right id.
    pub heads: HeadsById,
    /// The segment index items from each guessed fetch start on (a poll's, see the module doc).
    pub index: IndexPages,
}

impl Groups {
    /// A poll's batch: its topics, its group, and where the store batches reads cheaply, the
    /// heads at their guessed ids and the index where the member fetches next.
    pub(super) async fn poll_batch(&self, req: &PollRequest, names: &[&str]) -> Result<Batch, Error> {
        let next = match &req.member_id {
            Some(member) if self.store().cheap_batched_reads() => self.fetches.guess(&req.group, member),
            _ => Vec::new(),
        };
        let limit = index_page(req.max_events as u64, None, GUESSED_INDEX_ITEMS);
        self.read_batch(&req.group, names, false, Heads::IfCheap, (&next, limit)).await
    }

    /// Reads the topics `names` (the live ones kept), the group's collection, its offsets if
    /// `offsets`, the heads `heads` says, and up to `limit` index items from each of `index`
    /// on: one batch, then whatever it could not answer.
    pub(super) async fn read_batch(
        &self,
        group: &str,
        names: &[&str],
        offsets: bool,
        heads: Heads,
        (index, limit): (&[At], usize),
    ) -> Result<Batch, Error> {
        let guess = heads == Heads::All || self.store().cheap_batched_reads();
        let guesses: Vec<(usize, u64)> = if guess {
            names.iter().enumerate().filter_map(|(i, name)| Some((i, self.ids.guess(name)?))).collect()
        } else {
            Vec::new()
        };
        let mut reads: Vec<Read> = names.iter().map(|name| Read::Get(topic_key(name))).collect();
        reads.push(Read::Query(Query::all(group_pk(group), 1000)));
        if offsets {
            reads.push(Read::Query(Query::all(offsets_pk(group), 1000)));
        }
        reads.extend(guesses.iter().map(|(_, id)| Read::Query(Query::all(heads_pk(*id), topics::PAGE))));
        reads.extend(index.iter().map(|&(id, p, offset)| Read::Query(from_offset(id, p, offset, limit))));
        let mut found = self.store().read_many(&reads).await?.into_iter();
        let mut batch = Batch {
            topics: BTreeMap::new(),
            state: GroupState::default(),
            offsets: None,
            heads: BTreeMap::new(),
            index: HashMap::new(),
        };
        for name in names {
            let item = found.next().ok_or_else(short)?.into_item()?;
            if let Some(topic) = live(name, item)? {
                batch.topics.insert((*name).to_owned(), topic);
            }
        }
        let first = found.next().ok_or_else(short)?.into_page()?;
        batch.state = read_state_from(self.store(), group, first).await?;
        if offsets {
            let first = found.next().ok_or_else(short)?.into_page()?;
            batch.offsets = Some(read_offsets_from(self.store(), group, first).await?);
        }
        for (i, id) in guesses {
            let page = found.next().ok_or_else(short)?.into_page()?;
            let Some(topic) = batch.topics.get(names[i]) else { continue };
            if topic.id == id {
                if let Some(heads) = topics::heads_of_page(topic, &page)? {
                    batch.heads.insert(id, heads);
                }
            }
        }
        for at in index {
            batch.index.insert(*at, found.next().ok_or_else(short)?.into_page()?.items);
        }
        if heads == Heads::All {
            let missing = batch.topics.values().filter(|t| !batch.heads.contains_key(&t.id));
            let missing: Vec<&TopicConfig> = missing.collect();
            batch.heads.extend(self.heads(missing.into_iter()).await?);
        }
        self.ids.saw(&batch.topics);
        Ok(batch)
    }
}

/// The index items of a partition from `offset` on, as a fetch's first query reads them.
fn from_offset(topic_id: u64, partition: u32, offset: u64, limit: usize) -> Query {
    Query { from: Some(offset_sk(offset)), ..Query::all(segments_pk(topic_id, partition), limit) }
}

/// A store answered fewer reads than it was asked: its bug, never the caller's.
fn short() -> StorageError {
    StorageError::Invalid("a batched read answered fewer reads than asked".into())
}

/// The topic `name` from its item if it is live, as [`topics::live`] reads it.
fn live(name: &str, item: Option<Item>) -> Result<Option<TopicConfig>, StorageError> {
    let Some(item) = item else { return Ok(None) };
    let record = layout::decode_topic(&item.value)?;
    Ok(record.deleted_ms.is_none().then(|| record.config(name, item.version)))
}
