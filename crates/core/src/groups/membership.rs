//! Membership: leaving, the next generation's record, and the assignment of partitions.

use super::*;
use crate::Code;

/// The group record of a new generation (written at `version_after`): the assignment, the
/// topics' incarnations, and `since` for every partition that changed hands (or whose topic
/// was re-created) now; `since` is kept only for assigned partitions, which are all it is read
/// for, so the record stays bounded by the partitions the group reads.
pub(super) fn next_generation(
    previous: &GroupRecord,
    version_after: u64,
    assignment: BTreeMap<String, Vec<TopicPartition>>,
    topic_ids: BTreeMap<String, u64>,
) -> GroupRecord {
    let held: BTreeSet<(&String, &TopicPartition)> =
        previous.members.iter().flat_map(|(id, parts)| parts.iter().map(move |tp| (id, tp))).collect();
    let mut since = BTreeMap::new();
    for (id, parts) in &assignment {
        for tp in parts {
            let key = tp_key(&tp.topic, tp.partition);
            let same_topic = previous.topics.get(&tp.topic) == topic_ids.get(&tp.topic);
            let kept = held.contains(&(id, tp)) && same_topic;
            let from = if kept { previous.since.get(&key).copied().unwrap_or(0) } else { version_after };
            since.insert(key, from);
        }
    }
    let left_topics = match (topic_ids.is_empty(), previous.topics.is_empty()) {
        (false, _) => BTreeSet::new(),
        (true, false) => previous.topics.keys().cloned().collect(),
        (true, true) => previous.left_topics.clone(),
    };
    GroupRecord {
        generation: previous.generation + 1,
        members: assignment,
        topics: topic_ids,
        since,
        offsets_from: previous.offsets_from,
        left_topics,
    }
}

/// The assignment for `subscriptions` (member → topics) over `all_topics`, and the topic
/// incarnations it was made for: what a poll and a leave both decide a generation from.
pub(super) fn assignment(
    record: &GroupRecord,
    subscriptions: &BTreeMap<String, Vec<String>>,
    all_topics: &BTreeMap<String, TopicConfig>,
) -> (BTreeMap<String, Vec<TopicPartition>>, BTreeMap<String, u64>) {
    let topic_ids = all_topics.iter().map(|(n, t)| (n.clone(), t.id)).collect();
    (assign(record, subscriptions, all_topics), topic_ids)
}

/// Balanced, sticky assignment, per topic over the members subscribed to it: each
/// member keeps what it had of the topic up to the fair share (one more for as many
/// members as the remainder allows), then every partition left goes to the least
/// loaded member, so counts differ by at most one.
fn assign(
    previous: &GroupRecord,
    subscriptions: &BTreeMap<String, Vec<String>>,
    topics: &BTreeMap<String, TopicConfig>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut result: BTreeMap<String, Vec<TopicPartition>> =
        subscriptions.keys().map(|id| (id.clone(), Vec::new())).collect();
    for (name, topic) in topics {
        let eligible: Vec<&String> =
            subscriptions.iter().filter(|(_, ts)| ts.contains(name)).map(|(id, _)| id).collect();
        if eligible.is_empty() {
            continue;
        }
        let n = topic.spec.partitions as usize;
        let fair = n / eligible.len();
        let same_incarnation = previous.topics.get(name) == Some(&topic.id);
        let mut owner: Vec<Option<&String>> = vec![None; n];
        let mut counts: BTreeMap<&String, usize> = eligible.iter().map(|id| (*id, 0)).collect();
        // Up to the fair share first, then one more for as many members as the remainder allows.
        let mut extra = n % eligible.len();
        for pass in 0..2 {
            for id in &eligible {
                let Some(old) = previous.members.get(*id).filter(|_| same_incarnation) else { continue };
                for tp in old.iter().filter(|tp| &tp.topic == name && (tp.partition as usize) < n) {
                    let count = counts.entry(id).or_default();
                    let room = if pass == 0 { *count < fair } else { *count == fair && extra > 0 };
                    if room && owner[tp.partition as usize].is_none() {
                        owner[tp.partition as usize] = Some(id);
                        *count += 1;
                        if pass == 1 {
                            extra -= 1;
                        }
                    }
                }
            }
        }
        for slot in owner.iter_mut().filter(|o| o.is_none()) {
            if let Some((id, count)) = counts.iter_mut().min_by_key(|(id, count)| (**count, **id)) {
                *slot = Some(id);
                *count += 1;
            }
        }
        for (p, id) in owner.into_iter().enumerate() {
            if let Some(parts) = id.and_then(|id| result.get_mut(id)) {
                parts.push(TopicPartition { topic: name.clone(), partition: p as u32 });
            }
        }
    }
    for parts in result.values_mut() {
        parts.sort();
    }
    result
}

impl Groups {
    /// Leaves the group at once: its partitions are reassigned to the others.
    pub async fn leave(&self, group: &str, member_id: &str) -> Result<(), Error> {
        names::validate("group", group)?;
        for _ in 0..MAX_ATTEMPTS {
            let state = self.state(group).await?;
            if !state.members.contains_key(member_id) && !state.record.members.contains_key(member_id) {
                return Err(conflict(Code::UnknownMember, format!("member '{member_id}' is not in group '{group}'")));
            }
            let mut subscriptions: BTreeMap<String, Vec<String>> =
                state.members.iter().map(|(id, (m, _, _))| (id.clone(), m.topics.clone())).collect();
            subscriptions.remove(member_id);
            let mut all_topics = BTreeMap::new();
            for name in subscriptions.values().flatten() {
                if !all_topics.contains_key(name) {
                    if let Ok(t) = topics::live(self.store(), name).await {
                        all_topics.insert(name.clone(), t);
                    }
                }
            }
            let (assignment, topic_ids) = assignment(&state.record, &subscriptions, &all_topics);
            let record = next_generation(&state.record, state.version + 1, assignment, topic_ids);
            let mut ops = vec![
                WriteOp::replace(
                    group_meta_key(group),
                    layout::encode(&record),
                    Some(state.version).filter(|v| *v > 0),
                ),
                WriteOp::Delete { key: member_key(group, member_id), expect: Expect::Any },
            ];
            // The last member leaving: the group's offsets expire counting from now.
            if state.members.keys().all(|id| id == member_id) {
                let now = self.now();
                let until = state.activity.map_or(now, |(a, _)| a.until.min(now));
                if state.activity.is_none_or(|(a, _)| a.until != until) {
                    ops.extend(activity_ops(group, state.activity.as_ref(), until));
                }
            }
            match self.store().write(ops).await {
                Ok(()) => return Ok(()),
                Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(too_busy(group))
    }
}
