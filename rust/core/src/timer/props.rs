//! Properties of timer messages (RocketMQ's `MessageConst`) and edits of an ordered property
//! list with Java map semantics: a name holds one value, the last one written.

pub(crate) const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
pub(crate) const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
pub(crate) const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
pub(crate) const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
pub(crate) const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
pub(crate) const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
pub(crate) const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
pub(crate) const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
pub(crate) const REAL_TOPIC: &str = "REAL_TOPIC";
pub(crate) const REAL_QID: &str = "REAL_QID";

/// The value of `name` (the last one, as a Java map built from the list holds).
pub(crate) fn get<'a>(props: &'a [(String, String)], name: &str) -> Option<&'a str> {
    props
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Removes every value of `name`.
pub(crate) fn remove(props: &mut Vec<(String, String)>, name: &str) {
    props.retain(|(k, _)| k != name);
}

/// Sets `name` to `value`: in place of its first value (dropping any other), else at the end.
pub(crate) fn set(props: &mut Vec<(String, String)>, name: &str, value: String) {
    match props.iter().position(|(k, _)| k == name) {
        Some(i) => {
            props[i].1 = value;
            let mut seen = false;
            props.retain(|(k, _)| {
                if k != name {
                    return true;
                }
                let keep = !seen;
                seen = true;
                keep
            });
        }
        None => props.push((name.to_owned(), value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_semantics() {
        let mut p: Vec<(String, String)> = vec![
            ("A".into(), "1".into()),
            ("B".into(), "2".into()),
            ("A".into(), "3".into()),
        ];
        assert_eq!(get(&p, "A"), Some("3"));
        set(&mut p, "A", "4".into());
        assert_eq!(p, vec![("A".into(), "4".into()), ("B".into(), "2".into())]);
        set(&mut p, "C", "5".into());
        assert_eq!(get(&p, "C"), Some("5"));
        remove(&mut p, "A");
        assert_eq!(get(&p, "A"), None);
        assert_eq!(p.len(), 2);
    }
}
