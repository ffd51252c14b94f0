//! What a poll and a commit read before they decide, in one batch of the state store
//! ([`StateStore::read_many`]: one read transaction on SQLite, where each call on its own
//! paid one): the topics, the group's collection, the committed offsets (a commit's), and
//! the heads of each topic.
//!
//! A topic's heads are keyed by its id, which only the topic's read tells. The batch reads
//! them at the id this process last saw the topic under (a guess, not a cache: nothing is
//! answered from it), and they count only if the topic read in the same batch has that id;
//! otherwise (a topic new to this process, or re-created) they are read after it, as before.
//! Each answer is as fresh as a read of its own (the port's contract), so what is decided
//! from them is what was decided from the reads one by one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::*;
use crate::keys::{heads_pk, topic_key};
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

/// What the first batch found.
pub(super) struct Batch {
    /// Every topic named that is live (the caller answers `TopicNotFound` for the others
    /// where it did when it read them one by one).
    pub topics: BTreeMap<String, TopicConfig>,
    pub state: GroupState,
    /// The committed offsets, if asked for.
    pub offsets: Option<BTreeMap<String, (OffsetRecord, u64)>>,
    /// The heads of every topic named, by topic id.
    pub heads: BTreeMap<u64, Vec<(HeadRecord, u64)>>,
}

impl Groups {
    /// Reads the topics `names` (the live ones kept), the group's collection, its offsets if
    /// `offsets`, and the heads of each live topic: one batch, then whatever it could not answer.
    pub(super) async fn read_batch(&self, group: &str, names: &[&str], offsets: bool) -> Result<Batch, Error> {
        let guesses: Vec<(usize, u64)> =
            names.iter().enumerate().filter_map(|(i, name)| Some((i, self.ids.guess(name)?))).collect();
        let mut reads: Vec<Read> = names.iter().map(|name| Read::Get(topic_key(name))).collect();
        reads.push(Read::Query(Query::all(group_pk(group), 1000)));
        if offsets {
            reads.push(Read::Query(Query::all(offsets_pk(group), 1000)));
        }
        reads.extend(guesses.iter().map(|(_, id)| Read::Query(Query::all(heads_pk(*id), topics::PAGE))));
        let mut found = self.store().read_many(&reads).await?.into_iter();
        let mut batch =
            Batch { topics: BTreeMap::new(), state: GroupState::default(), offsets: None, heads: BTreeMap::new() };
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
        let missing: Vec<&TopicConfig> = batch.topics.values().filter(|t| !batch.heads.contains_key(&t.id)).collect();
        batch.heads.extend(self.heads(missing.into_iter()).await?);
        self.ids.saw(&batch.topics);
        Ok(batch)
    }
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
