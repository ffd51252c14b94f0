//! Listing, describing and deleting groups.

use super::*;
use crate::Code;

impl Groups {
    /// Every group, by name.
    pub async fn list(&self) -> Result<Vec<String>, Error> {
        let mut names = Vec::new();
        let mut query = Query::all(groups_pk(), 1000);
        loop {
            let page = self.store().query(&query).await?;
            names.extend(page.items.into_iter().map(|i| i.key.sk));
            match page.next {
                Some(after) => query.after = Some(after),
                None => return Ok(names),
            }
        }
    }

    /// Members, assignment, generation, and per partition committed offset, high watermark and lag.
    pub async fn describe(&self, group: &str) -> Result<GroupDescription, Error> {
        names::validate("group", group)?;
        let state = self.state(group).await?;
        let mut offsets = self.offsets(group).await?;
        offsets.retain(|_, (o, _)| o.group_version >= state.record.offsets_from);
        if state.unborn() && offsets.is_empty() {
            return Err(Error::GroupNotFound(group.to_owned()));
        }
        let members = state
            .members
            .iter()
            .map(|(id, (m, _, expires))| MemberDescription {
                member_id: id.clone(),
                assignment: state.record.members.get(id).cloned().unwrap_or_default(),
                session_timeout_ms: m.session_timeout_ms,
                expires_at_ms: *expires,
            })
            .collect();
        let mut names: BTreeSet<String> = state.record.topics.keys().cloned().collect();
        names.extend(state.record.left_topics.iter().cloned());
        for key in offsets.keys() {
            if let Some((topic, _)) = key.rsplit_once('#') {
                names.insert(topic.to_owned());
            }
        }
        let owners: BTreeMap<&TopicPartition, &String> =
            state.record.members.iter().flat_map(|(id, parts)| parts.iter().map(move |tp| (tp, id))).collect();
        let mut partitions = Vec::new();
        for name in names {
            let Ok(topic) = topics::live(self.store(), &name).await else { continue };
            for (p, (head, _)) in topics::heads(self.store(), &topic).await?.into_iter().enumerate() {
                let p = p as u32;
                let committed = offsets.get(&tp_key(&name, p)).filter(|(o, _)| o.counts(topic.id, &state.record));
                let from = committed.map_or(head.start, |(o, _)| o.offset.max(head.start));
                let tp = TopicPartition { topic: name.clone(), partition: p };
                partitions.push(PartitionLag {
                    committed: committed.map(|(o, _)| o.offset),
                    metadata: committed.and_then(|(o, _)| o.metadata.clone()),
                    log_start_offset: head.start,
                    high_watermark: head.next,
                    lag: head.next.saturating_sub(from),
                    owner: owners.get(&tp).map(|id| (*id).clone()),
                    topic: name.clone(),
                    partition: p,
                });
            }
        }
        let offsets_expire_at_ms = state
            .activity
            .filter(|_| state.members.is_empty())
            .map(|(a, _)| a.until.saturating_add(self.config.offsets_retention_ms));
        Ok(GroupDescription {
            group: group.to_owned(),
            generation: state.record.generation,
            members,
            partitions,
            offsets_expire_at_ms,
        })
    }

    /// Deletes a group with no live members: its record, offsets and registry entry, by the
    /// protocol `removal` states. Every deletion is conditional on the version read, so a
    /// member that joins (or commits) meanwhile is never erased: a join before the first
    /// write makes it fail whole (`group_not_empty`); after it, the group is gone, and a
    /// member joining before the rest go starts at its reset policy. A delete cut short
    /// leaves the tombstone and offsets nobody reads; deleting the group again finishes it.
    pub async fn delete(&self, group: &str) -> Result<(), Error> {
        names::validate("group", group)?;
        for _ in 0..MAX_ATTEMPTS {
            let state = self.state(group).await?;
            let offsets = self.offsets(group).await?;
            if state.version == 0 && offsets.is_empty() {
                return Err(Error::GroupNotFound(group.to_owned()));
            }
            if !state.members.is_empty() {
                return Err(conflict(
                    Code::GroupNotEmpty,
                    format!("group '{group}' has live members: they must leave first"),
                ));
            }
            let registry = self.store().get(&registry_key(group)).await?.map(|i| i.version);
            let registry = removal::at_version(registry_key(group), registry);
            let (ops, from) = removal::first_write(group, &state, registry, &offsets, false);
            match self.store().write(ops).await {
                Ok(()) => {}
                // A member joined, committed or sought meanwhile: look again.
                Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            removal::sweep_below(self.store(), group, from, usize::MAX).await?;
            removal::drop_tombstone(self.store(), group, from, Vec::new()).await?;
            return Ok(());
        }
        Err(too_busy(group))
    }
}
