//! Column vectors of bulk reads, kept after use for the next reads.
//!
//! A `read_batch` of 65,536 small messages fills about 25 MiB of fresh vectors, and the caller
//! usually drops the previous batch just after the next one is built. Left to the C allocator,
//! whether that memory comes back as pages already mapped or as fresh ones (each page faulted
//! in and zeroed by the kernel, then unmapped again) depends on its thresholds and on what else
//! the process allocated: the same read loop measured 0 faults per walk of a queue in one
//! Python process and 7,000 to 45,000 in another. Returning the vectors here when a batch is
//! dropped ([`recycle`]) and taking them back in the next read ([`VecPool::take`], under
//! [`with_pool`]) makes it the first case every time. The pool holds at most
//! [`POOL_MAX_BYTES`]; vectors it cannot keep are freed.

use std::sync::Mutex;

/// Most bytes of capacity the pool keeps (about two batches of 65,536 small messages).
pub(crate) const POOL_MAX_BYTES: usize = 64 << 20;

/// Vectors smaller than this are freed, not kept: the allocator reuses small blocks well.
pub(crate) const POOL_MIN_BYTES: usize = 64 << 10;

/// Kept vectors by element type, and the bytes of capacity they hold.
#[derive(Debug, Default)]
pub(crate) struct VecPool {
    u8s: Vec<Vec<u8>>,
    i32s: Vec<Vec<i32>>,
    i64s: Vec<Vec<i64>>,
    bytes: usize,
}

/// Element types the pool keeps.
pub(crate) trait Pooled: Copy + Sized {
    fn list(pool: &mut VecPool) -> &mut Vec<Vec<Self>>;
}

impl Pooled for u8 {
    fn list(pool: &mut VecPool) -> &mut Vec<Vec<u8>> {
        &mut pool.u8s
    }
}

impl Pooled for i32 {
    fn list(pool: &mut VecPool) -> &mut Vec<Vec<i32>> {
        &mut pool.i32s
    }
}

impl Pooled for i64 {
    fn list(pool: &mut VecPool) -> &mut Vec<Vec<i64>> {
        &mut pool.i64s
    }
}

static POOL: Mutex<VecPool> = Mutex::new(VecPool {
    u8s: Vec::new(),
    i32s: Vec::new(),
    i64s: Vec::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, VecPool> {
    // The pool holds nothing a panic could leave half-changed that matters: take it as is.
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bytes_of<T>(v: &Vec<T>) -> usize {
    v.capacity() * std::mem::size_of::<T>()
}

impl VecPool {
    /// An empty vector with room for `capacity` elements: the smallest kept one that has it
    /// (and not over four times as much, so a small read does not hold a large block), else a
    /// new one.
    pub(crate) fn take<T: Pooled>(&mut self, capacity: usize) -> Vec<T> {
        let most = capacity
            .saturating_mul(4)
            .max(POOL_MIN_BYTES / std::mem::size_of::<T>());
        let list = T::list(self);
        let best = list
            .iter()
            .enumerate()
            .filter(|(_, v)| (capacity..=most).contains(&v.capacity()))
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let v = list.swap_remove(i);
                self.bytes -= bytes_of(&v);
                v
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// Keeps `v` (emptied) when it is worth keeping and fits; gives it back otherwise.
    fn keep<T: Pooled>(&mut self, mut v: Vec<T>) -> Option<Vec<T>> {
        let size = bytes_of(&v);
        if !(POOL_MIN_BYTES..=POOL_MAX_BYTES).contains(&size) || self.bytes + size > POOL_MAX_BYTES
        {
            return Some(v);
        }
        v.clear();
        self.bytes += size;
        T::list(self).push(v);
        None
    }
}

/// Runs `f` with the process-wide pool locked (one lock for all the vectors of a read).
pub(crate) fn with_pool<R>(f: impl FnOnce(&mut VecPool) -> R) -> R {
    f(&mut pool())
}

/// Gives a vector no longer used to the pool (freed when the pool does not keep it).
pub(crate) fn recycle<T: Pooled>(v: Vec<T>) {
    let refused = pool().keep(v);
    // Freed outside the lock.
    drop(refused);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_smallest_vector_that_fits_and_respects_the_bounds() {
        let mut p = VecPool::default();
        assert!(p
            .keep(Vec::<u8>::with_capacity(POOL_MIN_BYTES - 1))
            .is_some());
        assert!(p
            .keep(Vec::<u8>::with_capacity(POOL_MAX_BYTES + 1))
            .is_some());
        let mut big = Vec::<u8>::with_capacity(4 << 20);
        big.extend_from_slice(b"old bytes");
        assert!(p.keep(big).is_none());
        assert!(p.keep(Vec::<u8>::with_capacity(1 << 20)).is_none());
        assert!(p.keep(Vec::<i64>::with_capacity(1 << 17)).is_none());
        assert_eq!(p.bytes, (4 << 20) + (1 << 20) + (1 << 20));
        // Best fit, emptied.
        let v: Vec<u8> = p.take(512 << 10);
        assert_eq!((v.len(), v.capacity()), (0, 1 << 20));
        let v: Vec<u8> = p.take(2 << 20);
        assert_eq!((v.len(), v.capacity()), (0, 4 << 20));
        // Nothing big enough: a new vector.
        let v: Vec<u8> = p.take(8 << 20);
        assert!(v.capacity() >= 8 << 20);
        // Types are kept apart.
        let v: Vec<i32> = p.take(1);
        assert_eq!(v.capacity(), 1);
        // A kept vector far larger than asked for stays kept.
        let v: Vec<i64> = p.take(1);
        assert_eq!(v.capacity(), 1);
        let v: Vec<i64> = p.take(1 << 16);
        assert_eq!(v.capacity(), 1 << 17);
        assert_eq!(p.bytes, 0);
        // The total is capped.
        for _ in 0..(POOL_MAX_BYTES / (4 << 20)) {
            assert!(p.keep(Vec::<u8>::with_capacity(4 << 20)).is_none());
        }
        assert!(p.keep(Vec::<u8>::with_capacity(4 << 20)).is_some());
        assert!(p.bytes <= POOL_MAX_BYTES);
    }
}
