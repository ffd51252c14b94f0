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

    /// Deletes a group with no live members: its record, offsets and registry entry.
    ///
    /// Every deletion is conditional on the version read, so a member that joins (or commits)
    /// meanwhile is never erased. The first write is the delete's one atomic step: a join
    /// before it makes it fail whole (`group_not_empty`); after it, the group is gone. It
    /// removes the registry entry, the activity and as many offsets as fit, and replaces the
    /// record with a tombstone one version up: offsets recorded below its version are not the
    /// group's (`offsets_from`), so a member joining before the rest go starts at its reset
    /// policy, not at the deleted group's offsets (a store's atomic write is bounded:
    /// DynamoDB's holds 100 items, so a wide group's offsets take more writes).
    ///
    /// Then the sweep: the group's offsets are read again and every one below the tombstone
    /// is deleted at the version read. Reading again, rather than deleting what the first
    /// read found, also removes an offset that a commit wrote after that read but before the
    /// first write (a commit checks the record's version, which the first write moved on, so
    /// none can land after it): the sweep's read sees every offset of the old group. Only
    /// then does the tombstone go, unless a join or seek made the group anew over it; a group
    /// made after that starts at version 1 with no old offset left to resume from. A delete
    /// cut short leaves the tombstone and offsets nobody reads; deleting the group again
    /// finishes it.
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
            let at = |key: Key, version: Option<u64>| match version {
                Some(v) => WriteOp::Delete { key, expect: Expect::Version(v) },
                None => WriteOp::Check { key, expect: Expect::Absent },
            };
            let record_version = Some(state.version).filter(|v| *v > 0);
            // The record's own op, first; the tombstone's version is the one after the version read.
            let tombstone = GroupRecord { offsets_from: state.version + 1, ..GroupRecord::default() };
            let mut ops = vec![
                WriteOp::replace(group_meta_key(group), layout::encode(&tombstone), record_version),
                at(registry_key(group), registry),
                at(activity_key(group), state.activity.map(|(_, v)| v)),
            ];
            if let Some((a, _)) = state.activity {
                ops.push(WriteOp::Delete { key: expiry_key(a.until, group), expect: Expect::Any });
            }
            let room = MAX_WRITE_OPS - ops.len();
            ops.extend(
                offsets.iter().take(room).map(|(sk, (_, v))| at(Key::new(offsets_pk(group), sk.clone()), Some(*v))),
            );
            match self.store().write(ops).await {
                Ok(()) => {}
                // A member joined, committed or sought meanwhile: look again.
                Err(StorageError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            self.sweep_offsets_below(group, tombstone.offsets_from).await?;
            let expect = Expect::Version(tombstone.offsets_from);
            self.delete_unchanged(vec![WriteOp::Delete { key: group_meta_key(group), expect }]).await?;
            return Ok(());
        }
        Err(too_busy(group))
    }

    /// Deletes every offset of `group` recorded below the group version `from`, each at the
    /// version read (one a new incarnation committed over meanwhile stays).
    async fn sweep_offsets_below(&self, group: &str, from: u64) -> Result<(), Error> {
        let old: Vec<WriteOp> = self
            .offsets(group)
            .await?
            .into_iter()
            .filter(|(_, (o, _))| o.group_version < from)
            .map(|(sk, (_, v))| WriteOp::Delete { key: Key::new(offsets_pk(group), sk), expect: Expect::Version(v) })
            .collect();
        for chunk in old.chunks(MAX_WRITE_OPS) {
            self.delete_unchanged(chunk.to_vec()).await?;
        }
        Ok(())
    }

    /// Applies conditional deletes, leaving out each one whose item changed since it was read.
    async fn delete_unchanged(&self, mut ops: Vec<WriteOp>) -> Result<(), Error> {
        while !ops.is_empty() {
            match self.store().write(ops.clone()).await {
                Ok(()) => return Ok(()),
                Err(StorageError::ConditionFailed { op }) if op < ops.len() => {
                    ops.remove(op);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
