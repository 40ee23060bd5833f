//! Write buffers for commitlog segments (RocketMQ's `TransientStorePool`,
//! docs/architecture.md#transient-store-pool).
//!
//! With the pool enabled, a new commitlog segment borrows one anonymous, `mlock`ed buffer of the
//! segment's size; appends land in the buffer, the commit service copies the appended range into
//! the file (`commit`), and readers only ever see committed bytes. When a segment is fully
//! committed its buffer goes back to the pool (last in, first out, so a warm buffer is reused).
//! A segment created while the pool is empty is written directly through its mapping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use memmap2::{MmapMut, MmapOptions};

use crate::error::{Result, StoreError};

static POOL_MLOCK_WARNED: AtomicBool = AtomicBool::new(false);

/// Below this share of free buffers a borrow is logged as a warning (RocketMQ: 40 %).
const LOW_WATER_RATIO: f64 = 0.4;

struct Inner {
    #[cfg_attr(not(test), allow(dead_code))]
    buffer_size: usize,
    total: usize,
    free: Mutex<Vec<MmapMut>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Vec<MmapMut>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A fixed set of segment-sized write buffers, allocated and locked in memory up front.
#[derive(Clone)]
pub(crate) struct TransientStorePool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TransientStorePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransientStorePool")
            .field("buffers", &self.inner.total)
            .field("available", &self.available())
            .finish()
    }
}

impl TransientStorePool {
    /// Allocates `count` buffers of `buffer_size` bytes and `mlock`s them (`init`). When the OS
    /// refuses the lock, one warning is logged and the buffers stay unlocked.
    pub(crate) fn new(count: usize, buffer_size: i64) -> Result<TransientStorePool> {
        let size = usize::try_from(buffer_size)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| {
                StoreError::config(
                    "mapped_file_size_commit_log",
                    "a transient store pool buffer needs a positive size",
                )
            })?;
        let mut free = Vec::with_capacity(count);
        for _ in 0..count {
            let map = MmapOptions::new().len(size).map_anon().map_err(|e| {
                StoreError::io(
                    "cannot allocate a transient store pool buffer",
                    std::path::Path::new("<memory>"),
                    e,
                )
            })?;
            if let Err(e) = map.lock() {
                if !POOL_MLOCK_WARNED.swap(true, Ordering::AcqRel) {
                    log::warn!(
                        target: "rmqstore.transient_pool",
                        "mlock of a {size}-byte transient store pool buffer failed ({e}); the \
                         pool's buffers stay unlocked (raise RLIMIT_MEMLOCK or grant \
                         CAP_IPC_LOCK to lock them)"
                    );
                }
            }
            free.push(map);
        }
        Ok(TransientStorePool {
            inner: Arc::new(Inner {
                buffer_size: size,
                total: count,
                free: Mutex::new(free),
            }),
        })
    }

    /// Buffers in the pool, lent or not.
    pub(crate) fn total(&self) -> usize {
        self.inner.total
    }

    /// Buffers free to lend (`availableBufferNums`).
    pub(crate) fn available(&self) -> usize {
        self.inner.lock().len()
    }

    #[cfg(test)]
    pub(crate) fn buffer_size(&self) -> usize {
        self.inner.buffer_size
    }

    /// Lends the most recently returned buffer (`borrowBuffer`), or `None` when all are lent.
    pub(crate) fn borrow(&self) -> Option<PoolBuffer> {
        let mut free = self.inner.lock();
        let map = free.pop();
        let left = free.len();
        drop(free);
        if map.is_none() || (left as f64) < self.inner.total as f64 * LOW_WATER_RATIO {
            log::warn!(
                target: "rmqstore.transient_pool",
                "transient store pool: {left} of {} buffers left{}",
                self.inner.total,
                if map.is_none() {
                    "; this segment is written directly through its mapping"
                } else {
                    ""
                }
            );
        }
        map.map(|map| PoolBuffer {
            map: Some(map),
            pool: self.inner.clone(),
        })
    }
}

/// A buffer lent by a [`TransientStorePool`]; dropping it gives it back.
pub(crate) struct PoolBuffer {
    map: Option<MmapMut>,
    pool: Arc<Inner>,
}

impl PoolBuffer {
    pub(crate) fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len())
    }

    /// Start of the buffer. It stays valid (and at the same address) while this value lives.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.map
            .as_mut()
            .map_or(std::ptr::null_mut(), |m| m.as_mut_ptr())
    }
}

impl Drop for PoolBuffer {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            self.pool.lock().push(map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lends_last_returned_and_takes_back_on_drop() {
        let pool = TransientStorePool::new(2, 8192).unwrap();
        assert_eq!(
            (pool.total(), pool.available(), pool.buffer_size()),
            (2, 2, 8192)
        );
        let mut a = pool.borrow().unwrap();
        let pa = a.as_mut_ptr();
        let b = pool.borrow().unwrap();
        assert_eq!(pool.available(), 0);
        assert!(pool.borrow().is_none(), "an empty pool lends nothing");
        assert_eq!(a.len(), 8192);
        drop(b);
        drop(a);
        assert_eq!(pool.available(), 2);
        // LIFO: the buffer returned last is lent first.
        let mut again = pool.borrow().unwrap();
        assert_eq!(again.as_mut_ptr(), pa);
        assert!(TransientStorePool::new(1, 0).is_err());
    }
}
