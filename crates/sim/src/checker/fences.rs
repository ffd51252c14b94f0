//! Fences that must not be too tight: a commit refused as fenced while the stored group, read
//! directly (no faults), held the member at that generation, owning those partitions, its
//! session live, from before the commit began until after it answered.

use sluice_core::groups::GroupRecord;
use sluice_core::keys::{group_meta_key, member_key};
use sluice_core::ports::state::Item;
use sluice_core::{layout, Clock, Code, Error};

use crate::fault::Fault;
use crate::model::GroupSnap;
use crate::world::{Done, World, GROUP, T0, TOPIC_A};

impl World {
    pub(crate) fn group_snap(&self, member: &str) -> GroupSnap {
        let versioned = |i: Item| (i.version, i.value);
        GroupSnap {
            meta: self.mem.peek(&group_meta_key(GROUP)).map(versioned),
            member: self.mem.peek(&member_key(GROUP, member)).map(|i| (i.version, i.value, i.expires_at_ms)),
            touch: self.group.touch,
            power_cuts: self.chaos.fired().get(&Fault::PowerCut).copied().unwrap_or(0),
        }
    }

    /// A commit refused as fenced (a stale generation, an unknown member, a partition not
    /// owned) must have been: flagged if the group, unchanged from before it began until
    /// after it answered, says the member held that generation and those partitions.
    pub(crate) fn check_commit_refusal(&mut self, d: &Done, generation: u64, offsets: &[(u32, u64)], member: &str) {
        let Some(before) = self.commit_snaps.remove(&d.start_seq) else { return };
        let fence = match &d.res {
            crate::world::Res::Unit(Err(Error::Conflict { code, .. })) => *code,
            _ => return,
        };
        if !matches!(fence, Code::StaleGeneration | Code::UnknownMember | Code::NotAssigned) {
            return;
        }
        let after = self.group_snap(member);
        if after != before || self.group.seeks_in_flight > 0 || self.group.deletes_in_flight > 0 {
            return;
        }
        let (Some((_, meta)), Some((_, _, expires))) = (&after.meta, &after.member) else { return };
        let Ok(record) = layout::decode::<GroupRecord>("group", meta) else { return };
        let live = expires.is_none_or(|e| e > self.clock.now_ms());
        let owned = record.members.get(member).is_some_and(|tps| {
            offsets.iter().all(|(p, _)| tps.iter().any(|tp| tp.topic == TOPIC_A && tp.partition == *p))
        });
        let same_topic = record.topics.get(TOPIC_A).copied() == self.live_topic_id(TOPIC_A);
        if record.generation == generation && live && owned && same_topic {
            self.violate(
                "commit-over-fenced",
                format!(
                    "commit by {member} (generation {generation}, partitions {:?}) refused {fence:?} at {}, \
                     though the group held it there throughout",
                    offsets.iter().map(|(p, _)| p).collect::<Vec<_>>(),
                    d.end_ms - T0
                ),
            );
        }
    }
}
