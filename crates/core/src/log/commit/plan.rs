//! The write that commits a chunk of a group at its partitions' heads, as cached: pure, from
//! what the committer holds to the operations (the I/O is `mod.rs`'s).

use super::*;

impl Committer {
    /// The write that commits a chunk at the partitions' current heads; sets `bases`.
    pub(super) fn plan(
        &self,
        group: &[Pending],
        layout: &Layout,
        stored: &Stored,
        chunk: Range<usize>,
        with_records: bool,
        bases: &mut [u64],
    ) -> Plan {
        let mut plan = Plan { ops: Vec::new(), kinds: Vec::new(), heads: Vec::new() };
        let mut checked: Vec<u64> = Vec::new();
        for s in &layout.segments[chunk.clone()] {
            // A head that exists is fenced by a delete itself; only creating one needs the topic.
            let creates = self.heads.get(&(s.topic_id, s.partition)).is_none_or(|(_, version)| *version == 0);
            if !creates || checked.contains(&s.topic_id) {
                continue;
            }
            checked.push(s.topic_id);
            let read = group.iter().find(|p| p.topic.id == s.topic_id).map_or(0, |p| p.topic.version);
            let version = self.topic_versions.get(&s.topic_id).copied().unwrap_or(0).max(read);
            plan.ops.push(WriteOp::Check { key: keys::topic_key(&s.topic), expect: Expect::Version(version) });
            plan.kinds.push(OpKind::Topic(s.topic_id));
        }
        let records = with_records && group.iter().any(|p| p.idempotency.is_some());
        for (seg, s) in layout.segments.iter().enumerate().take(chunk.end).skip(chunk.start) {
            let (head, version) = self.heads.get(&(s.topic_id, s.partition)).copied().unwrap_or_default();
            bases[seg] = head.next;
            let after = HeadRecord {
                next: head.next + s.records,
                start: head.start,
                bytes: head.bytes + s.len,
                max_ts: head.max_ts.max(s.max_timestamp_ms),
                deleted: false,
            };
            let expect = if version == 0 { Expect::Absent } else { Expect::Version(version) };
            let (entry, data) = stored.entry(layout, s, after.next);
            // One partition, inline, no record, over a head that exists: the head alone, carrying
            // the entry (its previous one was written out first, see `write_out`).
            let single = self.single_write && chunk.len() == 1 && !records && version > 0;
            let tail = match &data {
                Some(data) if single => Some(Tail { base: head.next, record: entry.clone(), data: data.clone() }),
                _ => None,
            };
            plan.ops.push(WriteOp::Put {
                key: keys::head_key(s.topic_id, s.partition),
                value: layout::encode_head(&after, tail.as_ref()),
                expires_at_ms: None,
                expect,
            });
            plan.kinds.push(OpKind::Head(seg));
            if tail.is_none() {
                let item = layout::encode_segment_item(&entry, data.as_deref());
                plan.ops.push(WriteOp::create(keys::segment_key(s.topic_id, s.partition, head.next), item));
                plan.kinds.push(OpKind::Segment(seg));
            }
            plan.heads.push((after, version + 1, tail));
        }
        if with_records {
            let results = positions(layout, bases);
            let expires = self.clock.now_ms() + IDEMPOTENCY_TTL_MS;
            for (p, r) in group.iter().zip(results) {
                let Some(idem) = &p.idempotency else { continue };
                let record = IdempotencyRecord { fp: layout::hex(&idem.fingerprint), results: r };
                plan.ops.push(WriteOp::Put {
                    key: keys::idempotency_key(p.topic.id, &idem.key),
                    value: layout::encode(&record),
                    expires_at_ms: Some(expires),
                    expect: Expect::Absent,
                });
                plan.kinds.push(OpKind::Record);
            }
        }
        plan
    }

    /// Adds to `plan` the write to the blob's object record that counts `segments` (inline ones
    /// have no object), and answers the record and version it leaves.
    pub(super) fn count_in_object(
        &self,
        plan: &mut Plan,
        stored: &Stored,
        segments: &[SegmentPlan],
    ) -> Option<(String, ObjectRecord, u64)> {
        stored.blob().map(|blob| {
            let (op, record, version) = self.object_after(blob, segments);
            plan.ops.push(op);
            plan.kinds.push(OpKind::Object);
            (blob.object.clone(), record, version)
        })
    }
}
