//! Row filters of a bulk read ([`RowFilter`]): conditions on a message's tag and store time
//! that a bulk read applies while it scans, so that the rows they rule out are never built (no
//! body, key or property copied for them).
//!
//! - **Tags.** A set of tag values, and whether a message without a tag matches. A consume
//!   queue unit holds the tag's Java `hashCode` (0 without a tag): a unit whose code is none of
//!   the set's codes is passed over without its record being read. A code that matches is only
//!   a hint (two tags can share a code, "Aa" and "BB" do): the record's real `TAGS` value
//!   decides, as the `tags` column shows it (the last non-empty `TAGS` value). Units whose code
//!   is not a tag's hash are never passed over by code: those of the schedule topic hold the
//!   delivery time, and a code outside the `int` range (a ConsumeQueueExt address) is no hash.
//! - **Store time.** An inclusive range of store timestamps in milliseconds, compared with each
//!   record's own time. It is not turned into a range of offsets: store times do not always
//!   grow with offsets (a writer's clock that stepped back), so a bound by bisection over the
//!   queue could leave out rows that match.

use crate::format::{for_each_property, RecordView};
use crate::util::java_hash;

/// What a [`RowFilter`] says of tags: the tag values that match (`None`: any tag), and whether
/// a message without a tag matches.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TagCondition {
    /// Tag values, none empty (the `tags` column is never an empty string).
    values: Option<Vec<String>>,
    /// Their codes, sorted.
    codes: Vec<i32>,
    /// Whether a message without a tag matches.
    untagged: bool,
}

/// Conditions a bulk read applies to each message (all of them: a row is built when it meets
/// every one). [`RowFilter::default`] lets every row through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowFilter {
    tags: Option<TagCondition>,
    /// Inclusive bounds of the store timestamp, in milliseconds.
    store_time: Option<(i64, i64)>,
}

/// How many units a filtered read went over and which (see [`RowFilter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scanned {
    /// Units accounted for: those whose record was read (built as a row or filtered out) and
    /// those passed over by their tag code. Units whose record is gone are not counted.
    pub units: usize,
    /// The queue offsets of the first and last of them (-1 when none).
    pub first: i64,
    pub last: i64,
}

impl Default for Scanned {
    fn default() -> Self {
        Scanned {
            units: 0,
            first: -1,
            last: -1,
        }
    }
}

impl Scanned {
    pub(crate) fn note(&mut self, queue_offset: i64) {
        if self.units == 0 {
            self.first = queue_offset;
        }
        self.last = queue_offset;
        self.units += 1;
    }

    /// These units followed by `other`'s.
    pub(crate) fn then(self, other: Scanned) -> Scanned {
        if self.units == 0 {
            return other;
        }
        if other.units == 0 {
            return self;
        }
        Scanned {
            units: self.units + other.units,
            first: self.first,
            last: other.last,
        }
    }
}

impl RowFilter {
    /// Every row.
    pub fn none() -> RowFilter {
        RowFilter::default()
    }

    /// Whether the filter lets every row through.
    pub fn is_none(&self) -> bool {
        self.tags.is_none() && self.store_time.is_none()
    }

    /// This filter, also requiring the tag to be one of `values` (`None`: any tag), or absent
    /// when `untagged`. Given twice, both must hold. An empty value matches nothing (a tag is
    /// never empty: an empty `TAGS` value is no tag).
    #[must_use]
    pub fn with_tags<S: AsRef<str>>(mut self, values: Option<&[S]>, untagged: bool) -> RowFilter {
        let values: Option<Vec<String>> = values.map(|v| {
            let mut out: Vec<String> = v
                .iter()
                .map(|s| s.as_ref().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            out.sort();
            out.dedup();
            out
        });
        let (values, untagged) = match self.tags.take() {
            None => (values, untagged),
            Some(have) => {
                let values = match (have.values, values) {
                    (None, v) | (v, None) => v,
                    (Some(a), Some(b)) => Some(a.into_iter().filter(|x| b.contains(x)).collect()),
                };
                (values, have.untagged && untagged)
            }
        };
        let mut codes: Vec<i32> = values.iter().flatten().map(|v| java_hash(v)).collect();
        codes.sort_unstable();
        codes.dedup();
        self.tags = Some(TagCondition {
            values,
            codes,
            untagged,
        });
        self
    }

    /// This filter, also requiring the store timestamp (ms) to be within `[min, max]`. Given
    /// twice, both ranges must hold; `min > max` matches nothing.
    #[must_use]
    pub fn with_store_time(mut self, min: i64, max: i64) -> RowFilter {
        self.store_time = Some(match self.store_time {
            None => (min, max),
            Some((a, b)) => (a.max(min), b.min(max)),
        });
        self
    }

    /// Whether no row can match (a read then builds nothing).
    pub fn matches_nothing(&self) -> bool {
        let no_tag = self
            .tags
            .as_ref()
            .is_some_and(|t| !t.untagged && t.values.as_ref().is_some_and(|v| v.is_empty()));
        no_tag || self.store_time.is_some_and(|(a, b)| a > b)
    }

    /// Whether a unit whose tag code is `code` can be passed over without reading its record:
    /// `code_is_hash` says the queue's codes are tag hashes (not the schedule topic's delivery
    /// times). Never for a code that is not an `int` or that any allowed tag or the untagged
    /// case (code 0) could give.
    #[inline]
    pub(crate) fn passes_over(&self, code: i64, code_is_hash: bool) -> bool {
        let Some(t) = &self.tags else { return false };
        if !code_is_hash || t.values.is_none() {
            return false;
        }
        let Ok(code) = i32::try_from(code) else {
            return false;
        };
        !(t.untagged && code == 0) && t.codes.binary_search(&code).is_err()
    }

    /// Whether record `d` meets every condition (its real tag, its store time).
    #[inline]
    pub(crate) fn matches(&self, d: &RecordView<'_>) -> bool {
        if let Some((min, max)) = self.store_time {
            if d.store_timestamp < min || d.store_timestamp > max {
                return false;
            }
        }
        let Some(t) = &self.tags else { return true };
        match record_tag(d.properties) {
            None => t.untagged,
            Some(tag) => t
                .values
                .as_ref()
                .is_none_or(|v| v.iter().any(|x| x.as_bytes() == tag)),
        }
    }
}

/// The record's tag as the `tags` column gives it: the last non-empty `TAGS` value.
fn record_tag(props: &[u8]) -> Option<&[u8]> {
    let mut tag = None;
    for_each_property(props, |k, v| {
        if k == b"TAGS" && !v.is_empty() {
            tag = Some(v);
        }
    });
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in pairs {
            out.extend_from_slice(k.as_bytes());
            out.push(1);
            out.extend_from_slice(v.as_bytes());
            out.push(2);
        }
        out
    }

    #[test]
    fn the_tag_of_a_record_is_the_last_non_empty_tags_value() {
        assert_eq!(record_tag(&props(&[("TAGS", "A")])), Some(&b"A"[..]));
        assert_eq!(
            record_tag(&props(&[("TAGS", "A"), ("KEYS", "k"), ("TAGS", "B")])),
            Some(&b"B"[..])
        );
        assert_eq!(
            record_tag(&props(&[("TAGS", "A"), ("TAGS", "")])),
            Some(&b"A"[..])
        );
        assert_eq!(record_tag(&props(&[("KEYS", "TAGS")])), None);
        assert_eq!(record_tag(&props(&[("TAGS", "")])), None);
        assert_eq!(record_tag(b""), None);
    }

    #[test]
    fn codes_pass_units_over_only_when_no_allowed_tag_can_have_them() {
        assert_eq!(java_hash("Aa"), java_hash("BB"));
        let f = RowFilter::none().with_tags(Some(&["Aa"]), false);
        let aa = i64::from(java_hash("Aa"));
        assert!(!f.passes_over(aa, true), "a matching code reads the record");
        assert!(f.passes_over(i64::from(java_hash("C")), true));
        assert!(f.passes_over(0, true), "untagged messages do not match");
        assert!(
            !f.passes_over(1_700_000_000_000, true),
            "not an int: no hash"
        );
        assert!(
            !f.passes_over(i64::from(java_hash("C")), false),
            "the schedule topic's codes are times"
        );
        let with_null = RowFilter::none().with_tags(Some(&["Aa"]), true);
        assert!(!with_null.passes_over(0, true));
        let any = RowFilter::none().with_tags::<&str>(None, false);
        assert!(
            !any.passes_over(12345, true),
            "any tag: every record is read"
        );
        assert!(!RowFilter::none().passes_over(12345, true));
    }

    #[test]
    fn conditions_given_twice_must_both_hold() {
        let f = RowFilter::none()
            .with_tags(Some(&["A", "B", ""]), true)
            .with_tags(Some(&["B", "C"]), false);
        assert_eq!(
            f.tags,
            Some(TagCondition {
                values: Some(vec!["B".to_owned()]),
                codes: vec![java_hash("B")],
                untagged: false,
            })
        );
        let none = RowFilter::none()
            .with_tags(Some(&["A"]), false)
            .with_tags(Some(&["B"]), true);
        assert!(none.matches_nothing());
        let only_null = RowFilter::none()
            .with_tags(Some::<&[&str]>(&[]), true)
            .with_tags::<&str>(None, true);
        assert!(!only_null.matches_nothing());
        let t = RowFilter::none()
            .with_store_time(10, 20)
            .with_store_time(15, 30);
        assert_eq!(t.store_time, Some((15, 20)));
        assert!(RowFilter::none()
            .with_store_time(10, 20)
            .with_store_time(21, 30)
            .matches_nothing());
        assert!(RowFilter::none().is_none() && !t.is_none());
    }
}
