//! The put hook of timer messages: the timer part of RocketMQ's `HookUtils.handleScheduleMessage`
//! (`isRolledTimerMessage`, `checkIfTimerMessage`, `transformTimerMessage`). A message with
//! `TIMER_DELAY_SEC`, `TIMER_DELAY_MS` or `TIMER_DELIVER_MS` (in that precedence) and a deliver
//! time in the future is moved to queue 0 of `rmq_sys_wheel_timer` with `TIMER_OUT_MS` (the
//! deliver time rounded down to the precision), `REAL_TOPIC` and `REAL_QID`; the timer engine
//! delivers it when due. The hook runs before the delay-level hook: a message with a `DELAY`
//! level loses its timer properties here and is the delay-level hook's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::commitlog::Batch;
use crate::format::{property, sysflag, Message, PutMessageStatus};
use crate::store::{PutBatch, PutMessageHook};

use super::wheel::TimerWheel;
use super::{props, TimerSettings, TIMER_TOPIC};

/// The timer hook of a store: its settings and, when the engine runs, the wheel (for flow
/// control).
pub(crate) struct TimerHook {
    settings: TimerSettings,
    wheel: Option<Arc<TimerWheel>>,
    /// State of the generator behind `isReject`'s `RANDOM.nextInt(1000)`.
    rng: AtomicU64,
}

/// What a put looks like to the hook: the fields a timer transformation reads or changes.
pub(crate) struct PutView<'a> {
    pub topic: &'a mut String,
    pub queue_id: &'a mut i32,
    pub properties: &'a mut Vec<(String, String)>,
    pub sys_flag: i32,
}

impl TimerHook {
    pub(crate) fn new(settings: TimerSettings, wheel: Option<Arc<TimerWheel>>) -> TimerHook {
        let seed = (crate::util::now_millis() as u64) ^ (u64::from(std::process::id()) << 32);
        TimerHook {
            settings,
            wheel,
            rng: AtomicU64::new(seed | 1),
        }
    }

    /// A number in `0..1000` (xorshift; flow control needs no more than that).
    fn next_below_1000(&self) -> i64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        (x % 1000) as i64
    }

    /// `TimerMessageStore.isReject`: refuses when the slot of `deliver_ms` holds more than
    /// `timerCongestNumEachSlot` messages, at random in proportion to the excess, and always at
    /// twice as many.
    fn is_reject(&self, deliver_ms: i64) -> bool {
        let Some(wheel) = &self.wheel else {
            return false;
        };
        let congest = i64::from(wheel.num(deliver_ms));
        let limit = i64::from(self.settings.congest_num_each_slot);
        if congest <= limit {
            return false;
        }
        if congest >= limit * 2 {
            return true;
        }
        let threshold = 1000.0 * (congest - limit) as f64 / (limit as f64 + 0.1);
        self.next_below_1000() as f64 > threshold
    }

    /// `handleScheduleMessage`'s timer part on one put, at time `now`.
    pub(crate) fn apply(&self, put: PutView<'_>, now: i64) -> Result<(), PutMessageStatus> {
        transform(put, now, &self.settings, |ms| self.is_reject(ms))
    }
}

/// The timer transformation (see the module header); `is_reject` is the flow control check
/// for a rounded deliver time.
pub(crate) fn transform(
    put: PutView<'_>,
    now: i64,
    settings: &TimerSettings,
    is_reject: impl Fn(i64) -> bool,
) -> Result<(), PutMessageStatus> {
    let tran = sysflag::transaction_value(put.sys_flag);
    if tran != sysflag::TRANSACTION_NOT_TYPE && tran != sysflag::TRANSACTION_COMMIT_TYPE {
        return Ok(());
    }
    // isRolledTimerMessage: a message the engine puts back to the timer topic.
    if put.topic.as_str() == TIMER_TOPIC {
        return Ok(());
    }
    // Without a timer property nothing below changes the message (a malformed DELAY is the
    // delay-level hook's to refuse).
    if ![
        props::TIMER_DELAY_SEC,
        props::TIMER_DELAY_MS,
        props::TIMER_DELIVER_MS,
    ]
    .iter()
    .any(|name| props::get(put.properties, name).is_some())
    {
        return Ok(());
    }
    // getDelayTimeLevel: Integer.parseInt of DELAY (a malformed one fails the put in RocketMQ).
    let delay_level = match props::get(put.properties, property::DELAY) {
        None => 0,
        Some(v) => v
            .parse::<i32>()
            .map_err(|_| PutMessageStatus::MessageIllegal)?,
    };
    // checkIfTimerMessage
    if delay_level > 0 {
        for name in [
            props::TIMER_DELIVER_MS,
            props::TIMER_DELAY_SEC,
            props::TIMER_DELAY_MS,
        ] {
            props::remove(put.properties, name);
        }
        return Ok(());
    }
    if props::get(put.properties, props::TIMER_OUT_MS).is_some() {
        return Ok(());
    }
    let sec = props::get(put.properties, props::TIMER_DELAY_SEC);
    let ms = props::get(put.properties, props::TIMER_DELAY_MS);
    let deliver = props::get(put.properties, props::TIMER_DELIVER_MS);
    if !settings.enable {
        return Err(PutMessageStatus::WheelTimerNotEnable);
    }
    // transformTimerMessage: Long.parseLong, Java's wrapping long arithmetic.
    let parse = |v: &str| {
        v.parse::<i64>()
            .map_err(|_| PutMessageStatus::WheelTimerMsgIllegal)
    };
    let mut deliver_ms = if let Some(s) = sec {
        now.wrapping_add(parse(s)?.wrapping_mul(1000))
    } else if let Some(m) = ms {
        now.wrapping_add(parse(m)?)
    } else {
        parse(deliver.unwrap_or_default())?
    };
    if deliver_ms > now {
        if deliver_ms - now > i64::from(settings.max_delay_sec) * 1000 {
            return Err(PutMessageStatus::WheelTimerMsgIllegal);
        }
        deliver_ms = round_deliver_ms(deliver_ms, settings.precision_ms);
        if is_reject(deliver_ms) {
            return Err(PutMessageStatus::WheelTimerFlowControl);
        }
        let real_topic = std::mem::replace(put.topic, TIMER_TOPIC.to_owned());
        props::set(put.properties, props::TIMER_OUT_MS, deliver_ms.to_string());
        props::set(put.properties, props::REAL_TOPIC, real_topic);
        props::set(put.properties, props::REAL_QID, put.queue_id.to_string());
        *put.queue_id = 0;
    } else if props::get(put.properties, props::TIMER_DEL_UNIQKEY).is_some() {
        // A delete marker for a time already past has nothing left to delete.
        return Err(PutMessageStatus::WheelTimerMsgIllegal);
    }
    Ok(())
}

/// The slot time of a deliver time: rounded down to the precision, and an exact multiple one
/// precision earlier (so the slot, which fires once its whole interval has passed, is never
/// late by a full step and never early).
pub(crate) fn round_deliver_ms(deliver_ms: i64, precision_ms: i32) -> i64 {
    let p = i64::from(precision_ms);
    if deliver_ms % p == 0 {
        deliver_ms - p
    } else {
        deliver_ms / p * p
    }
}

impl PutMessageHook for TimerHook {
    fn name(&self) -> &str {
        "timerMessage"
    }

    fn before_put(&self, msg: &mut Message) -> Result<(), PutMessageStatus> {
        let sys_flag = msg.sys_flag;
        self.apply(
            PutView {
                topic: &mut msg.topic,
                queue_id: &mut msg.queue_id,
                properties: &mut msg.properties,
                sys_flag,
            },
            crate::util::now_millis(),
        )
    }

    /// Only a message with a timer property can be changed or refused (a `DELAY` alone is the
    /// delay-level hook's): the others are appended without a copy.
    /// (Nor can a message that has its TIMER_OUT_MS already and no `DELAY`: one the timer
    /// engine delivers.)
    fn applies_to(&self, msg: &Message) -> bool {
        may_act_on(&msg.topic, &msg.properties)
    }

    /// The same rule on a batch's shared topic and properties.
    fn applies_to_batch(&self, batch: &Batch<'_>) -> bool {
        may_act_on(batch.topic, batch.properties)
    }

    /// Without a timer property there is nothing to act on, nor in the timer topic itself.
    fn may_apply_to_raw(&self, topic: &str, _has_delay: bool, has_timer: bool) -> bool {
        has_timer && topic != crate::timer::TIMER_TOPIC
    }

    /// A batch is a `MessageExtBrokerInner` to RocketMQ's hook too: its shared properties are
    /// transformed as one message's, and every message of it goes to the timer topic.
    fn before_put_batch(&self, batch: &mut PutBatch<'_>) -> Result<(), PutMessageStatus> {
        self.apply(
            PutView {
                topic: &mut batch.topic,
                queue_id: &mut batch.queue_id,
                properties: &mut batch.properties,
                sys_flag: 0,
            },
            crate::util::now_millis(),
        )
    }
}

/// Whether the timer hook may change or refuse a put of `topic` with `properties` (see
/// [`PutMessageHook::applies_to`] on [`TimerHook`]).
fn may_act_on(topic: &str, properties: &[(String, String)]) -> bool {
    if topic == TIMER_TOPIC {
        return false;
    }
    let (mut timer, mut out, mut delay) = (false, false, false);
    for (k, _) in properties {
        match k.as_str() {
            props::TIMER_DELAY_SEC | props::TIMER_DELAY_MS | props::TIMER_DELIVER_MS => {
                timer = true;
            }
            props::TIMER_OUT_MS => out = true,
            property::DELAY => delay = true,
            _ => {}
        }
    }
    timer && (!out || delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TimerSettings {
        TimerSettings {
            enable: true,
            precision_ms: 1000,
            max_delay_sec: 259_200,
            roll_window_slot: 172_800,
            congest_num_each_slot: i32::MAX,
            append_topic_for_delete_key: false,
        }
    }

    struct Put {
        topic: String,
        queue_id: i32,
        properties: Vec<(String, String)>,
        sys_flag: i32,
    }

    fn put(props: &[(&str, &str)]) -> Put {
        Put {
            topic: "TopicA".into(),
            queue_id: 3,
            properties: props
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            sys_flag: 0,
        }
    }

    fn run(p: &mut Put, now: i64, s: &TimerSettings) -> Result<(), PutMessageStatus> {
        transform(
            PutView {
                topic: &mut p.topic,
                queue_id: &mut p.queue_id,
                properties: &mut p.properties,
                sys_flag: p.sys_flag,
            },
            now,
            s,
            |_| false,
        )
    }

    fn prop<'a>(p: &'a Put, k: &str) -> Option<&'a str> {
        props::get(&p.properties, k)
    }

    const NOW: i64 = 1_700_000_000_123;

    #[test]
    fn delay_ms_moves_the_message_to_the_timer_topic() {
        let mut p = put(&[("TAGS", "a"), ("TIMER_DELAY_MS", "5000")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!((p.topic.as_str(), p.queue_id), (TIMER_TOPIC, 0));
        // 1_700_000_005_123 rounded down to the second.
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000005000"));
        assert_eq!(prop(&p, "REAL_TOPIC"), Some("TopicA"));
        assert_eq!(prop(&p, "REAL_QID"), Some("3"));
        // The input property stays, as in RocketMQ.
        assert_eq!(prop(&p, "TIMER_DELAY_MS"), Some("5000"));
        assert_eq!(prop(&p, "TAGS"), Some("a"));
    }

    #[test]
    fn precedence_is_sec_then_ms_then_deliver() {
        let mut p = put(&[
            ("TIMER_DELIVER_MS", "1700000100000"),
            ("TIMER_DELAY_MS", "20000"),
            ("TIMER_DELAY_SEC", "10"),
        ]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000010000"));
        let mut p = put(&[
            ("TIMER_DELIVER_MS", "1700000100000"),
            ("TIMER_DELAY_MS", "20000"),
        ]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000020000"));
        let mut p = put(&[("TIMER_DELIVER_MS", "1700000100001")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000100000"));
    }

    #[test]
    fn an_exact_multiple_is_one_step_earlier() {
        let mut p = put(&[("TIMER_DELIVER_MS", "1700000100000")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000099000"));
        let s = TimerSettings {
            precision_ms: 100,
            ..settings()
        };
        let mut p = put(&[("TIMER_DELIVER_MS", "1700000000300")]);
        run(&mut p, NOW, &s).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), Some("1700000000200"));
        assert_eq!(round_deliver_ms(1250, 100), 1200);
        assert_eq!(round_deliver_ms(1200, 100), 1100);
        assert_eq!(round_deliver_ms(999, 500), 500);
    }

    #[test]
    fn a_deliver_time_now_or_past_is_stored_in_its_own_topic() {
        for v in [NOW.to_string(), (NOW - 1).to_string(), "0".into()] {
            let mut p = put(&[("TIMER_DELIVER_MS", &v)]);
            run(&mut p, NOW, &settings()).unwrap();
            assert_eq!((p.topic.as_str(), p.queue_id), ("TopicA", 3));
            assert_eq!(prop(&p, "TIMER_OUT_MS"), None);
        }
        let mut p = put(&[("TIMER_DELAY_MS", "-5")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(p.topic, "TopicA");
        // ... but a delete marker for the past is illegal.
        let mut p = put(&[("TIMER_DELIVER_MS", "5"), ("TIMER_DEL_UNIQKEY", "k")]);
        assert_eq!(
            run(&mut p, NOW, &settings()),
            Err(PutMessageStatus::WheelTimerMsgIllegal)
        );
    }

    #[test]
    fn too_long_malformed_and_disabled() {
        let s = settings();
        let mut p = put(&[("TIMER_DELAY_SEC", "259200")]);
        run(&mut p, NOW, &s).unwrap();
        assert_eq!(p.topic, TIMER_TOPIC);
        let mut p = put(&[("TIMER_DELAY_SEC", "259201")]);
        assert_eq!(
            run(&mut p, NOW, &s),
            Err(PutMessageStatus::WheelTimerMsgIllegal)
        );
        assert_eq!(p.topic, "TopicA");
        for bad in ["", "1.5", " 5", "5s", "99999999999999999999"] {
            let mut p = put(&[("TIMER_DELAY_MS", bad)]);
            assert_eq!(
                run(&mut p, NOW, &s),
                Err(PutMessageStatus::WheelTimerMsgIllegal),
                "{bad:?}"
            );
        }
        let off = TimerSettings {
            enable: false,
            ..settings()
        };
        let mut p = put(&[("TIMER_DELAY_MS", "1000")]);
        assert_eq!(
            run(&mut p, NOW, &off),
            Err(PutMessageStatus::WheelTimerNotEnable)
        );
        // Disabled, a message without timer properties passes.
        let mut p = put(&[("TAGS", "x")]);
        run(&mut p, NOW, &off).unwrap();
    }

    #[test]
    fn delay_level_wins_and_timer_properties_go() {
        let mut p = put(&[
            ("DELAY", "3"),
            ("TIMER_DELAY_MS", "1000"),
            ("TIMER_DELAY_SEC", "1"),
            ("TIMER_DELIVER_MS", "1"),
            ("TAGS", "t"),
        ]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(p.topic, "TopicA");
        assert_eq!(
            p.properties,
            vec![
                ("DELAY".to_owned(), "3".to_owned()),
                ("TAGS".to_owned(), "t".to_owned())
            ]
        );
        // DELAY 0 is no delay level: the timer applies.
        let mut p = put(&[("DELAY", "0"), ("TIMER_DELAY_MS", "1000")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(p.topic, TIMER_TOPIC);
        let mut p = put(&[("DELAY", "x"), ("TIMER_DELAY_MS", "1000")]);
        assert_eq!(
            run(&mut p, NOW, &settings()),
            Err(PutMessageStatus::MessageIllegal)
        );
        // Without a timer property a malformed DELAY is not this hook's.
        let mut p = put(&[("DELAY", "x")]);
        run(&mut p, NOW, &settings()).unwrap();
    }

    #[test]
    fn skipped_for_rolled_already_timed_and_transactional_messages() {
        let mut p = put(&[("TIMER_DELAY_MS", "1000")]);
        p.topic = TIMER_TOPIC.into();
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(prop(&p, "TIMER_OUT_MS"), None);
        let mut p = put(&[("TIMER_DELAY_MS", "1000"), ("TIMER_OUT_MS", "5")]);
        run(&mut p, NOW, &settings()).unwrap();
        assert_eq!(p.topic, "TopicA");
        for (flag, moved) in [
            (sysflag::TRANSACTION_PREPARED_TYPE, false),
            (sysflag::TRANSACTION_ROLLBACK_TYPE, false),
            (sysflag::TRANSACTION_COMMIT_TYPE, true),
        ] {
            let mut p = put(&[("TIMER_DELAY_MS", "1000")]);
            p.sys_flag = flag;
            run(&mut p, NOW, &settings()).unwrap();
            assert_eq!(p.topic == TIMER_TOPIC, moved, "{flag}");
        }
    }

    #[test]
    fn a_message_the_hook_does_not_act_on_passes_unchanged() {
        let hook = TimerHook::new(settings(), None);
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("TAGS", "a"), ("KEYS", "k")],
            &[("DELAY", "3")],
            &[("DELAY", "bad")],
            &[("TIMER_OUT_MS", "5"), ("REAL_TOPIC", "x")],
            &[("TIMER_DEL_UNIQKEY", "k")],
            // What the engine delivers: TIMER_OUT_MS set, the input properties kept.
            &[("TIMER_DELAY_MS", "100"), ("TIMER_OUT_MS", "5")],
        ];
        for props in cases {
            let mut m = Message {
                topic: "TopicA".into(),
                properties: put(props).properties,
                ..Message::default()
            };
            assert!(!hook.applies_to(&m), "{props:?}");
            let before = m.clone();
            hook.before_put(&mut m).unwrap();
            assert_eq!(
                (&m.topic, m.queue_id, &m.properties),
                (&before.topic, before.queue_id, &before.properties),
                "{props:?}"
            );
        }
        let m = Message {
            properties: put(&[("TIMER_DELAY_MS", "1")]).properties,
            ..Message::default()
        };
        assert!(hook.applies_to(&m));
        let m = Message {
            properties: put(&[
                ("TIMER_DELAY_MS", "1"),
                ("TIMER_OUT_MS", "5"),
                ("DELAY", "1"),
            ])
            .properties,
            ..Message::default()
        };
        assert!(hook.applies_to(&m));
    }

    #[test]
    fn flow_control_refuses_with_its_status() {
        let mut p = put(&[("TIMER_DELAY_MS", "1000")]);
        let r = transform(
            PutView {
                topic: &mut p.topic,
                queue_id: &mut p.queue_id,
                properties: &mut p.properties,
                sys_flag: 0,
            },
            NOW,
            &settings(),
            |ms| {
                assert_eq!(ms, 1_700_000_001_000);
                true
            },
        );
        assert_eq!(r, Err(PutMessageStatus::WheelTimerFlowControl));
        assert_eq!(p.topic, "TopicA");
    }
}
