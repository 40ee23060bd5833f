//! Subscription expressions (`"*"`, `"TagA || TagB"`): which messages a pull returns, by tag
//! code in the consume queue and then by the record's real tag.

use crate::util::java_hash;

/// A subscription expression: `"*"` (or empty) for everything, else `"TagA || TagB"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagFilter {
    all: bool,
    tags: Vec<String>,
    codes: Vec<i32>,
}

impl TagFilter {
    /// Everything.
    pub fn all() -> TagFilter {
        TagFilter {
            all: true,
            tags: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// Parses RocketMQ's tag expression (`FilterAPI.buildSubscriptionData`). Tags are trimmed
    /// as Java's `String.trim()` does (only code points up to U+0020), so a tag ending in a
    /// no-break or ideographic space keeps it, as it was stored.
    pub fn parse(expr: &str) -> TagFilter {
        let expr = java_trim(expr);
        if expr.is_empty() || expr == "*" {
            return TagFilter::all();
        }
        let mut tags: Vec<String> = Vec::new();
        for t in expr.split("||") {
            let t = java_trim(t);
            if t == "*" {
                return TagFilter::all();
            }
            if !t.is_empty() && !tags.iter().any(|x| x == t) {
                tags.push(t.to_owned());
            }
        }
        if tags.is_empty() {
            return TagFilter::all();
        }
        let codes = tags.iter().map(|t| java_hash(t)).collect();
        TagFilter {
            all: false,
            tags,
            codes,
        }
    }

    /// The consume queue check (`isMatchedByConsumeQueue`): by tag code.
    pub(crate) fn matches_code(&self, tags_code: i64) -> bool {
        self.all || self.codes.contains(&(tags_code as i32))
    }

    /// The exact check RocketMQ leaves to clients: the record's real tag string, looked up
    /// (`tag()`) only by a filter that needs it.
    pub(crate) fn matches_tag<'a>(&self, tag: impl FnOnce() -> Option<&'a str>) -> bool {
        self.all || tag().is_some_and(|t| self.tags.iter().any(|x| x == t))
    }
}

/// Java's `String.trim()`: strips leading and trailing characters up to U+0020 (spaces and
/// control characters), and nothing else (Rust's `trim` also strips Unicode white space).
pub(crate) fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= '\u{20}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions_trim_as_java_does() {
        // Java's String.trim() strips code points <= U+0020 only.
        for tag in ["Paid\u{a0}", "Paid\u{2028}", "\u{3000}Paid", "Paid\u{85}"] {
            let f = TagFilter::parse(&format!(" {tag} || Other\t"));
            assert!(
                f.matches_tag(|| Some(tag)),
                "{tag:?} must stay subscribable"
            );
            assert!(f.matches_code(i64::from(java_hash(tag))));
            assert!(f.matches_tag(|| Some("Other")));
            assert!(!f.matches_tag(|| Some("Paid")));
        }
        let f = TagFilter::parse("\u{1}\u{1f}TagA\u{0} ||\n TagB ");
        assert!(f.matches_tag(|| Some("TagA")) && f.matches_tag(|| Some("TagB")));
        assert_eq!(TagFilter::parse(" \t\r\n "), TagFilter::all());
        assert_ne!(
            TagFilter::parse("\u{a0}"),
            TagFilter::all(),
            "a no-break space is a tag in Java"
        );
        assert_eq!(java_trim("\u{3000} x \u{20}"), "\u{3000} x");
    }
}
