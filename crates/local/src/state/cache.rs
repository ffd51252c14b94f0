//! The collections this process reads, kept in memory and written through: a get or a
//! query of a collection held here is answered without SQLite.
//!
//! A collection (`pk`) is held whole or not at all: loaded with every row (expired ones
//! too, as SQLite keeps them until purged) by the read that first needs it, then changed
//! by each write of this store once its commit succeeded, before that write is answered.
//! So a read from it is never older than what this process committed and never newer than
//! what SQLite holds. What keeps it right:
//!
//! - **Other processes.** Every commit to the database, from any connection, rewrites the
//!   WAL-index header at the start of the `-shm` file (SQLite's documented WAL format: its
//!   change counter, last frame and checksums). The cache holds the header as it was after
//!   this store's last commit (`base`); every read that would be served here reads the
//!   header first (one `pread`) and, if it moved while this store was not committing, drops
//!   the whole cache. A write of another store commits holding the `-commit` file's lock,
//!   which this store's writer holds from its commit until it has read the header after it,
//!   so no other commit can slip into the header this store takes as its own.
//! - **Reads racing writes.** A collection loaded by a read is kept only if no write was
//!   applied (and nothing dropped) since that read began (`seq`): otherwise the load may
//!   miss a write this process already answered.
//! - **Doubt.** A write refused on a condition drops its collections (a stale copy heals at
//!   once); a commit whose outcome is unknown, or a purge of expired rows (which rows is
//!   not said), drops everything.
//!
//! Memory is bounded: a collection over [`PART_ITEMS`] rows or [`PART_BYTES`] is not held
//! (and remembered as too big until the next drop), and holding more than [`CACHE_BYTES`]
//! in all lets go of other collections first.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use rusqlite::{params, Connection};
use sluice_core::ports::state::{Expect, Item, Key, Page, Query, WriteOp};
use sluice_core::StorageError;

use super::sqlite::{db, item_from_row, lock};

/// Most rows of a collection held in memory.
pub(super) const PART_ITEMS: usize = 1024;
/// Most bytes (values and sort keys) of a collection held in memory.
pub(super) const PART_BYTES: usize = 1 << 20;
/// Most bytes held in all.
pub(super) const CACHE_BYTES: usize = 24 << 20;
/// Most collections remembered as too big (forgotten all at once beyond).
const TOO_BIG_KEPT: usize = 4096;
/// What a row costs beyond its value and sort key, for the bounds.
const ROW_OVERHEAD: usize = 64;
/// The WAL-index header's first copy (`WalIndexHdr`, 48 bytes at offset 0 of the `-shm`).
const HEADER: usize = 48;

type Header = [u8; HEADER];

/// One row as held: an item without its key.
#[derive(Clone)]
struct Row {
    value: Bytes,
    version: u64,
    expires_at_ms: Option<i64>,
}

impl Row {
    fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|e| e > now_ms)
    }

    fn item(&self, pk: &str, sk: &str) -> Item {
        let key = Key { pk: pk.to_owned(), sk: sk.to_owned() };
        Item { key, value: self.value.clone(), version: self.version, expires_at_ms: self.expires_at_ms }
    }
}

fn cost(sk: &str, row: &Row) -> usize {
    sk.len() + row.value.len() + ROW_OVERHEAD
}

/// A whole collection: every row SQLite holds for it, expired ones included.
#[derive(Default)]
pub(super) struct Part {
    rows: BTreeMap<String, Row>,
    bytes: usize,
}

impl Part {
    /// Loads `pk` whole on `conn`, unless it holds more than the bounds allow.
    pub(super) fn load(conn: &Connection, pk: &str) -> Result<Option<Part>, StorageError> {
        let mut stmt = conn
            .prepare_cached("SELECT pk, sk, value, version, expires_ms FROM items WHERE pk = ?1 ORDER BY sk LIMIT ?2")
            .map_err(db)?;
        let mut rows = stmt.query(params![pk, PART_ITEMS as i64 + 1]).map_err(db)?;
        let mut part = Part::default();
        while let Some(row) = rows.next().map_err(db)? {
            let item = item_from_row(row).map_err(db)?;
            let row = Row { value: item.value, version: item.version, expires_at_ms: item.expires_at_ms };
            part.bytes += cost(&item.key.sk, &row);
            part.rows.insert(item.key.sk, row);
            if part.rows.len() > PART_ITEMS || part.bytes > PART_BYTES {
                return Ok(None);
            }
        }
        Ok(Some(part))
    }

    /// The item at `sk` as [`super::sqlite::get_on`] answers it at `now_ms`.
    pub(super) fn get(&self, pk: &str, sk: &str, now_ms: i64) -> Option<Item> {
        self.rows.get(sk).filter(|r| r.live(now_ms)).map(|r| r.item(pk, sk))
    }

    /// `query`'s page as [`super::sqlite::query_on`] answers it at `now_ms`.
    pub(super) fn query(&self, query: &Query, now_ms: i64) -> Page {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let (from, to) = (query.from.as_deref(), query.to.as_deref());
        // SQLite's `sk >= from AND sk <= to AND sk > after` (`<` going backward): `after`
        // replaces the bound on its side where it is the tighter one.
        let (low, high) = match query.after.as_deref() {
            Some(after) if query.forward && from.is_none_or(|f| after >= f) => {
                (Excluded(after), to.map_or(Unbounded, Included))
            }
            Some(after) if !query.forward && to.is_none_or(|t| after <= t) => {
                (from.map_or(Unbounded, Included), Excluded(after))
            }
            _ => (from.map_or(Unbounded, Included), to.map_or(Unbounded, Included)),
        };
        let empty = match (low, high) {
            (Included(l), Included(h)) => l > h,
            (Included(l) | Excluded(l), Included(h) | Excluded(h)) => l >= h,
            _ => false,
        };
        if empty {
            return Page::default();
        }
        let range = self.rows.range::<str, _>((low, high)).filter(|(_, r)| r.live(now_ms));
        let limit = query.limit.max(1);
        let mut items = Vec::new();
        let mut more = false;
        let mut take = |(sk, row): (&String, &Row)| {
            if items.len() == limit {
                more = true;
                return false;
            }
            items.push(row.item(&query.pk, sk));
            true
        };
        if query.forward {
            for entry in range {
                if !take(entry) {
                    break;
                }
            }
        } else {
            for entry in range.rev() {
                if !take(entry) {
                    break;
                }
            }
        }
        let next = if more { items.last().map(|i| i.key.sk.clone()) } else { None };
        Page { items, next }
    }

    /// Applies one committed op on this collection, as SQLite applied it.
    fn apply(&mut self, op: &WriteOp) {
        match op {
            WriteOp::Put { key, value, expires_at_ms, expect } => {
                let version = match expect {
                    Expect::Absent => 1,
                    Expect::Version(n) => n + 1,
                    Expect::Any => self.rows.get(&key.sk).map_or(1, |r| r.version + 1),
                };
                // A copy: the op's bytes may be a slice of a larger buffer this must not keep.
                let row = Row { value: Bytes::copy_from_slice(value), version, expires_at_ms: *expires_at_ms };
                self.bytes += cost(&key.sk, &row);
                if let Some(old) = self.rows.insert(key.sk.clone(), row) {
                    self.bytes -= cost(&key.sk, &old);
                }
            }
            WriteOp::Delete { key, .. } => {
                if let Some(old) = self.rows.remove(&key.sk) {
                    self.bytes -= cost(&key.sk, &old);
                }
            }
            WriteOp::Check { .. } => {}
        }
    }
}

#[derive(Default)]
pub(super) struct Held {
    parts: HashMap<String, Part>,
    /// Collections found over the bounds, not loaded again until the next drop.
    too_big: HashSet<String>,
    bytes: usize,
    /// Changes at every write applied and every drop: a load begun before is not kept.
    seq: u64,
    /// The WAL-index header as this store's last commit (or the last drop) left it.
    base: Option<Header>,
    /// This store's writer is between its check of the header and its record of it.
    committing: bool,
}

impl Held {
    fn drop_all(&mut self) {
        self.parts.clear();
        self.too_big.clear();
        self.bytes = 0;
        self.seq += 1;
    }

    fn mark_too_big(&mut self, pk: String) {
        if self.too_big.len() >= TOO_BIG_KEPT {
            self.too_big.clear();
        }
        self.too_big.insert(pk);
    }

    fn drop_part(&mut self, pk: &str) {
        if let Some(part) = self.parts.remove(pk) {
            self.bytes -= part.bytes;
        }
    }
}

/// The cache, and what tells it another process committed.
pub(super) struct Cache {
    held: Mutex<Held>,
    /// The `-shm` file, open for reading its header.
    shm: File,
    /// The `-commit` file, whose lock every store's writer holds over its commit.
    commit_lock: File,
}

/// The file every store's writer locks over its commit and its read of the header after.
pub(super) fn commit_lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-commit");
    PathBuf::from(name)
}

impl Cache {
    /// A cache for the database at `db`, whose `-shm` file must exist (the store has a
    /// connection open in WAL mode).
    pub(super) fn open(db: &Path) -> Result<Self, StorageError> {
        let lock_path = commit_lock_path(db);
        let commit_lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StorageError::unavailable(format!("open {}", lock_path.display()), e))?;
        let mut name = db.as_os_str().to_owned();
        name.push("-shm");
        let path = PathBuf::from(name);
        let shm = File::open(&path).map_err(|e| StorageError::unavailable(format!("open {}", path.display()), e))?;
        Ok(Self { held: Mutex::new(Held::default()), shm, commit_lock })
    }

    fn header(&self) -> Option<Header> {
        let mut header = [0u8; HEADER];
        // A failed or short read is a header that moved: the cache is dropped, never trusted.
        match rustix::io::pread(&self.shm, &mut header, 0) {
            Ok(HEADER) => Some(header),
            _ => None,
        }
    }

    /// Runs `f` on the cache if the header says no other process committed since this
    /// store's last commit (dropping the cache first if one did), with the `seq` a load
    /// begun now must find still current to be kept ([`Self::keep`]). `None`: read SQLite
    /// and keep nothing, as while this store's own commit is landing (the header moved, the
    /// cache not yet written through) or when the header cannot be read.
    pub(super) fn look<T>(&self, f: impl FnOnce(&Held, u64) -> T) -> Option<T> {
        // Read under the lock: a header read before this store's commit recorded its own
        // would look like another process's commit, and drop the cache for nothing.
        let mut held = lock(&self.held);
        let header = self.header();
        if header.is_none() || header != held.base {
            if held.committing {
                return None;
            }
            held.drop_all();
            held.base = header;
            header?;
        }
        let seq = held.seq;
        Some(f(&held, seq))
    }

    /// Keeps the collections a read loaded, unless a write or a drop came since it began.
    pub(super) fn keep(&self, seq: u64, loaded: Vec<(String, Option<Part>)>) {
        let mut held = lock(&self.held);
        if held.seq != seq {
            return;
        }
        for (pk, part) in loaded {
            let Some(part) = part else {
                held.mark_too_big(pk);
                continue;
            };
            while held.bytes + part.bytes > CACHE_BYTES {
                let Some(other) = held.parts.keys().next().cloned() else { break };
                held.drop_part(&other);
            }
            held.bytes += part.bytes;
            if let Some(old) = held.parts.insert(pk, part) {
                held.bytes -= old.bytes;
            }
        }
    }

    /// A write refused on a condition, alone in its group (nothing committed): its
    /// collections are dropped, so a copy that led to the refusal is read again.
    pub(super) fn refused(&self, ops: &[WriteOp]) {
        let mut held = lock(&self.held);
        for op in ops {
            held.drop_part(&op.key().pk);
        }
    }

    /// Before this store's commit, with its write lock held (no other process can commit):
    /// drops the cache if the header moved since this store's last commit, and marks the
    /// commit as landing. Answers the lock to hold over the commit (see [`Self::committed`]).
    pub(super) fn committing(&self) -> Result<CommitGuard<'_>, StorageError> {
        let header = self.header();
        {
            let mut held = lock(&self.held);
            if header.is_none() || header != held.base {
                held.drop_all();
            }
            held.committing = true;
        }
        loop {
            match rustix::fs::flock(&self.commit_lock, rustix::fs::FlockOperation::LockExclusive) {
                Ok(()) => return Ok(CommitGuard { cache: self }),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    // No guard: the mark is taken back here, and the commit does not happen.
                    lock(&self.held).committing = false;
                    return Err(StorageError::unavailable("lock the commit file", std::io::Error::from(e)));
                }
            }
        }
    }
}

/// Held from before a commit until its outcome is in the cache: the `-commit` file's lock.
pub(super) struct CommitGuard<'c> {
    cache: &'c Cache,
}

/// A commit's outcome for the cache: the writes it applied, or doubt.
pub(super) enum Outcome<'w> {
    /// Committed: every write listed applied; those refused on a condition drop their collections.
    Applied { applied: Vec<&'w [WriteOp]>, refused: Vec<&'w [WriteOp]> },
    /// Unknown (a failed commit, a purge whose rows are not named): everything is dropped.
    Doubt,
}

impl CommitGuard<'_> {
    /// Writes a commit's outcome through, records the header it left, and lets other
    /// stores commit again. Before any write of it is answered.
    pub(super) fn committed(self, outcome: Outcome<'_>) {
        let header = self.cache.header();
        let mut held = lock(&self.cache.held);
        match outcome {
            Outcome::Applied { applied, refused } => {
                for op in applied.into_iter().flatten() {
                    let pk = &op.key().pk;
                    let Some(part) = held.parts.get_mut(pk) else { continue };
                    let before = part.bytes;
                    part.apply(op);
                    let after = part.bytes;
                    held.bytes = held.bytes + after - before;
                    if after > PART_BYTES || held.parts.get(pk).is_some_and(|p| p.rows.len() > PART_ITEMS) {
                        held.drop_part(pk);
                        held.mark_too_big(pk.clone());
                    }
                }
                for op in refused.into_iter().flatten() {
                    held.drop_part(&op.key().pk);
                }
                held.seq += 1;
            }
            Outcome::Doubt => held.drop_all(),
        }
        held.base = header;
        held.committing = false;
    }
}

impl Drop for CommitGuard<'_> {
    fn drop(&mut self) {
        // Answered `committed` or not (a panic): the lock goes, and so does the mark. Without
        // `committed`, nothing is known of the commit: drop everything.
        let mut held = lock(&self.cache.held);
        if held.committing {
            held.drop_all();
            held.base = None;
            held.committing = false;
        }
        drop(held);
        let _ = rustix::fs::flock(&self.cache.commit_lock, rustix::fs::FlockOperation::Unlock);
    }
}

impl Held {
    /// The collection `pk` if held, or whether it is known too big to hold.
    pub(super) fn part(&self, pk: &str) -> Result<&Part, bool> {
        self.parts.get(pk).ok_or_else(|| self.too_big.contains(pk))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_core::ports::state::{Key, Query, StateStore, WriteOp};
    use sluice_core::{StorageError, SystemClock};

    use super::super::sqlite::lock;
    use super::super::SqliteStateStore;
    use super::Part;

    fn put(sk: &str, value: &'static str, version: Option<u64>) -> Vec<WriteOp> {
        vec![WriteOp::replace(Key::new("p", sk), Bytes::from_static(value.as_bytes()), version)]
    }

    async fn values(store: &SqliteStateStore) -> Vec<(String, Bytes, u64)> {
        let page = store.query(&Query::all("p", 100)).await.expect("query");
        page.items.into_iter().map(|i| (i.key.sk, i.value, i.version)).collect()
    }

    fn held(store: &SqliteStateStore) -> bool {
        lock(&store.cache.held).parts.contains_key("p")
    }

    /// Another process (here a second store on the file) commits behind this store's cache:
    /// the next read sees it, a change and a new item alike, though the collection was held.
    #[tokio::test]
    async fn given_a_collection_held_when_another_store_writes_it_then_the_next_read_sees_the_write() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let first = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        let second = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        first.write(put("a", "1", None)).await.expect("write");
        assert_eq!(values(&first).await, vec![("a".into(), Bytes::from_static(b"1"), 1)]);
        assert!(held(&first), "the read loaded the collection");
        second.write(put("a", "2", Some(1))).await.expect("write");
        second.write(put("b", "1", None)).await.expect("write");
        let a = first.get(&Key::new("p", "a")).await.expect("get").expect("present");
        assert_eq!((a.value, a.version), (Bytes::from_static(b"2"), 2));
        assert_eq!(values(&first).await.len(), 2, "the other store's new item is read too");
        // And the other way: the second store's copy follows the first's writes.
        first.write(put("a", "3", Some(2))).await.expect("write");
        assert_eq!(values(&second).await[0].1, Bytes::from_static(b"3"));
    }

    /// A commit that fails leaves the database without its writes: the cache, which held the
    /// collection, must not show them either (here SQLite refuses the `COMMIT` itself, on a
    /// deferred foreign key a trigger broke, as a failed fsync or a full disk would refuse it).
    #[tokio::test]
    async fn given_a_commit_that_fails_then_the_cache_never_shows_its_writes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStateStore::open(&dir.path().join("state.db"), Arc::new(SystemClock)).expect("open");
        store.write(put("a", "1", None)).await.expect("write");
        values(&store).await;
        assert!(held(&store));
        lock(&store.writer)
            .conn
            .execute_batch(
                "PRAGMA foreign_keys = ON;
                 CREATE TEMP TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TEMP TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
                 CREATE TEMP TRIGGER doom AFTER UPDATE ON items WHEN NEW.sk = 'a'
                 BEGIN INSERT INTO child VALUES (1); END;",
            )
            .expect("a commit made to fail");
        let failed = store.write(put("a", "2", Some(1))).await;
        assert!(matches!(failed, Err(StorageError::Unavailable { .. })), "{failed:?}");
        let a = store.get(&Key::new("p", "a")).await.expect("get").expect("present");
        assert_eq!((a.value, a.version), (Bytes::from_static(b"1"), 1), "the cache is ahead of the database");
    }

    /// A read that loaded a collection before a write was written through does not put its
    /// older copy in the cache after it.
    #[tokio::test]
    async fn given_a_load_begun_before_a_write_then_its_copy_is_not_kept() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let store = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        store.write(put("a", "1", None)).await.expect("write");
        let seq = store.cache.look(|_, seq| seq).expect("the cache serves");
        let conn = rusqlite::Connection::open(&path).expect("a connection");
        let stale = Part::load(&conn, "p").expect("load");
        store.write(put("b", "1", None)).await.expect("write");
        store.cache.keep(seq, vec![("p".into(), stale)]);
        assert_eq!(values(&store).await.len(), 2, "a read answered from the copy loaded before the write");
    }

    /// Another store's commit, then this store's own on another collection before any read:
    /// its writer sees the header moved under its lock and drops the cache, rather than take
    /// the other's commit for its own.
    #[tokio::test]
    async fn given_another_stores_commit_when_this_store_commits_first_then_its_next_read_still_sees_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let first = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        let second = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        first.write(put("a", "1", None)).await.expect("write");
        values(&first).await;
        second.write(put("a", "2", Some(1))).await.expect("write");
        first.write(vec![WriteOp::create(Key::new("q", "x"), Bytes::from_static(b"1"))]).await.expect("write");
        assert_eq!(values(&first).await[0].1, Bytes::from_static(b"2"));
    }

    /// Every query answered from a collection held is the page SQLite answers: bounds,
    /// continuation, direction, limits and expired rows.
    #[tokio::test]
    async fn a_held_collection_answers_every_query_as_sqlite_does() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let store = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        let ops = (0..12)
            .map(|i| WriteOp::Put {
                key: Key::new("p", format!("{:02}", i * 2)),
                value: Bytes::from(vec![b'v'; i]),
                expires_at_ms: (i % 5 == 3).then_some(if i < 6 { 1_000 } else { i64::MAX }),
                expect: sluice_core::ports::state::Expect::Absent,
            })
            .collect();
        store.write(ops).await.expect("write");
        let conn = rusqlite::Connection::open(&path).expect("a connection");
        let part = Part::load(&conn, "p").expect("load").expect("small");
        let bounds = [None, Some("00"), Some("05"), Some("06"), Some("14"), Some("22"), Some("30")];
        let mut compared = 0;
        for from in bounds {
            for to in bounds {
                for after in bounds {
                    for forward in [true, false] {
                        for limit in [0, 1, 3, 100] {
                            let own = |b: Option<&str>| b.map(str::to_owned);
                            let query = Query {
                                pk: "p".into(),
                                from: own(from),
                                to: own(to),
                                forward,
                                limit,
                                after: own(after),
                            };
                            let sqlite = super::super::sqlite::query_on(&conn, &query, 2_000).expect("query");
                            assert_eq!(part.query(&query, 2_000), sqlite, "{query:?}");
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 7 * 7 * 7 * 2 * 4);
        for sk in ["00", "06", "07", "22", "99"] {
            assert_eq!(
                part.get("p", sk, 2_000),
                super::super::sqlite::get_on(&conn, &Key::new("p", sk), 2_000).expect("get")
            );
        }
    }
}
