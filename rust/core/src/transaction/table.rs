//! The in-memory transaction table: what this process knows of each transaction it prepared,
//! copied or ended, keyed by transaction id, in stripes. A stripe's mutex is the lock of every
//! transaction in it (the per-transaction lock of the exactly-once rule, see the module above).
//!
//! Ended transactions are kept for a while (so a second end is answered from memory) and then
//! forgotten, two generations per stripe: when a stripe's current map is full, its older map
//! is dropped (its pending entries carried over) and the current one becomes the older one.
//! A forgotten transaction is answered by the lookup of the records (`lookup`), which gives the
//! same answer, only slower. Pending transactions are never forgotten.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

/// Stripes of the table (a power of two).
const STRIPES: usize = 256;
/// Entries a stripe's current map holds before it becomes the older generation (with 256
/// stripes: 65,536 recent ends in each generation; small enough that the table's lookups
/// mostly hit the CPU caches). A forgotten end is found again by the records (`lookup`), which
/// first makes every record written visible to it.
const GENERATION: usize = 256;

/// Where a transaction stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxPhase {
    /// Prepared (or copied by the check), not ended.
    Pending,
    /// The real message was stored.
    Committed,
    RolledBack,
    /// Moved to `TRANS_CHECK_MAX_TIME_TOPIC` by the check.
    #[allow(dead_code)] // set by the check round
    Discarded,
}

impl TxPhase {
    #[allow(dead_code)] // the check round's
    pub(crate) fn is_ended(self) -> bool {
        self != TxPhase::Pending
    }
}

/// What the table holds of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxEntry {
    pub(crate) phase: TxPhase,
    /// Commitlog offset of the transaction's latest half (the original, or the check's last
    /// copy).
    pub(crate) half_offset: i64,
    /// Its half queue offset (what an op names).
    pub(crate) half_queue_offset: i64,
}

/// A transaction id as a table key: the 32 uppercase hex digits of an IPv4 `UNIQ_KEY` packed
/// in 128 bits (no allocation), anything else as text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TxKey {
    Hex(u128),
    Text(Box<str>),
}

impl TxKey {
    pub(crate) fn of(id: &str) -> TxKey {
        match parse_hex128(id) {
            Some(v) => TxKey::Hex(v),
            None => TxKey::Text(id.into()),
        }
    }

    /// The key's hash, computed once (`Hashed`).
    fn hashed(self) -> Hashed {
        let mut h = FoldHasher::default();
        self.hash(&mut h);
        Hashed {
            hash: h.finish(),
            key: self,
        }
    }
}

/// A key with its hash (each map operation of a decision hashes it again otherwise).
#[derive(Clone, Debug)]
pub(crate) struct Hashed {
    hash: u64,
    key: TxKey,
}

impl PartialEq for Hashed {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl Eq for Hashed {}

impl Hash for Hashed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Hashed {
    fn stripe(&self) -> usize {
        // Not the maps' own bits (a bucket index is the low bits, a tag the top 7): a stripe
        // whose keys shared their tag would compare keys on every probe.
        (self.hash >> 40) as usize & (STRIPES - 1)
    }
}

/// The maps' hasher: the key's hash as computed (`Hashed` writes it alone).
#[derive(Default)]
pub(crate) struct PassHasher(u64);

impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `Hashed`; a fold keeps it a hash anyway.
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

/// 32 uppercase hex digits as a number (`None` for anything else).
pub(crate) fn parse_hex128(id: &str) -> Option<u128> {
    let b = id.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let mut v: u128 = 0;
    for &c in b {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u128::from(d);
    }
    Some(v)
}

/// A multiply-fold hasher (the keys are ids, not attacker-chosen map keys of a server).
#[derive(Default)]
pub(crate) struct FoldHasher {
    state: u64,
}

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl FoldHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.state = (self.state.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FoldHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64: every bit of the state reaches every bit of the hash.
        let mut s = self.state;
        s ^= s >> 33;
        s = s.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        s ^= s >> 33;
        s = s.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        s ^ (s >> 33)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(last) ^ (rest.len() as u64) << 59);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        self.add(i as u64);
    }
}

type Map = HashMap<Hashed, TxEntry, BuildHasherDefault<PassHasher>>;

#[derive(Debug, Default)]
pub(crate) struct Stripe {
    current: Map,
    older: Map,
    /// Pending entries in both maps.
    pending: usize,
}

impl Stripe {
    fn get(&self, key: &Hashed) -> Option<TxEntry> {
        self.current
            .get(key)
            .or_else(|| self.older.get(key))
            .copied()
    }

    fn set(&mut self, key: &Hashed, entry: TxEntry) {
        if let Some(e) = self.current.get_mut(key) {
            if e.phase == TxPhase::Pending {
                self.pending -= 1;
            }
            if entry.phase == TxPhase::Pending {
                self.pending += 1;
            }
            *e = entry;
            return;
        }
        // Not in the current map (looked up above).
        let before = self.older.remove(key);
        if before.is_some_and(|e| e.phase == TxPhase::Pending) {
            self.pending -= 1;
        }
        if entry.phase == TxPhase::Pending {
            self.pending += 1;
        }
        if before.is_none() && self.current.len() >= GENERATION.max(self.pending * 2) {
            self.rotate();
        } else if self.current.capacity() == 0 {
            self.current.reserve(GENERATION);
        }
        self.current.insert(key.clone(), entry);
    }

    /// Sets the entry of a key known to be in no map (a fresh generated id).
    fn insert_new(&mut self, key: Hashed, entry: TxEntry) {
        if entry.phase == TxPhase::Pending {
            self.pending += 1;
        }
        if self.current.len() >= GENERATION.max(self.pending * 2) {
            self.rotate();
        } else if self.current.capacity() == 0 {
            // A stripe's first entry: room for a generation at once (not grown by rehashing).
            self.current.reserve(GENERATION);
        }
        self.current.insert(key, entry);
    }

    fn remove(&mut self, key: &Hashed) -> Option<TxEntry> {
        let e = self.current.remove(key).or_else(|| self.older.remove(key));
        if e.is_some_and(|e| e.phase == TxPhase::Pending) {
            self.pending -= 1;
        }
        e
    }

    /// Forgets the older generation's ended entries (its pending ones move to the current
    /// map), then makes the current map the older one.
    fn rotate(&mut self) {
        // The older map's pending entries move to the current one, which becomes the older
        // one; the emptied map keeps its storage as the next current one (no allocation,
        // no fresh pages, no growth by rehashing).
        for (k, e) in self.older.drain() {
            if e.phase == TxPhase::Pending {
                self.current.insert(k, e);
            }
        }
        std::mem::swap(&mut self.older, &mut self.current);
        self.current.reserve(GENERATION);
    }
}

/// The table (see the module header).
#[derive(Debug)]
pub(crate) struct TxTable {
    stripes: Box<[Mutex<Stripe>]>,
}

impl TxTable {
    pub(crate) fn new() -> TxTable {
        TxTable {
            stripes: (0..STRIPES)
                .map(|_| Mutex::new(Stripe::default()))
                .collect(),
        }
    }

    /// Locks the stripe of `key`: the lock of that transaction.
    pub(crate) fn lock(&self, key: TxKey) -> TxGuard<'_> {
        let key = key.hashed();
        let stripe = self.stripes[key.stripe()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        TxGuard { stripe, key }
    }

    /// Locks the transaction `id`.
    pub(crate) fn lock_id(&self, id: &str) -> TxGuard<'_> {
        self.lock(TxKey::of(id))
    }

    /// Brings the entries of `keys` into the CPU caches ahead of the per-transaction lookups
    /// of a walk over many transactions (the check round). The keys are made first (into
    /// `scratch`), then looked up back to back with nothing else in between, so that their
    /// cache misses overlap, where the walk pays each one alone between the work of two
    /// halves. (Measured: interleaving the key making with the lookups loses most of the gain;
    /// grouping the keys by stripe, one lock per stripe, adds nothing.) Nothing is changed or
    /// decided here: each transaction is looked up again under its lock when it is decided.
    pub(crate) fn warm(&self, keys: impl IntoIterator<Item = TxKey>, scratch: &mut Vec<Hashed>) {
        scratch.clear();
        scratch.extend(keys.into_iter().map(TxKey::hashed));
        for key in scratch.iter() {
            let stripe = self.stripes[key.stripe()]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            std::hint::black_box(stripe.get(key));
        }
    }

    /// Forgets everything (after a truncation: the records decide again).
    pub(crate) fn clear(&self) {
        for s in self.stripes.iter() {
            *s.lock().unwrap_or_else(|p| p.into_inner()) = Stripe::default();
        }
    }

    /// Pending transactions in the table.
    pub(crate) fn pending(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).pending as u64)
            .sum()
    }
}

impl Default for TxTable {
    fn default() -> Self {
        Self::new()
    }
}

/// One transaction's lock, with its table entry.
pub(crate) struct TxGuard<'a> {
    stripe: MutexGuard<'a, Stripe>,
    key: Hashed,
}

impl TxGuard<'_> {
    pub(crate) fn get(&self) -> Option<TxEntry> {
        self.stripe.get(&self.key)
    }

    pub(crate) fn set(&mut self, entry: TxEntry) {
        self.stripe.set(&self.key, entry);
    }

    /// `TxGuard::set` for an id known to be new (generated by this process just now): no
    /// lookup first.
    pub(crate) fn set_new(self, entry: TxEntry) {
        let TxGuard { mut stripe, key } = self;
        stripe.insert_new(key, entry);
    }

    #[allow(dead_code)] // the check round's
    pub(crate) fn remove(&mut self) -> Option<TxEntry> {
        self.stripe.remove(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(phase: TxPhase, at: i64) -> TxEntry {
        TxEntry {
            phase,
            half_offset: at,
            half_queue_offset: at,
        }
    }

    #[test]
    fn hex_ids_pack_and_text_ids_stay_text() {
        assert_eq!(
            TxKey::of("0123456789ABCDEF0123456789ABCDEF"),
            TxKey::Hex(0x0123_4567_89AB_CDEF_0123_4567_89AB_CDEF)
        );
        // Lowercase is another id: kept as text, never equal to the uppercase one.
        assert!(matches!(
            TxKey::of("0123456789abcdef0123456789abcdef"),
            TxKey::Text(_)
        ));
        assert!(matches!(TxKey::of("order-1"), TxKey::Text(_)));
        assert!(matches!(TxKey::of(""), TxKey::Text(_)));
    }

    #[test]
    fn ended_entries_are_forgotten_after_two_generations_pending_ones_never() {
        let t = TxTable::new();
        // Find ids of one stripe.
        let stripe = TxKey::of("P").hashed().stripe();
        let ids: Vec<String> = (0..)
            .map(|i| format!("id-{i}"))
            .filter(|id| TxKey::of(id).hashed().stripe() == stripe)
            .take(GENERATION * 3 + 10)
            .collect();
        t.lock_id("P").set(entry(TxPhase::Pending, 7));
        for (i, id) in ids.iter().enumerate() {
            t.lock_id(id).set(entry(TxPhase::Committed, i as i64));
        }
        assert_eq!(t.lock_id("P").get(), Some(entry(TxPhase::Pending, 7)));
        assert_eq!(t.pending(), 1);
        // The newest are remembered, the oldest forgotten.
        let last = ids.last().unwrap();
        assert!(t.lock_id(last).get().is_some());
        assert!(t.lock_id(&ids[0]).get().is_none());
        let mut g = t.lock_id("P");
        g.set(entry(TxPhase::RolledBack, 7));
        drop(g);
        assert_eq!(t.pending(), 0);
        assert_eq!(
            t.lock_id("P").remove().map(|e| e.phase),
            Some(TxPhase::RolledBack)
        );
        assert!(t.lock_id("P").get().is_none());
    }

    #[test]
    fn warming_changes_no_entry_and_no_generation() {
        let t = TxTable::new();
        let ids: Vec<String> = (0..5000).map(|i| format!("{i:032X}")).collect();
        for (i, id) in ids.iter().enumerate() {
            let phase = if i % 3 == 0 {
                TxPhase::Committed
            } else {
                TxPhase::Pending
            };
            t.lock_id(id).set(entry(phase, i as i64));
        }
        let before: Vec<Option<TxEntry>> = ids.iter().map(|id| t.lock_id(id).get()).collect();
        let pending = t.pending();
        // Known and unknown keys, hex and text, a key twice.
        let keys = ids
            .iter()
            .map(|id| TxKey::of(id))
            .chain(["nope", "nope", "order-1"].map(TxKey::of));
        let mut scratch = Vec::new();
        t.warm(keys, &mut scratch);
        t.warm(std::iter::empty(), &mut scratch);
        assert!(scratch.is_empty());
        let after: Vec<Option<TxEntry>> = ids.iter().map(|id| t.lock_id(id).get()).collect();
        assert_eq!(before, after);
        assert_eq!(t.pending(), pending);
        assert!(t.lock_id("nope").get().is_none());
    }

    #[test]
    fn many_pending_entries_in_one_stripe_stay_and_do_not_rotate_each_put() {
        let t = TxTable::new();
        let stripe = TxKey::of("x").hashed().stripe();
        let ids: Vec<String> = (0..)
            .map(|i| format!("{i:032X}"))
            .filter(|id| TxKey::of(id).hashed().stripe() == stripe)
            .take(GENERATION * 3)
            .collect();
        for (i, id) in ids.iter().enumerate() {
            t.lock_id(id).set(entry(TxPhase::Pending, i as i64));
        }
        assert_eq!(t.pending(), ids.len() as u64);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(t.lock_id(id).get(), Some(entry(TxPhase::Pending, i as i64)));
        }
    }
}
