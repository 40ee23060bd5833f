//! Reads and lookups on an open store: messages by queue offset, by time and by key or tag (the
//! index), queue and commitlog offsets, topics and queue ids.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::format::CqUnit;
use crate::format::{find_property, property, MessageExt};
use crate::queue::consume_queue::ConsumeQueue;
use crate::read::{GetMessageResult, TagFilter, TimeBoundary};

use super::{MessageStore, Open};

/// Total physical memory (`StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE`), 24 GiB if unknown.
pub(super) fn total_physical_memory() -> i64 {
    // SAFETY: sysinfo fills a plain struct.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut info) } == 0 {
        let total = (info.totalram as i64).saturating_mul(i64::from(info.mem_unit));
        if total > 0 {
            return total;
        }
    }
    24 * 1024 * 1024 * 1024
}

impl MessageStore {
    /// The queue `topic`/`queue_id` ready to read: on a read-only store, found even if it
    /// appeared since the last look, and refreshed up to what the writer has dispatched.
    pub(super) fn readable_queue(
        &self,
        o: &Open,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<Arc<ConsumeQueue>>> {
        if !self.read_only {
            let cq = o.cqs.find(topic, queue_id);
            if let Some(cq) = &cq {
                cq.follow_commit_log_min(o.commitlog.min_offset());
            }
            return Ok(cq);
        }
        o.commitlog.drop_removed_front_read_only()?;
        let cq = match o.cqs.find(topic, queue_id) {
            Some(cq) if cq.folder_is_current() => cq,
            _ => {
                o.cqs.discover()?;
                match o.cqs.find(topic, queue_id) {
                    Some(cq) => cq,
                    None => return Ok(None),
                }
            }
        };
        let levels = &self.schedule.levels;
        let schedule = topic == crate::schedule::SCHEDULE_TOPIC;
        let unit_tags = |d: &crate::format::RecordView<'_>| {
            let hash =
                crate::format::tags_code(crate::format::DispatchProps::scan(d.properties).tags);
            if schedule {
                crate::schedule::record_deliver_time(levels, d).unwrap_or(hash)
            } else {
                hash
            }
        };
        cq.refresh_read_only(o.commitlog.min_offset().max(0), |u| {
            o.commitlog
                .record_matches_unit(topic, queue_id, u, unit_tags)
        })?;
        Ok(Some(cq))
    }

    /// The message whose record starts at `offset`; `None` outside the commitlog.
    pub fn look_message_by_offset(&self, offset: i64) -> Result<Option<MessageExt>> {
        self.with_open(|o| {
            o.commitlog.drop_removed_front_read_only()?;
            o.commitlog.look_message(offset)
        })?
    }

    /// `getMinPhyOffset`: start of the first segment, -1 when the commitlog is empty.
    pub fn min_phy_offset(&self) -> Result<i64> {
        self.with_open(|o| {
            o.commitlog.drop_removed_front_read_only()?;
            Ok(o.commitlog.min_offset())
        })?
    }

    /// `getMaxPhyOffset`: end of the last record written.
    pub fn max_phy_offset(&self) -> Result<i64> {
        self.with_open(|o| o.commitlog.max_offset())
    }

    /// The next queue offset a put to this queue would get.
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_open(|o| o.commitlog.next_queue_offset(topic, queue_id))
    }

    /// Segment file names of the commitlog, oldest first.
    pub fn commitlog_segments(&self) -> Result<Vec<PathBuf>> {
        self.with_open(|o| {
            o.commitlog
                .queue()
                .files()
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        })
    }

    /// `isOffsetAligned`: a valid message record (CRC checked) starts at `offset`.
    pub fn is_offset_aligned(&self, offset: i64) -> Result<bool> {
        self.with_open(|o| o.commitlog.is_aligned(offset))
    }

    /// `getMessage` (docs/architecture.md#reading-by-queue) with RocketMQ's statuses and next
    /// offsets. Tags are matched by code in the consume queue and then by the real tag string, so a
    /// hash collision never returns a message of another tag.
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        filter: &TagFilter,
    ) -> Result<GetMessageResult> {
        self.with_open(|o| {
            crate::read::get_message(
                &o.commitlog,
                self.readable_queue(o, topic, queue_id)?.as_deref(),
                offset,
                max_msg_nums,
                filter,
                &crate::read::PullLimits::from_config(&self.config, total_physical_memory()),
            )
        })?
    }

    fn with_queue<T>(
        &self,
        topic: &str,
        queue_id: i32,
        absent: T,
        f: impl FnOnce(&Open, &ConsumeQueue) -> T,
    ) -> Result<T> {
        self.with_open(|o| {
            Ok(match self.readable_queue(o, topic, queue_id)? {
                Some(cq) => f(o, &cq),
                None => absent,
            })
        })?
    }

    /// `getMaxOffsetInQueue`: the next queue offset to be dispatched (0 for an unknown queue).
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| cq.max_offset())
    }

    /// `getMinOffsetInQueue` (0 for an unknown queue).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| cq.min_offset())
    }

    /// `getMessageTotalInQueue`.
    pub fn message_total_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |_, cq| {
            cq.max_offset() - cq.min_offset()
        })
    }

    /// The consume queue unit at `queue_offset`, if present.
    pub(crate) fn queue_unit(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<Option<CqUnit>> {
        self.with_queue(topic, queue_id, None, |_, cq| cq.get(queue_offset))
    }

    /// `getCommitLogOffsetInQueue`: the unit's commitlog offset, 0 when absent.
    pub fn commit_log_offset_in_queue(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<i64> {
        Ok(self
            .queue_unit(topic, queue_id, queue_offset)?
            .map_or(0, |u| u.phy_offset))
    }

    /// `getMessageStoreTimeStamp`: store timestamp of the message at a queue offset, -1 if none.
    pub fn message_store_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: i64,
    ) -> Result<i64> {
        self.with_queue(topic, queue_id, -1, |o, cq| match cq.get(queue_offset) {
            Some(u) if !u.is_pre_blank() => o.commitlog.store_timestamp_at(u.phy_offset, u.size),
            _ => -1,
        })
    }

    /// `getEarliestMessageTime(topic, queue)`: store timestamp at the queue's minimum, -1 if none.
    pub fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Result<i64> {
        let min = self.min_offset_in_queue(topic, queue_id)?;
        self.message_store_timestamp(topic, queue_id, min)
    }

    /// `getOffsetInQueueByTime` with a LOWER or UPPER boundary
    /// (docs/architecture.md#queue-lookups-and-offsets-by-time).
    pub fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
        boundary: TimeBoundary,
    ) -> Result<i64> {
        self.with_queue(topic, queue_id, 0, |o, cq| {
            crate::read::offset_by_time(&o.commitlog, cq, timestamp, boundary)
        })
    }

    /// Bulk read of a queue as Arrow column buffers (see [`crate::read::read_batch`]), with
    /// the store's read checks (`check_crc_on_read`); compressed bodies are decompressed when
    /// `decompress` is given as true, or, when `None`, as `decompress_body_on_read` says.
    /// Bodies are copied into a `binary` column; [`MessageStore::read_batch_as`] can give
    /// them as `binary_view` rows instead.
    pub fn read_batch(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        include_properties: bool,
        decompress: Option<bool>,
    ) -> Result<crate::read::BatchColumns> {
        self.read_batch_as(
            topic,
            queue_id,
            offset,
            max_msgs,
            include_properties,
            decompress,
            crate::read::BodyLayout::Binary,
        )
    }

    /// [`MessageStore::read_batch`] with the bodies in the given layout:
    /// [`BodyLayout::View`](crate::read::BodyLayout::View) gives `binary_view` rows that point
    /// into the segments' mappings (`BatchColumns::body_views` and `body_buffers`), which the
    /// batch keeps alive and unchanged (see [`crate::read::SegmentView`]).
    #[allow(clippy::too_many_arguments)]
    pub fn read_batch_as(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        include_properties: bool,
        decompress: Option<bool>,
        layout: crate::read::BodyLayout,
    ) -> Result<crate::read::BatchColumns> {
        let mut columns = crate::read::ColumnMask::ALL;
        if !include_properties {
            columns = columns.without(crate::read::Column::Properties);
        }
        let request = crate::read::ReadRequest {
            columns,
            decompress,
            body: layout,
        };
        self.read_columns(topic, queue_id, offset, max_msgs, &request)
    }

    /// Bulk read of a queue from `offset`, up to `max_msgs` messages, of the columns of
    /// `request` only (see [`crate::read::ColumnMask`]): the columns left out are not built,
    /// and their vectors in the returned batch are empty. Every record read is checked as by
    /// [`MessageStore::read_batch`] (matched to its consume queue unit, its body CRC verified
    /// with `check_crc_on_read`) whatever the mask; `rows` and `next_offset` are set even with
    /// no column.
    pub fn read_columns(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        request: &crate::read::ReadRequest,
    ) -> Result<crate::read::BatchColumns> {
        let none = crate::read::RowFilter::none();
        self.read_filtered(topic, queue_id, offset, max_msgs, request, &none)
    }

    /// [`MessageStore::read_columns`] of the rows `filter` lets through (see
    /// [`crate::read::RowFilter`]): at most `max_msgs` units are gone over, the rows filtered
    /// out are never built, and `BatchColumns::scanned` says which units were gone over (the
    /// next read starts at `next_offset`, whether or not a row was built).
    pub fn read_filtered(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msgs: usize,
        request: &crate::read::ReadRequest,
        filter: &crate::read::RowFilter,
    ) -> Result<crate::read::BatchColumns> {
        self.with_open(|o| {
            let opts = crate::read::ReadOptions {
                columns: request.columns,
                check_crc: o.commitlog.checks_crc_on_read(),
                decompress: request
                    .decompress
                    .unwrap_or_else(|| o.commitlog.decompresses_on_read()),
                body_view: request.body == crate::read::BodyLayout::View,
                view_buffer_max: crate::read::VIEW_BUFFER_MAX,
            };
            match self.readable_queue(o, topic, queue_id)? {
                Some(cq) => {
                    crate::read::read_batch(&o.commitlog, &cq, offset, max_msgs, opts, filter)
                }
                None => {
                    let mut empty = crate::read::BatchColumns::empty_of(request.columns);
                    empty.next_offset = offset.max(0);
                    Ok(empty)
                }
            }
        })?
    }

    /// Topics that have a consume queue.
    pub fn topics(&self) -> Result<Vec<String>> {
        self.with_open(|o| {
            o.cqs.discover()?;
            Ok(o.cqs.topics())
        })?
    }

    /// Queue ids of a topic, ascending.
    pub fn queue_ids(&self, topic: &str) -> Result<Vec<i32>> {
        self.with_open(|o| {
            o.cqs.discover()?;
            Ok(o.cqs.queue_ids(topic))
        })?
    }

    /// `queryMessage`: messages whose KEYS entry or UNIQ_KEY equals `key` exactly, stored within
    /// `[begin, end]`, newest first, at most `max_num`.
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        self.query_index(topic, key, false, max_num, begin, end)
    }

    /// Messages of `topic` whose TAGS value equals `tag` exactly, newest first, through the
    /// `topic#T#tags` index entries RocketMQ 5.4+ writes (and rmqstore with
    /// [`StoreConfig::index_tags`]); messages indexed without them are not found.
    pub fn query_message_by_tag(
        &self,
        topic: &str,
        tag: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        self.query_index(topic, tag, true, max_num, begin, end)
    }

    fn query_index(
        &self,
        topic: &str,
        key: &str,
        by_tag: bool,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<MessageExt>> {
        if self.read_only {
            return Err(StoreError::ReadOnly(
                "query_message (key lookups read the index files, which a read-only store does not open yet)"
                    .to_owned(),
            ));
        }
        self.with_open(|o| {
            let Some(index) = o.index.as_ref() else {
                return Ok(Vec::new());
            };
            let mut found: Vec<MessageExt> = Vec::new();
            // At most maxMsgsNumBatch results, as RocketMQ. Index answers are hash matches with
            // times rounded to seconds: read each candidate (newest first) and keep exact key
            // and time matches. Candidates are fetched in growing rounds until enough matches
            // are found or the index has no more, so hash collisions never crowd out a match.
            let max_num = max_num.min(self.config.max_msgs_num_batch.max(1) as usize);
            let mut seen = std::collections::HashSet::new();
            let mut want = max_num.saturating_mul(4).max(16);
            let mut checked = 0;
            let indexed_key = if by_tag {
                format!("{}{key}", crate::format::index::TAG_KEY_INFIX)
            } else {
                key.to_owned()
            };
            loop {
                let q = index.query_offset(
                    topic,
                    &indexed_key,
                    want,
                    begin.saturating_sub(1000),
                    i64::MAX,
                );
                for &off in q.phy_offsets.iter().skip(checked) {
                    if found.len() >= max_num {
                        break;
                    }
                    if !seen.insert(off) {
                        continue;
                    }
                    // Candidates are matched on the record as stored, then the matching one
                    // is read as every read is (CRC checked, body decompressed): a damaged
                    // record this query returns is an error, one it skips is not its concern.
                    let candidate = o.commitlog.with_record(off, |file, d, data| {
                        let props = std::str::from_utf8(d.properties).unwrap_or("");
                        let prop = |name| find_property(props, name);
                        let key_matches = if by_tag {
                            prop(property::TAGS) == Some(key)
                        } else {
                            prop(property::KEYS).is_some_and(|keys| {
                                keys.split(property::KEY_SEPARATOR)
                                    .any(|k| !k.is_empty() && k == key)
                            }) || prop(property::UNIQ_KEY) == Some(key)
                        };
                        let matches = d.topic == topic.as_bytes()
                            && key_matches
                            && (begin..=end).contains(&d.store_timestamp);
                        matches.then(|| o.commitlog.read_message(file, d, data))
                    });
                    if let Ok(Some(Some(m))) = candidate {
                        found.push(m?);
                    }
                }
                if found.len() >= max_num || q.phy_offsets.len() < want {
                    break;
                }
                checked = q.phy_offsets.len();
                want = want.saturating_mul(4);
            }
            found.sort_by(|a, b| {
                b.store_timestamp
                    .cmp(&a.store_timestamp)
                    .then(b.commit_log_offset.cmp(&a.commit_log_offset))
            });
            Ok(found)
        })?
    }
}
