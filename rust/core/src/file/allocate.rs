//! Segment allocation ahead of need (RocketMQ's `AllocateMappedFileService`).
//!
//! The append path asks for the segment it needs now and requests the one after it. A service
//! thread (driven from Python, see `rmqstore._services`) creates requested segments in the
//! background, warms them when configured, and releases the `mlock` of full segments a while
//! after they fill. Without a running service, segments are created inline, as RocketMQ does
//! when it has no allocation service.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::file::mapped_file::MappedFile;
use crate::file::transient_pool::TransientStorePool;
use crate::util::offset_to_file_name;

/// How long a put waits for the service to deliver a segment (`waitTimeOut`).
pub(crate) const ALLOCATE_WAIT: Duration = Duration::from_secs(5);
/// Delay before a full warmed segment is unlocked (`unlockMappedFile`).
pub(crate) const MUNLOCK_DELAY: Duration = Duration::from_secs(6);

#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocateConfig {
    pub(crate) file_size: i64,
    pub(crate) warm: bool,
    /// SYNC_FLUSH: force while warming.
    pub(crate) warm_sync: bool,
    pub(crate) warm_flush_pages: i64,
    /// How long after filling a warmed segment stays locked ([`MUNLOCK_DELAY`]).
    pub(crate) munlock_delay: Duration,
}

type Ready = std::result::Result<Arc<MappedFile>, String>;

#[derive(Default)]
struct State {
    pending: BTreeSet<i64>,
    in_progress: Option<i64>,
    ready: BTreeMap<i64, Ready>,
    /// Segments a put is blocked on right now: made even while stopping, and handed over.
    awaited: BTreeSet<i64>,
    service_attached: bool,
    stopped: bool,
    /// Bumped when pre-allocated segments are discarded; a segment made under an older
    /// generation is deleted instead of kept.
    generation: u64,
    unlock_queue: VecDeque<(Instant, Arc<MappedFile>)>,
}

pub(crate) struct Allocator {
    dir: PathBuf,
    cfg: AllocateConfig,
    /// New segments borrow a write buffer from it when it has one left; released at close.
    pool: Mutex<Option<TransientStorePool>>,
    state: Mutex<State>,
    cv: Condvar,
}

/// What one service step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServiceStep {
    pub allocated: u32,
    pub unlocked: u32,
    pub stopped: bool,
    /// Time spent creating (and warming) segments in this step.
    pub alloc_nanos: u64,
}

impl Allocator {
    pub(crate) fn new(
        dir: PathBuf,
        cfg: AllocateConfig,
        pool: Option<TransientStorePool>,
    ) -> Allocator {
        Allocator {
            dir,
            cfg,
            pool: Mutex::new(pool),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn create(&self, offset: i64) -> Result<Arc<MappedFile>> {
        let path = self.dir.join(offset_to_file_name(offset));
        let started = Instant::now();
        let file = MappedFile::create(&path, offset, self.cfg.file_size)?;
        if self.cfg.warm {
            // SAFETY: the file was created just now and is not handed out before this returns,
            // so nothing appends to it or commits into it.
            unsafe { file.warm(self.cfg.warm_sync, self.cfg.warm_flush_pages) }?;
        }
        let pool = self.pool.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(buffer) = pool.and_then(|p| p.borrow()) {
            file.attach_write_buffer(buffer)?;
        }
        log::debug!(
            target: "rmqstore.allocate",
            "created segment {} in {:?} (warm: {})",
            path.display(),
            started.elapsed(),
            self.cfg.warm
        );
        Ok(Arc::new(file))
    }

    /// The segment starting at `offset`, pre-allocated if the service made it, else waited for
    /// or created now. Also asks the service for the segment after it.
    pub(crate) fn obtain(&self, offset: i64) -> Result<Arc<MappedFile>> {
        let mut st = self.lock();
        let failed = |e: String| {
            StoreError::io(
                "cannot allocate segment",
                self.dir.join(offset_to_file_name(offset)),
                std::io::Error::other(e),
            )
        };
        let result = if let Some(r) = st.ready.remove(&offset) {
            r.map_err(failed)
        } else if (st.service_attached && !st.stopped) || st.in_progress == Some(offset) {
            // Also while stopping, when the service is making this very segment: creating it
            // here too would fail on the file the service is creating (a put racing close).
            if st.in_progress != Some(offset) {
                st.pending.insert(offset);
                self.cv.notify_all();
            }
            let deadline = Instant::now() + ALLOCATE_WAIT;
            st.awaited.insert(offset);
            let r = loop {
                if let Some(r) = st.ready.remove(&offset) {
                    break r.map_err(failed);
                }
                let now = Instant::now();
                // Stopping while the service makes this very segment: it is handed over when
                // done, so wait for it rather than fail the put.
                let handing_over = st.in_progress == Some(offset) && now < deadline;
                if !handing_over && (now >= deadline || st.stopped || !st.service_attached) {
                    if st.in_progress == Some(offset) {
                        // The service is still working on it: give up on this put.
                        break Err(StoreError::io(
                            "timed out waiting for the allocation of",
                            self.dir.join(offset_to_file_name(offset)),
                            std::io::Error::from(std::io::ErrorKind::TimedOut),
                        ));
                    }
                    st.pending.remove(&offset);
                    drop(st);
                    let r = self.create(offset);
                    st = self.lock();
                    break r;
                }
                st = self
                    .cv
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            };
            st.awaited.remove(&offset);
            r
        } else {
            drop(st);
            let r = self.create(offset);
            st = self.lock();
            r
        };
        // The segment after this one is made ahead, unless its end would pass the largest
        // commitlog offset (the put that needs it is then refused).
        let next = offset
            .checked_add(self.cfg.file_size)
            .filter(|n| n.checked_add(self.cfg.file_size).is_some());
        if let (true, Some(next)) = (result.is_ok() && st.service_attached && !st.stopped, next) {
            if !st.ready.contains_key(&next) && st.in_progress != Some(next) {
                st.pending.insert(next);
                self.cv.notify_all();
            }
        }
        result
    }

    /// Lets go of the transient store pool (close): its memory is freed once the segments
    /// holding its buffers are gone too.
    pub(crate) fn release_pool(&self) {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Schedules the release of a full segment's `mlock`.
    pub(crate) fn schedule_munlock(&self, file: Arc<MappedFile>) {
        if !file.is_locked() {
            return;
        }
        let mut st = self.lock();
        if st.service_attached && !st.stopped {
            st.unlock_queue
                .push_back((Instant::now() + self.cfg.munlock_delay, file));
            self.cv.notify_all();
        } else {
            drop(st);
            file.munlock();
        }
    }

    pub(crate) fn attach_service(&self) {
        let mut st = self.lock();
        st.service_attached = true;
    }

    /// One round of the service loop: waits up to `timeout` for work, then creates at most one
    /// requested segment and releases due `mlock`s.
    pub(crate) fn service_step(&self, timeout: Duration) -> ServiceStep {
        let mut out = ServiceStep::default();
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.stopped {
                out.stopped = true;
                return out;
            }
            let now = Instant::now();
            let due_unlock = st
                .unlock_queue
                .front()
                .map(|(t, _)| *t <= now)
                .unwrap_or(false);
            if !st.pending.is_empty() || due_unlock || now >= deadline {
                break;
            }
            let mut wait = deadline - now;
            if let Some((t, _)) = st.unlock_queue.front() {
                wait = wait.min(t.saturating_duration_since(now));
            }
            st = self
                .cv
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let now = Instant::now();
        let mut unlock = Vec::new();
        while st
            .unlock_queue
            .front()
            .map(|(t, _)| *t <= now)
            .unwrap_or(false)
        {
            if let Some((_, f)) = st.unlock_queue.pop_front() {
                unlock.push(f);
            }
        }
        let job = st.pending.pop_first();
        if let Some(offset) = job {
            st.in_progress = Some(offset);
        }
        let generation = st.generation;
        drop(st);
        for f in unlock {
            f.munlock();
            out.unlocked += 1;
        }
        if let Some(offset) = job {
            let started = Instant::now();
            let r = self.create(offset).map_err(|e| {
                log::error!(target: "rmqstore.allocate", "segment allocation failed: {e}");
                e.to_string()
            });
            out.alloc_nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if self.finish(offset, generation, r) {
                out.allocated += 1;
            }
        }
        out
    }

    /// Ends the service's job on the segment at `offset`: hands it over (true) unless it is
    /// no longer wanted (truncated since, or stopping with no put waiting for it), in which
    /// case it is deleted.
    fn finish(&self, offset: i64, generation: u64, r: Ready) -> bool {
        let mut st = self.lock();
        st.in_progress = None;
        let awaited = st.awaited.contains(&offset);
        let keep = st.generation == generation && (awaited || !st.stopped);
        if keep {
            st.ready.insert(offset, r);
        } else if let Ok(f) = &r {
            let _ = f.destroy();
        }
        self.cv.notify_all();
        keep
    }

    /// Stops the service (its step returns), deletes segments made but never used and releases
    /// pending `mlock`s.
    pub(crate) fn shutdown(&self) {
        let mut st = self.lock();
        st.stopped = true;
        st.service_attached = false;
        st.pending.clear();
        let ready = std::mem::take(&mut st.ready);
        let unlock = std::mem::take(&mut st.unlock_queue);
        self.cv.notify_all();
        drop(st);
        for (_, r) in ready {
            if let Ok(f) = r {
                if let Err(e) = f.destroy() {
                    log::warn!(target: "rmqstore.allocate", "{e}");
                }
            }
        }
        for (_, f) in unlock {
            f.munlock();
        }
    }

    /// Deletes the segments made ahead of need and forgets pending requests (the commitlog was
    /// truncated: they would no longer follow its last segment).
    pub(crate) fn discard_ready(&self) {
        let mut st = self.lock();
        st.generation += 1;
        st.pending.clear();
        let ready = std::mem::take(&mut st.ready);
        drop(st);
        for (_, r) in ready {
            if let Ok(f) = r {
                if let Err(e) = f.destroy() {
                    log::warn!(target: "rmqstore.allocate", "{e}");
                }
            }
        }
    }

    /// Waits (up to `timeout`) while the service is creating a segment, so shutdown does not race it.
    pub(crate) fn wait_idle(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.in_progress.is_some() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Segments pre-allocated and not yet used (for tests and diagnostics).
    pub(crate) fn ready_offsets(&self) -> Vec<i64> {
        self.lock().ready.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_segments_are_unlocked_after_the_delay_by_the_service() {
        let dir = std::env::temp_dir().join(format!("rmqstore-alloc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let alloc = Arc::new(Allocator::new(
            dir.clone(),
            AllocateConfig {
                file_size: 64 * 1024,
                warm: true,
                warm_sync: false,
                warm_flush_pages: 16,
                munlock_delay: Duration::from_millis(30),
            },
            None,
        ));
        alloc.attach_service();
        let service = {
            let alloc = alloc.clone();
            std::thread::spawn(move || {
                let mut unlocked = 0;
                loop {
                    let step = alloc.service_step(Duration::from_millis(5));
                    unlocked += step.unlocked;
                    if step.stopped {
                        return unlocked;
                    }
                }
            })
        };
        let file = alloc.obtain(0).unwrap();
        if !file.is_locked() {
            eprintln!("mlock is not permitted here; the unlock path is not exercised");
            alloc.shutdown();
            service.join().unwrap();
            return;
        }
        // The service pre-allocates (and warms) the next segment.
        let deadline = Instant::now() + Duration::from_secs(5);
        while alloc.ready_offsets() != vec![64 * 1024] {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        alloc.schedule_munlock(file.clone());
        assert!(file.is_locked(), "still locked right after filling");
        let deadline = Instant::now() + Duration::from_secs(5);
        while file.is_locked() {
            assert!(Instant::now() < deadline, "never unlocked");
            std::thread::sleep(Duration::from_millis(2));
        }
        alloc.shutdown();
        assert_eq!(service.join().unwrap(), 1);
        // Shutdown deleted the unused pre-allocated segment.
        assert!(!dir.join(offset_to_file_name(64 * 1024)).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_put_racing_shutdown_takes_over_the_segment_the_service_is_making() {
        let dir = std::env::temp_dir().join(format!("rmqstore-alloc-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let alloc = Arc::new(Allocator::new(
            dir.clone(),
            AllocateConfig {
                file_size: 64 * 1024,
                warm: false,
                warm_sync: false,
                warm_flush_pages: 16,
                munlock_delay: MUNLOCK_DELAY,
            },
            None,
        ));
        alloc.attach_service();
        // The service has taken the job for segment 0 (as `service_step` does) when the store
        // shuts down.
        let generation = {
            let mut st = alloc.lock();
            st.in_progress = Some(0);
            st.generation
        };
        alloc.shutdown();
        let put = {
            let alloc = alloc.clone();
            std::thread::spawn(move || alloc.obtain(0))
        };
        // The put waits for that segment instead of creating the same file.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !alloc.lock().awaited.contains(&0) {
            assert!(
                Instant::now() < deadline,
                "the put did not wait for the service"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let made = alloc.create(0).map_err(|e| e.to_string());
        let made_file = made
            .as_ref()
            .expect("the service makes the segment")
            .clone();
        assert!(
            alloc.finish(0, generation, made),
            "handed over, not deleted"
        );
        let got = put.join().unwrap().expect("the put gets the segment");
        assert!(Arc::ptr_eq(&got, &made_file));
        assert!(dir.join(offset_to_file_name(0)).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
