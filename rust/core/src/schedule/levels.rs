//! The delay-level table: RocketMQ's `messageDelayLevel` string parsed exactly as
//! `ScheduleMessageService.parseDelayLevel` (and the store's own copy in `DefaultMessageStore`)
//! parses it, and the level arithmetic both the put hook and dispatch use.

use crate::error::{Result, StoreError};

/// RocketMQ's default `messageDelayLevel`.
pub const DEFAULT_DELAY_LEVELS: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// The parsed table: `delays[i]` is the delay in ms of level `i + 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayLevels {
    delays: Vec<i64>,
}

impl DelayLevels {
    /// Parses a level string as `parseDelayLevel` does: Java's `split(" ")` (trailing empty
    /// items dropped, any other empty item is an error), each item a `Long.parseLong` number
    /// followed by one unit of `s`, `m`, `h` or `d`; level = 1-based position. A malformed
    /// string (which makes RocketMQ's `load()` fail, so its broker does not start) is a
    /// [`StoreError::Config`] naming `message_delay_level`. A delay that overflows a Java long
    /// (which Java would silently wrap) is refused too.
    pub fn parse(s: &str) -> Result<DelayLevels> {
        let bad = |reason: String| StoreError::config("message_delay_level", reason);
        let mut items: Vec<&str> = s.split(' ').collect();
        while items.len() > 1 && items.last().is_some_and(|i| i.is_empty()) {
            items.pop();
        }
        if items.len() == 1 && items[0].is_empty() && !s.is_empty() {
            // Java's split of a string of spaces only gives an empty array: no levels.
            items.clear();
        }
        let mut delays = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let level = i + 1;
            let Some(unit) = item.chars().last() else {
                return Err(bad(format!(
                    "level {level} is empty in '{s}' (levels are separated by one space)"
                )));
            };
            let ms: i64 = match unit {
                's' => 1000,
                'm' => 60_000,
                'h' => 3_600_000,
                'd' => 86_400_000,
                _ => {
                    return Err(bad(format!(
                        "level {level} ('{item}') must end with a unit s, m, h or d in '{s}'"
                    )))
                }
            };
            let digits = &item[..item.len() - 1];
            let n: i64 = parse_java_long(digits).ok_or_else(|| {
                bad(format!(
                    "level {level} ('{item}') must be a whole number followed by s, m, h or d in '{s}'"
                ))
            })?;
            let delay = n.checked_mul(ms).ok_or_else(|| {
                bad(format!(
                    "level {level} ('{item}') is too long a delay in '{s}'"
                ))
            })?;
            delays.push(delay);
        }
        if delays.is_empty() {
            return Err(bad(format!("'{s}' holds no level")));
        }
        Ok(DelayLevels { delays })
    }

    /// The highest level (`maxDelayLevel`).
    pub fn max_level(&self) -> i32 {
        self.delays.len() as i32
    }

    /// Delay in ms of `level` (1-based), `None` outside `1..=max_level`.
    pub fn delay_ms(&self, level: i32) -> Option<i64> {
        let i = usize::try_from(level.checked_sub(1)?).ok()?;
        self.delays.get(i).copied()
    }

    /// Delays of levels 1..=max, in ms.
    pub fn delays(&self) -> &[i64] {
        &self.delays
    }

    /// `computeDeliverTimestamp`: store time + the level's delay, or store time + 1000 for a
    /// level the table lacks (Java long arithmetic: wraps).
    pub fn deliver_timestamp(&self, level: i32, store_timestamp: i64) -> i64 {
        match self.delay_ms(level) {
            Some(d) => d.wrapping_add(store_timestamp),
            None => store_timestamp.wrapping_add(1000),
        }
    }

    /// The consume queue tags code of a schedule-topic record whose `DELAY` is `delay`
    /// (`checkMessageAndReturnSize`): level clamped to the maximum; for a level above 0 the
    /// deliver time, else `None` (the TAGS hash stays). `delay` that is not a Java int is
    /// [`NotANumber`] (RocketMQ's check fails on it).
    pub fn schedule_tags_code(
        &self,
        delay: &str,
        store_timestamp: i64,
    ) -> Result<Option<i64>, NotANumber> {
        let level = parse_java_int(delay).ok_or(NotANumber)?;
        let level = level.min(self.max_level());
        Ok((level > 0).then(|| self.deliver_timestamp(level, store_timestamp)))
    }
}

/// A `DELAY` that `Integer.parseInt` refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotANumber;

impl Default for DelayLevels {
    fn default() -> Self {
        DelayLevels::parse(DEFAULT_DELAY_LEVELS).expect("the default level string parses")
    }
}

/// `Integer.parseInt(s)` for ASCII input: optional sign, decimal digits, within `i32`.
/// (Java also takes non-ASCII decimal digits; a DELAY written with them is refused here.)
pub fn parse_java_int(s: &str) -> Option<i32> {
    if !valid_java_number(s) {
        return None;
    }
    s.parse().ok()
}

/// `Long.parseLong(s)` for ASCII input.
pub fn parse_java_long(s: &str) -> Option<i64> {
    if !valid_java_number(s) {
        return None;
    }
    s.parse().ok()
}

/// An optional `+` or `-` and at least one ASCII digit (what Rust's parse also takes, spelled
/// out so that a change there cannot widen what is accepted).
fn valid_java_number(s: &str) -> bool {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_has_rocketmqs_18_levels() {
        let l = DelayLevels::default();
        assert_eq!(l.max_level(), 18);
        assert_eq!(l.delay_ms(1), Some(1000));
        assert_eq!(l.delay_ms(5), Some(60_000));
        assert_eq!(l.delay_ms(17), Some(3_600_000));
        assert_eq!(l.delay_ms(18), Some(7_200_000));
        assert_eq!(l.delay_ms(0), None);
        assert_eq!(l.delay_ms(19), None);
        assert_eq!(l.delay_ms(i32::MIN), None);
    }

    #[test]
    fn parsing_follows_java_split_and_parse_long() {
        let l = DelayLevels::parse("1s 2m 3h 4d").unwrap();
        assert_eq!(l.delays(), &[1000, 120_000, 10_800_000, 345_600_000]);
        // Trailing spaces are dropped by Java's split; a sign and leading zeros are numbers.
        let l = DelayLevels::parse("+1s 010s -1s  ").unwrap();
        assert_eq!(l.delays(), &[1000, 10_000, -1000]);
        for bad in [
            "",
            " ",
            "1x",
            "1s  2s",
            " 1s",
            "s",
            "1.5s",
            "1 s",
            "１s",
            "1S",
            "99999999999999999d",
        ] {
            let e = DelayLevels::parse(bad).unwrap_err();
            assert!(
                e.to_string().starts_with("message_delay_level: "),
                "{bad:?}: {e}"
            );
        }
        assert_eq!(
            DelayLevels::parse("1x").unwrap_err().to_string(),
            "message_delay_level: level 1 ('1x') must end with a unit s, m, h or d in '1x'"
        );
    }

    #[test]
    fn tags_codes_clamp_the_level_and_fall_back_to_a_second() {
        let l = DelayLevels::parse("1s 5s").unwrap();
        assert_eq!(l.schedule_tags_code("1", 100), Ok(Some(1100)));
        assert_eq!(l.schedule_tags_code("2", 100), Ok(Some(5100)));
        assert_eq!(l.schedule_tags_code("+02", 100), Ok(Some(5100)));
        assert_eq!(l.schedule_tags_code("99", 100), Ok(Some(5100)));
        assert_eq!(l.schedule_tags_code("0", 100), Ok(None));
        assert_eq!(l.schedule_tags_code("-3", 100), Ok(None));
        assert_eq!(l.schedule_tags_code("x", 100), Err(NotANumber));
        assert_eq!(l.schedule_tags_code("2147483648", 100), Err(NotANumber));
        assert_eq!(l.deliver_timestamp(7, 100), 1100);
        assert_eq!(l.deliver_timestamp(1, i64::MAX), i64::MIN + 999);
        assert_eq!(parse_java_int("+"), None);
        assert_eq!(parse_java_int("-2147483648"), Some(i32::MIN));
    }
}
