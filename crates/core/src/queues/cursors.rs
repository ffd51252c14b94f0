//! Changing every partition's cursor item of a subscription, one partition at a time:
//! what pause, resume, seek and purge share. Each partition's change is one write
//! conditional on the cursor item's version (and on every other item it names), so a
//! take or a settle racing it either lands first or fails and reads the change.

use std::future::Future;

use super::*;

/// What a change does to one partition's queue, decided from its state as read.
pub(super) enum Change<T> {
    /// Nothing to write; `T` is the partition's answer.
    Keep(T),
    /// One write, naming the cursor item conditional on the version read (written through
    /// [`QueueState::cursor_item_write`]); `T` is the partition's answer once it lands.
    Write(Vec<WriteOp>, T),
}

impl Queues {
    /// Changes every partition of `sub` in partition order: reads its queue (`limit` as
    /// [`Queues::load`] takes it), asks `change` what to write, writes it, and reads again
    /// after a lost race. Answers each partition's `T`; a partition's change is done when
    /// the next one starts, so a failure leaves the earlier partitions changed.
    pub(super) async fn change_cursors<T, F, Fut>(
        &self,
        sub: &Sub,
        limit: Option<usize>,
        mut change: F,
    ) -> Result<Vec<T>, Error>
    where
        F: FnMut(u32, QueueState) -> Fut,
        Fut: Future<Output = Result<Change<T>, Error>>,
    {
        let mut answers = Vec::with_capacity(sub.topic.spec.partitions as usize);
        for partition in 0..sub.topic.spec.partitions {
            let _turn = self.local.turns.wait(sub.record.id, partition).await;
            let mut attempt = 0;
            let answer = loop {
                if attempt >= MAX_ATTEMPTS {
                    return Err(contended(&sub.name));
                }
                let state = self.load(sub, partition, limit).await?;
                match change(partition, state).await? {
                    Change::Keep(answer) => break answer,
                    Change::Write(ops, answer) => match self.store().write(ops).await {
                        Ok(()) => break answer,
                        Err(e) => self.lost_race(e, &mut attempt).await?,
                    },
                }
            };
            answers.push(answer);
        }
        Ok(answers)
    }
}
