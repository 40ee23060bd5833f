//! The check round's decisions (`TransactionalMessageServiceImpl.check` of RocketMQ 5.5.1):
//! the op map (`fillOpRemoveMap`), what to do with one half (`needDiscard`, `needSkip`, the
//! fresh and young stops, `checkPrepareQueueOffset`, `isNeedCheck`), and the op progress
//! (`calculateOpOffset`). The walk itself, its reads and writes are in
//! `store/transaction_check.rs`.
//!
//! # The round
//!
//! From the half progress, each half queue offset `i` in turn:
//!
//! 1. an op names `i` (the op map): resolved, passed;
//! 2. the half is read; `needDiscard` (its `TRANSACTION_CHECK_TIMES` reached the maximum) or
//!    `needSkip` (born longer ago than the file reserved time): moved to
//!    `TRANS_CHECK_MAX_TIME_TOPIC`, passed;
//! 3. stored at or after the round's start: stop (a half the round itself could not judge);
//! 4. with `CHECK_IMMUNITY_TIME_IN_SECONDS` and younger than that: resolved through the op of
//!    its `TRAN_PREPARED_QUEUE_OFFSET`, else put back with that offset (the immunity re-put),
//!    passed; without it and younger than the transaction timeout: stop;
//! 5. `isNeedCheck`: no op messages left to read and older than its immunity (or born in the
//!    future), or the last op read was born a timeout after the round began: the half needs a
//!    check; otherwise the next chunk of op messages is read and `i` judged again.
//!
//! RocketMQ sleeps one second (`SLEEP_WHILE_NO_OP`) when step 5 finds no more op messages
//! and then judges `i` again, up to the round's 60-second limit: in a broker, ops keep coming
//! from producers while the round runs. Here a round is one call with a bounded amount of
//! work from the Python service thread that paces rounds: waiting inside it would hold the
//! round (and the service thread) for nothing, since the next round reads the ops written in
//! the meantime anyway. So a round never sleeps: with no more op messages, step 5 decides on
//! what it has, and a half it still cannot judge (an immunity half younger than its immunity
//! whose re-put was not possible) ends the round, to be judged by the next.

use std::collections::{HashMap, HashSet};

use super::copy::{immunity_time_ms, need_discard, parse_java_long, CheckCount, HalfProps};

/// RocketMQ's `OP_MSG_PULL_NUMS`: op messages read per chunk.
pub(crate) const OP_CHUNK: usize = 32;

/// The op side of a round: `removeMap`, `opMsgMap` and `doneOpOffset` of
/// `TransactionalMessageServiceImpl.check`.
#[derive(Debug, Default)]
pub(crate) struct OpMap {
    /// Half queue offset -> queue offset of the op message naming it (the last one read).
    remove: HashMap<i64, i64>,
    /// Op queue offset -> the half offsets it named that are not resolved yet.
    halves_of_op: HashMap<i64, HashSet<i64>>,
    /// Op messages fully used (`doneOpOffset`; may hold an offset twice, as RocketMQ's list).
    pub(crate) done: Vec<i64>,
}

impl OpMap {
    /// `fillOpRemoveMap` for one op message at `op_offset`: `body` `None` when it has none,
    /// `remove_tag` whether its tags are `d`. Offsets below `mini` (the half progress when
    /// the round began) are left out.
    pub(crate) fn add_op(
        &mut self,
        op_offset: i64,
        remove_tag: bool,
        body: Option<&[u8]>,
        mini: i64,
    ) {
        let Some(body) = body else {
            log::error!(target: "rmqstore.transaction", "op message at op queue offset {op_offset} has no body");
            self.done.push(op_offset);
            return;
        };
        let mut set = HashSet::new();
        if remove_tag {
            for item in split_java(body) {
                let v = match std::str::from_utf8(item).ok().and_then(parse_java_long) {
                    Some(v) => v,
                    None => {
                        log::error!(
                            target: "rmqstore.transaction",
                            "op message at op queue offset {op_offset} names {:?}, not a half queue offset",
                            String::from_utf8_lossy(item)
                        );
                        -1
                    }
                };
                if v < mini {
                    continue;
                }
                self.remove.insert(v, op_offset);
                set.insert(v);
            }
        } else {
            log::error!(target: "rmqstore.transaction", "op message at op queue offset {op_offset} has a tag other than \"d\"; ignored");
        }
        if set.is_empty() {
            self.done.push(op_offset);
        } else {
            self.halves_of_op.insert(op_offset, set);
        }
    }

    /// An op message that could not be read: nothing it names is known; it counts as used,
    /// so the op progress can pass it (it is logged by the reader).
    pub(crate) fn add_unreadable(&mut self, op_offset: i64) {
        self.done.push(op_offset);
    }

    /// Step 1 of the round: whether an op names half queue offset `i` (then it is taken out
    /// of the map and its op message marked used once everything it names is resolved).
    pub(crate) fn resolve(&mut self, i: i64) -> bool {
        let Some(op) = self.remove.remove(&i) else {
            return false;
        };
        if let Some(set) = self.halves_of_op.get_mut(&op) {
            set.remove(&i);
            if set.is_empty() {
                self.halves_of_op.remove(&op);
                self.done.push(op);
            }
        }
        true
    }

    /// `checkPrepareQueueOffset`'s lookup: whether an op names the original half of an
    /// immunity re-put (its op message is then marked used, the others it names untouched).
    pub(crate) fn resolve_prepared(&mut self, prepared: i64) -> bool {
        match self.remove.remove(&prepared) {
            Some(op) => {
                self.done.push(op);
                true
            }
            None => false,
        }
    }

    /// Whether an op read so far names half queue offset `i`.
    pub(crate) fn names(&self, i: i64) -> bool {
        self.remove.contains_key(&i)
    }
}

/// Java's `String.split(",")`: the items between commas, trailing empty items dropped; a
/// body without a comma is one item (so an empty body is one empty item, and a body of commas
/// only is none).
fn split_java(body: &[u8]) -> Vec<&[u8]> {
    if !body.contains(&b',') {
        return vec![body];
    }
    let mut items: Vec<&[u8]> = body.split(|b| *b == b',').collect();
    while items.last().is_some_and(|i| i.is_empty()) {
        items.pop();
    }
    items
}

/// `calculateOpOffset`: the op progress moves over the used op messages that follow it
/// without a gap (sorted; a repeated offset ends the walk, as in RocketMQ).
pub(crate) fn calculate_op_offset(done: &mut [i64], old: i64) -> i64 {
    done.sort_unstable();
    let mut next = old;
    for &d in done.iter() {
        if d == next {
            next += 1;
        } else {
            break;
        }
    }
    next
}

/// The check's parameters (`check(transactionTimeout, transactionCheckMax, listener)`, plus
/// the clock and the file reserved time RocketMQ reads from its config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckParams {
    /// The round's start (`startTime`), and the time halves' ages are measured at.
    pub now_ms: i64,
    /// `transactionTimeOut`: a half younger than this is not checked yet.
    pub timeout_ms: i64,
    /// `transactionCheckMax`: a half checked this many times is discarded.
    pub check_max: i32,
    /// `fileReservedTime` in ms: a half born longer ago is discarded.
    pub file_reserved_ms: i64,
}

/// What one call of [`crate::MessageStore::transaction_check`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckStep {
    /// Commitlog offsets of the copies put back into the half queue whose transactions the
    /// producer's checker is to be asked about, in order.
    pub to_check: Vec<i64>,
    /// Commitlog offsets of the halves moved to `TRANS_CHECK_MAX_TIME_TOPIC`.
    pub discarded: Vec<i64>,
    /// Halves whose transactions were found committed without their op: only the op was
    /// written (the exactly-once rule), nobody asked.
    pub already_committed: u64,
    /// Half queue units looked at.
    pub examined: u64,
    /// The walk stopped (a half too young, the end of the queue, a failed put); false when
    /// it stopped because `max_to_check` copies were made, with more to do now.
    pub done: bool,
}

/// What to do with one half (steps 2 to 5 of the round).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Move it to `TRANS_CHECK_MAX_TIME_TOPIC`; `Some(n)`: `needSkip` decided after
    /// `needDiscard` put `TRANSACTION_CHECK_TIMES` = n into the map (the record shows it).
    Discard(Option<i32>),
    /// Stored at or after the round's start.
    Fresh,
    /// Younger than the transaction timeout (no immunity property).
    Young,
    /// The op of its `TRAN_PREPARED_QUEUE_OFFSET` resolves it.
    ResolvedByPrepared,
    /// Put it back with `TRANSACTION_CHECK_TIMES` = the count and
    /// `TRAN_PREPARED_QUEUE_OFFSET` (its stored one, else `None`: the half's queue offset).
    Immunity(i32),
    /// Put it back with `TRANSACTION_CHECK_TIMES` = the count, and ask.
    Check(i32),
    /// Read more op messages, then judge it again.
    MoreOps,
}

/// The op chunk last read (`pullResult` in RocketMQ's loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastOps {
    /// The last read found op messages; the last one's born time.
    Found { last_born: i64 },
    /// The last read found none (`opMsg == null`).
    None,
}

/// Steps 2 to 5 for the half `h` (born `born`, stored `stored`), `ops` being the op map so
/// far (`checkPrepareQueueOffset` takes the prepared offset's op out of it).
pub(crate) fn judge(
    p: &CheckParams,
    h: &HalfProps<'_>,
    born: i64,
    stored: i64,
    ops: &mut OpMap,
    last: LastOps,
) -> Verdict {
    let count = match need_discard(h.check_times, p.check_max) {
        CheckCount::Discard => return Verdict::Discard(None),
        CheckCount::Next(n) => n,
    };
    // needSkip: System.currentTimeMillis() - bornTimestamp > fileReservedTime (in ms).
    if p.now_ms.wrapping_sub(born) > p.file_reserved_ms {
        return Verdict::Discard(Some(count));
    }
    if stored >= p.now_ms {
        return Verdict::Fresh;
    }
    let age = p.now_ms.wrapping_sub(born);
    let mut immunity = p.timeout_ms;
    if let Some(s) = h.immunity {
        immunity = immunity_time_ms(s, p.timeout_ms);
        if age <= immunity {
            // checkPrepareQueueOffset: true passes the half; false falls through.
            match h.prepared_queue_offset {
                None => return Verdict::Immunity(count),
                Some(s) => {
                    let v = parse_java_long(s).unwrap_or_else(|| {
                        log::error!(target: "rmqstore.transaction", "TRAN_PREPARED_QUEUE_OFFSET {s:?} is not a number; read as -1");
                        -1
                    });
                    if v != -1 {
                        if ops.resolve_prepared(v) {
                            return Verdict::ResolvedByPrepared;
                        }
                        return Verdict::Immunity(count);
                    }
                }
            }
        }
    } else if (0..=immunity).contains(&age) {
        return Verdict::Young;
    }
    let need = match last {
        LastOps::None => age > immunity,
        LastOps::Found { last_born } => last_born.wrapping_sub(p.now_ms) > p.timeout_ms,
    } || age <= -1;
    if need {
        Verdict::Check(count)
    } else {
        Verdict::MoreOps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> CheckParams {
        CheckParams {
            now_ms: 1_000_000,
            timeout_ms: 6000,
            check_max: 15,
            file_reserved_ms: 72 * 3600 * 1000,
        }
    }

    fn props(raw: &[u8]) -> HalfProps<'_> {
        HalfProps::parse(raw)
    }

    #[test]
    fn op_bodies_split_as_java_does() {
        assert_eq!(split_java(b"1,2,,3,,"), vec![&b"1"[..], b"2", b"", b"3"]);
        assert_eq!(split_java(b""), vec![&b""[..]]);
        assert_eq!(split_java(b"7"), vec![&b"7"[..]]);
        assert!(split_java(b",,").is_empty());
    }

    #[test]
    fn the_op_map_resolves_and_marks_ops_done() {
        let mut m = OpMap::default();
        m.add_op(0, true, Some(b"5,6,"), 3);
        m.add_op(1, true, Some(b"1,2,"), 3); // all below the half progress
        m.add_op(2, false, Some(b"7,"), 3); // not "d"
        m.add_op(3, true, None, 3);
        m.add_op(4, true, Some(b"8,8,x,"), 3);
        assert_eq!(m.done, vec![1, 2, 3]);
        assert!(m.resolve(5));
        assert!(!m.resolve(5));
        assert_eq!(m.done, vec![1, 2, 3]);
        assert!(m.resolve(6));
        assert_eq!(m.done, vec![1, 2, 3, 0]);
        assert!(m.resolve(8));
        assert_eq!(calculate_op_offset(&mut m.done, 0), 5);
        assert_eq!(calculate_op_offset(&mut [3, 1, 2], 0), 0);
        assert_eq!(calculate_op_offset(&mut [3, 1, 2, 4], 1), 5);
        // A repeat ends the walk, as RocketMQ's loop does.
        assert_eq!(calculate_op_offset(&mut [1, 1, 2], 1), 2);
    }

    #[test]
    fn the_verdicts_follow_rocketmqs_branches() {
        let p = params();
        let mut ops = OpMap::default();
        let old = p.now_ms - 60_000;
        // Check with count 1, then n + 1.
        assert_eq!(
            judge(&p, &props(b""), old, old, &mut ops, LastOps::None),
            Verdict::Check(1)
        );
        assert_eq!(
            judge(
                &p,
                &props(b"TRANSACTION_CHECK_TIMES\x014\x02"),
                old,
                old,
                &mut ops,
                LastOps::None
            ),
            Verdict::Check(5)
        );
        // Discard by count, by age (after the count was put).
        assert_eq!(
            judge(
                &p,
                &props(b"TRANSACTION_CHECK_TIMES\x0115\x02"),
                old,
                old,
                &mut ops,
                LastOps::None
            ),
            Verdict::Discard(None)
        );
        let ancient = p.now_ms - p.file_reserved_ms - 1;
        assert_eq!(
            judge(
                &p,
                &props(b"TRANSACTION_CHECK_TIMES\x012\x02"),
                ancient,
                old,
                &mut ops,
                LastOps::None
            ),
            Verdict::Discard(Some(3))
        );
        // Fresh (stored at the round's start), young.
        assert_eq!(
            judge(&p, &props(b""), old, p.now_ms, &mut ops, LastOps::None),
            Verdict::Fresh
        );
        let young = p.now_ms - 6000;
        assert_eq!(
            judge(&p, &props(b""), young, young, &mut ops, LastOps::None),
            Verdict::Young
        );
        assert_eq!(
            judge(&p, &props(b""), young - 1, young, &mut ops, LastOps::None),
            Verdict::Check(1)
        );
        // Born in the future: checked.
        assert_eq!(
            judge(&p, &props(b""), p.now_ms + 5, old, &mut ops, LastOps::None),
            Verdict::Check(1)
        );
        // Ops were found: read more first.
        assert_eq!(
            judge(
                &p,
                &props(b""),
                old,
                old,
                &mut ops,
                LastOps::Found { last_born: old }
            ),
            Verdict::MoreOps
        );
        assert_eq!(
            judge(
                &p,
                &props(b""),
                old,
                old,
                &mut ops,
                LastOps::Found {
                    last_born: p.now_ms + 6001
                }
            ),
            Verdict::Check(1)
        );
    }

    #[test]
    fn immunity_halves_are_put_back_or_resolved_through_their_prepared_offset() {
        let p = params();
        let mut ops = OpMap::default();
        ops.add_op(0, true, Some(b"4,"), 0);
        let born = p.now_ms - 10_000; // older than the timeout, younger than 60 s
        let imm = props(b"CHECK_IMMUNITY_TIME_IN_SECONDS\x0160\x02");
        assert_eq!(
            judge(&p, &imm, born, born, &mut ops, LastOps::None),
            Verdict::Immunity(1)
        );
        let imm4 =
            props(b"CHECK_IMMUNITY_TIME_IN_SECONDS\x0160\x02TRAN_PREPARED_QUEUE_OFFSET\x014\x02");
        assert_eq!(
            judge(&p, &imm4, born, born, &mut ops, LastOps::None),
            Verdict::ResolvedByPrepared
        );
        assert_eq!(ops.done, vec![0]);
        // Not resolved: put back again.
        assert_eq!(
            judge(&p, &imm4, born, born, &mut ops, LastOps::None),
            Verdict::Immunity(1)
        );
        // Prepared offset -1: falls through; young for its immunity, no ops left: not judged.
        let imm_m1 =
            props(b"CHECK_IMMUNITY_TIME_IN_SECONDS\x0160\x02TRAN_PREPARED_QUEUE_OFFSET\x01-1\x02");
        assert_eq!(
            judge(&p, &imm_m1, born, born, &mut ops, LastOps::None),
            Verdict::MoreOps
        );
        // Older than its immunity: checked.
        let older = p.now_ms - 61_000;
        assert_eq!(
            judge(&p, &imm, older, older, &mut ops, LastOps::None),
            Verdict::Check(1)
        );
        // An immunity shorter than the timeout: a half older than it is checked at once.
        let short = props(b"CHECK_IMMUNITY_TIME_IN_SECONDS\x011\x02");
        let b = p.now_ms - 2000;
        assert_eq!(
            judge(&p, &short, b, b, &mut ops, LastOps::None),
            Verdict::Check(1)
        );
    }
}
