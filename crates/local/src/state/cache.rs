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
//!   the whole cache. This store's writer reads the header under SQLite's write lock just
//!   before its `COMMIT`, and takes the header after as its own only if the change counter
//!   (`iChange`) moved by exactly its commit: a writer of any kind (another store, the
//!   sqlite3 CLI) that commits between that `COMMIT` and the read after moves it further,
//!   and the cache is dropped. No lock of this store's own is needed for that.
//! - **Reads racing writes.** A collection loaded by a read is kept only if no commit began,
//!   no write was applied and nothing was dropped since that read began (`seq`), and no
//!   commit is landing: otherwise the load may miss a write this process already answered,
//!   or hold one the cache is about to apply.
//! - **Doubt.** A write refused on a condition drops its collections (a stale copy heals at
//!   once); a commit whose outcome is unknown, or a purge of expired rows (which rows is
//!   not said), drops everything.
//!
//! Memory is bounded: a collection over [`PART_ITEMS`] rows or [`PART_BYTES`] is not held
//! (and remembered as too big until the next drop), and each collection costs its rows,
//! its key and a fixed overhead (an empty one too), so that past [`CACHE_BYTES`] in all,
//! whether by a load or by a write, the collections used least recently are let go.
//!
//! Where another process commits all the time (two busy processes on one data directory),
//! each of its commits drops what this one loaded before it served: after such a drop the
//! cache loads nothing for a number of reads (answered by SQLite alone) that doubles while
//! such drops keep coming before the cache served more reads than it loaded collections,
//! up to [`SKIP_MOST`], so that setup costs about what no cache would.

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
/// Most loads skipped after a drop another process's commit caused ([`Held::skip`]).
const SKIP_MOST: u32 = 1024;
/// What a row costs beyond its value and sort key, for the bounds.
const ROW_OVERHEAD: usize = 64;
/// What a collection held costs beyond its rows and its key (the map's entry, the tree).
const PART_OVERHEAD: usize = 128;
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
    /// The cache's tick at this collection's last use.
    used: u64,
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
    /// What the collections held cost ([`charge`]): never over [`CACHE_BYTES`] once a
    /// keep or a commit is done with the cache.
    bytes: usize,
    /// Changes at every commit begun, every write applied and every drop: a load begun
    /// before is not kept.
    seq: u64,
    /// Counts the cache's uses: each collection's last (`Part::used`) says which to let go first.
    tick: u64,
    /// The WAL-index header as this store's last commit (or the last drop) left it.
    base: Option<Header>,
    /// The header under SQLite's write lock just before this store's commit, while it lands.
    landing: Option<Option<Header>>,
    /// Loads still to skip (their reads answered by SQLite alone) since the last drop
    /// another process's commit caused: where another process commits all the time, a
    /// collection loaded is dropped before it serves, and loading it costs more than no cache.
    skip: u32,
    /// What the next such drop sets `skip` to: doubled at each drop that came before the
    /// cache served more reads than it loaded collections since the last, halved otherwise.
    backoff: u32,
    /// Reads served and collections loaded since the last drop another process caused.
    served: u64,
    loaded: u64,
}

/// What holding `part` as `pk` costs against [`CACHE_BYTES`]: its rows, its key and the
/// map's entry, so an empty collection (a read of one that does not exist) is not free.
fn charge(pk: &str, part: &Part) -> usize {
    pk.len() + part.bytes + PART_OVERHEAD
}

/// The header's `iChange` (bytes 8..12, in the host's byte order): SQLite adds 1 at every
/// commit that writes to the WAL (`sqlite3WalFrames`), and nothing else moves it but a
/// recovery of the WAL-index, which starts it again from 0.
fn changes(header: &Header) -> u32 {
    u32::from_ne_bytes([header[8], header[9], header[10], header[11]])
}

impl Held {
    fn drop_all(&mut self) {
        self.parts.clear();
        self.too_big.clear();
        self.bytes = 0;
        self.seq += 1;
    }

    /// Drops everything for another process's commit (none if no header was known: the
    /// first read, or after a header that could not be read), and backs off loading.
    fn drop_foreign(&mut self) {
        self.drop_all();
        if self.base.is_none() {
            return;
        }
        self.backoff =
            if self.served > self.loaded { self.backoff / 2 } else { (self.backoff * 2).clamp(1, SKIP_MOST) };
        self.skip = self.backoff;
        (self.served, self.loaded) = (0, 0);
    }

    fn mark_too_big(&mut self, pk: String) {
        if self.too_big.len() >= TOO_BIG_KEPT {
            self.too_big.clear();
        }
        self.too_big.insert(pk);
    }

    fn drop_part(&mut self, pk: &str) {
        if let Some(part) = self.parts.remove(pk) {
            self.bytes -= charge(pk, &part);
        }
    }

    fn hold(&mut self, pk: String, mut part: Part) {
        self.tick += 1;
        part.used = self.tick;
        self.bytes += charge(&pk, &part);
        if let Some(old) = self.parts.insert(pk.clone(), part) {
            self.bytes -= charge(&pk, &old);
        }
    }

    /// Back within [`CACHE_BYTES`] if over it: lets go of the collections used least
    /// recently, down to three quarters of the budget (so one sort serves many evictions),
    /// never `keep` (the collection just written or loaded).
    fn shrink(&mut self, keep: &str) {
        if self.bytes <= CACHE_BYTES {
            return;
        }
        let mut by_use: Vec<(u64, String)> =
            self.parts.iter().filter(|(pk, _)| *pk != keep).map(|(pk, p)| (p.used, pk.clone())).collect();
        by_use.sort_unstable();
        for (_, pk) in by_use {
            if self.bytes <= CACHE_BYTES / 4 * 3 {
                break;
            }
            self.drop_part(&pk);
        }
        if self.bytes > CACHE_BYTES {
            self.drop_part(keep);
        }
    }

    /// The collection `pk` if held (now its most recent use), or whether to load it: not
    /// if known too big, nor while loads are skipped (this read is counted against them).
    pub(super) fn part(&mut self, pk: &str) -> Result<&Part, bool> {
        self.tick += 1;
        let tick = self.tick;
        match self.parts.get_mut(pk) {
            Some(part) => {
                part.used = tick;
                self.served += 1;
                Ok(part)
            }
            None if self.too_big.contains(pk) => Err(false),
            None if self.skip > 0 => {
                self.skip -= 1;
                Err(false)
            }
            None => {
                self.loaded += 1;
                Err(true)
            }
        }
    }
}

/// The cache, and what tells it another process committed.
pub(super) struct Cache {
    held: Mutex<Held>,
    /// The `-shm` file, open for reading its header.
    shm: File,
}

impl Cache {
    /// A cache for the database at `db`, whose `-shm` file must exist (the store has a
    /// connection open in WAL mode).
    pub(super) fn open(db: &Path) -> Result<Self, StorageError> {
        let mut name = db.as_os_str().to_owned();
        name.push("-shm");
        let path = PathBuf::from(name);
        let shm = File::open(&path).map_err(|e| StorageError::unavailable(format!("open {}", path.display()), e))?;
        Ok(Self { held: Mutex::new(Held::default()), shm })
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
    pub(super) fn look<T>(&self, f: impl FnOnce(&mut Held, u64) -> T) -> Option<T> {
        // Read under the lock: a header read before this store's commit recorded its own
        // would look like another process's commit, and drop the cache for nothing.
        let mut held = lock(&self.held);
        let header = self.header();
        if header.is_none() || header != held.base {
            if held.landing.is_some() {
                return None;
            }
            held.drop_foreign();
            held.base = header;
            header?;
        }
        let seq = held.seq;
        Some(f(&mut held, seq))
    }

    /// Keeps the collections a read loaded, unless a commit began, a write was applied or
    /// the cache dropped since it began, or a commit is landing (its snapshot may hold that
    /// commit, which [`CommitGuard::committed`] would then apply a second time).
    pub(super) fn keep(&self, seq: u64, loaded: Vec<(String, Option<Part>)>) {
        let mut held = lock(&self.held);
        if held.seq != seq || held.landing.is_some() {
            return;
        }
        for (pk, part) in loaded {
            let Some(part) = part else {
                held.mark_too_big(pk);
                continue;
            };
            held.hold(pk.clone(), part);
            held.shrink(&pk);
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
    /// drops the cache if the header moved since this store's last commit, notes the header
    /// the commit starts from, and marks the commit as landing (no load begun before it, or
    /// while it lands, is kept).
    pub(super) fn committing(&self) -> CommitGuard<'_> {
        let header = self.header();
        let mut held = lock(&self.held);
        if header.is_none() || header != held.base {
            held.drop_foreign();
        }
        held.seq += 1;
        held.landing = Some(header);
        CommitGuard { cache: self }
    }
}

/// Held from before a commit until its outcome is in the cache.
pub(super) struct CommitGuard<'c> {
    cache: &'c Cache,
}

/// A commit's outcome for the cache: the writes it applied, or doubt.
pub(super) enum Outcome<'w> {
    /// Committed: every write listed applied; those refused on a condition drop their
    /// collections. `wrote`: the transaction changed rows, kept or rolled back to a
    /// savepoint (either way the commit wrote to the WAL and moved the header).
    Applied { applied: Vec<&'w [WriteOp]>, refused: Vec<&'w [WriteOp]>, wrote: bool },
    /// Unknown (a failed commit, a purge whose rows are not named): everything is dropped.
    Doubt,
}

/// Whether the header went from `before` (under the write lock, before this store's commit)
/// to `after` by that commit alone: `iChange` one on for a commit that changed rows, the
/// header unmoved for one that did not. Anything else is another writer's commit too, one
/// landed between this store's `COMMIT` and its read of the header after (the lock was
/// released then): the cache, which holds none of its writes, must be dropped.
fn only_ours(before: Option<Header>, after: Option<Header>, changed: bool) -> bool {
    match (before, after) {
        (Some(before), Some(after)) if changed => changes(&after) == changes(&before).wrapping_add(1),
        (Some(before), Some(after)) => before == after,
        _ => false,
    }
}

impl CommitGuard<'_> {
    /// Writes a commit's outcome through and records the header it left. Before any write
    /// of it is answered.
    pub(super) fn committed(self, outcome: Outcome<'_>) {
        let header = self.cache.header();
        let mut held = lock(&self.cache.held);
        let before = held.landing.take().flatten();
        match outcome {
            Outcome::Applied { applied, refused, wrote } if only_ours(before, header, wrote) => {
                for op in applied.into_iter().flatten() {
                    let pk = &op.key().pk;
                    held.tick += 1;
                    let tick = held.tick;
                    let Some(part) = held.parts.get_mut(pk) else { continue };
                    part.used = tick;
                    let before = charge(pk, part);
                    part.apply(op);
                    let after = charge(pk, part);
                    held.bytes = held.bytes + after - before;
                    if held.parts.get(pk).is_some_and(|p| p.bytes > PART_BYTES || p.rows.len() > PART_ITEMS) {
                        held.drop_part(pk);
                        held.mark_too_big(pk.clone());
                    } else {
                        held.shrink(pk);
                    }
                }
                for op in refused.into_iter().flatten() {
                    held.drop_part(&op.key().pk);
                }
                held.seq += 1;
            }
            Outcome::Applied { .. } => held.drop_foreign(),
            Outcome::Doubt => held.drop_all(),
        }
        held.base = header;
    }
}

#[cfg(test)]
impl Cache {
    /// Whether the collection `pk` is held.
    pub(super) fn holds(&self, pk: &str) -> bool {
        lock(&self.held).parts.contains_key(pk)
    }
}

impl Drop for CommitGuard<'_> {
    fn drop(&mut self) {
        // Without `committed` (a panic), nothing is known of the commit: drop everything.
        let mut held = lock(&self.cache.held);
        if held.landing.take().is_some() {
            held.drop_all();
            held.base = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use sluice_core::ports::state::{Expect, Key, Query, StateStore, WriteOp};
    use sluice_core::{StorageError, SystemClock};

    use super::super::sqlite::lock;
    use super::super::SqliteStateStore;
    use super::{only_ours, Outcome, Part, CACHE_BYTES, HEADER};

    /// A store on a new database in a directory of its own (kept alive by the caller).
    fn fresh() -> (tempfile::TempDir, SqliteStateStore) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStateStore::open(&dir.path().join("state.db"), Arc::new(SystemClock)).expect("open");
        (dir, store)
    }

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
        let (dir, store) = fresh();
        let path = dir.path().join("state.db");
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
        let (dir, store) = fresh();
        let path = dir.path().join("state.db");
        let ops = (0..12)
            .map(|i| WriteOp::Put {
                key: Key::new("p", format!("{:02}", i * 2)),
                value: Bytes::from(vec![b'v'; i]),
                expires_at_ms: (i % 5 == 3).then_some(if i < 6 { 1_000 } else { i64::MAX }),
                expect: Expect::Absent,
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

    /// Commits on `conn` (another connection, as this store's own `COMMIT` or another
    /// writer's, which takes no lock of this store's) the change of `p/a` to `value`.
    fn commit_on(conn: &rusqlite::Connection, value: &str, version: u64) {
        conn.execute(
            "UPDATE items SET value = ?1, version = ?2 WHERE pk = 'p' AND sk = 'a'",
            rusqlite::params![value.as_bytes(), version as i64],
        )
        .expect("a commit");
    }

    /// A read whose snapshot begins after this store's `COMMIT` but whose load is offered to
    /// the cache before the commit is written through: it holds the write already, so keeping
    /// it would have the write applied twice (the cache a version ahead of SQLite).
    #[tokio::test]
    async fn given_a_load_that_saw_a_landing_commit_then_the_commit_is_not_applied_twice() {
        let (dir, store) = fresh();
        let path = dir.path().join("state.db");
        store.write(put("a", "1", None)).await.expect("write");
        let seq = store.cache.look(|_, seq| seq).expect("the cache serves");
        let conn = rusqlite::Connection::open(&path).expect("a connection");
        let guard = store.cache.committing();
        commit_on(&conn, "2", 2);
        let loaded = Part::load(&conn, "p").expect("load");
        store.cache.keep(seq, vec![("p".into(), loaded)]);
        let ops = vec![WriteOp::Put {
            key: Key::new("p", "a"),
            value: Bytes::from_static(b"2"),
            expires_at_ms: None,
            expect: Expect::Any,
        }];
        guard.committed(Outcome::Applied { applied: vec![&ops], refused: Vec::new(), wrote: true });
        let a = store.get(&Key::new("p", "a")).await.expect("get").expect("present");
        assert_eq!((a.value, a.version), (Bytes::from_static(b"2"), 2), "the cache is ahead of SQLite");
    }

    /// A writer that takes no lock of this store's (an older build, the sqlite3 CLI) commits
    /// between this store's `COMMIT` and its read of the header after: the header then moved
    /// by two commits, not one, and the next read sees the other writer's change.
    #[tokio::test]
    async fn given_a_commit_between_this_stores_commit_and_its_header_read_then_the_next_read_sees_it() {
        let (dir, store) = fresh();
        let path = dir.path().join("state.db");
        store.write(put("a", "1", None)).await.expect("write");
        values(&store).await;
        assert!(held(&store));
        let conn = rusqlite::Connection::open(&path).expect("a connection");
        let guard = store.cache.committing();
        commit_on(&conn, "2", 2); // this store's own commit
        commit_on(&conn, "3", 3); // the other writer's, in the window
        let ops = put("a", "2", Some(1));
        guard.committed(Outcome::Applied { applied: vec![&ops], refused: Vec::new(), wrote: true });
        let a = store.get(&Key::new("p", "a")).await.expect("get").expect("present");
        assert_eq!((a.value, a.version), (Bytes::from_static(b"3"), 3), "the other writer's commit is missed");
    }

    /// The header after a commit is this store's alone only as `iChange` (bytes 8..12) says.
    #[test]
    fn a_header_is_taken_as_this_stores_commit_only_if_its_change_counter_moved_as_the_commit_did() {
        let at = |change: u32, frame: u8| {
            let mut header = [0u8; HEADER];
            header[8..12].copy_from_slice(&change.to_ne_bytes());
            header[16] = frame;
            Some(header)
        };
        let cases = [
            (at(7, 1), at(8, 2), true, true),
            (at(u32::MAX, 1), at(0, 2), true, true),
            (at(7, 1), at(9, 3), true, false),
            (at(7, 1), at(7, 1), true, false),
            (at(7, 1), at(7, 1), false, true),
            (at(7, 1), at(8, 2), false, false),
            (at(7, 1), at(7, 2), false, false),
            (None, at(8, 2), true, false),
            (at(7, 1), None, false, false),
        ];
        for (i, (before, after, changed, ours)) in cases.into_iter().enumerate() {
            assert_eq!(only_ours(before, after, changed), ours, "case {i}");
        }
    }

    /// What the cache holds, as it accounts it and as its collections add up.
    fn accounted(store: &SqliteStateStore) -> (usize, usize, usize) {
        let held = lock(&store.cache.held);
        let sum = held.parts.iter().map(|(pk, part)| super::charge(pk, part)).sum();
        (held.bytes, sum, held.parts.len())
    }

    /// Reads of many collections that do not exist (names a client chooses), then
    /// collections loaded small and grown by this store's writes: the cache stays within
    /// its budget, letting go of those used least recently (not one read all along).
    #[tokio::test]
    async fn given_many_collections_read_and_written_then_the_cache_stays_within_its_budget() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SqliteStateStore::open(&dir.path().join("state.db"), Arc::new(SystemClock)).expect("open");
        let seq = store.cache.look(|_, seq| seq).expect("the cache serves");
        store.cache.keep(seq, vec![("hot".into(), Some(Part::default()))]);
        let name = "n".repeat(1000);
        for chunk in 0..200 {
            let seq = store.cache.look(|held, seq| held.part("hot").map(drop).map(|()| seq));
            let seq = seq.expect("the cache serves").expect("the collection read all along is held");
            let absent = (0..1000).map(|i| (format!("{name}-{chunk}-{i}"), Some(Part::default()))).collect();
            store.cache.keep(seq, absent);
        }
        let (bytes, sum, parts) = accounted(&store);
        assert!(bytes <= CACHE_BYTES && bytes == sum, "{bytes} bytes accounted, {sum} held");
        assert!(parts < 200_000, "every empty collection held: {parts}");
        let grown: Vec<String> = (0..200).map(|i| format!("grown-{i:03}")).collect();
        let seq = store.cache.look(|_, seq| seq).expect("the cache serves");
        store.cache.keep(seq, grown.iter().map(|pk| (pk.clone(), Some(Part::default()))).collect());
        let value = Bytes::from(vec![b'v'; 200 << 10]);
        for round in 0..4 {
            let ops: Vec<WriteOp> = grown
                .iter()
                .map(|pk| WriteOp::replace(Key::new(pk.clone(), format!("{round}")), value.clone(), None))
                .collect();
            // Written through without SQLite: the header does not move, as for no change.
            let guard = store.cache.committing();
            guard.committed(Outcome::Applied { applied: vec![&ops], refused: Vec::new(), wrote: false });
            let (bytes, sum, _) = accounted(&store);
            assert!(bytes <= CACHE_BYTES && bytes == sum, "round {round}: {bytes} bytes accounted, {sum} held");
        }
    }

    /// Another process commits between every two reads of this store's: each load would be
    /// dropped before it serves, so the cache stops loading (backing off in reads, doubling
    /// while such commits keep coming) and loads again once they stop.
    #[tokio::test]
    async fn given_another_process_committing_between_reads_then_the_cache_stops_loading_until_they_stop() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("state.db");
        let first = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        let second = SqliteStateStore::open(&path, Arc::new(SystemClock)).expect("open");
        first.write(put("a", "1", None)).await.expect("write");
        let mut loads = 0;
        for i in 0..20 {
            second.write(vec![WriteOp::create(Key::new("q", format!("{i}")), Bytes::new())]).await.expect("write");
            first.get(&Key::new("p", "a")).await.expect("get").expect("present");
            loads += usize::from(held(&first));
        }
        assert!(loads <= 2, "loaded {loads} times in 20 reads, each dropped by the next commit");
        let mut reads = 0;
        while !held(&first) && reads < 2 * super::SKIP_MOST {
            first.get(&Key::new("p", "a")).await.expect("get").expect("present");
            reads += 1;
        }
        assert!(held(&first), "the cache never loads again once the other process stops");
    }
}
