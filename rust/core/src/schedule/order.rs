//! The order in which RocketMQ writes a properties string it renders from its properties map.
//!
//! `MessageDecoder.messageProperties2String` walks a `java.util.HashMap`, so the items come out
//! in the map's bucket order: by `spread(key.hashCode()) & (capacity - 1)`, keys of one bucket
//! in the order they were put (a resize splits a bucket keeping that order). The maps the
//! schedule paths render were built by `string2messageProperties`, which makes a
//! `HashMap<>(128)`: capacity 128, doubled each time the map holds more than 3/4 of it.
//! (A bucket of 8 or more keys becomes a tree in Java; with 128 buckets and the few dozen
//! properties a message has, that does not happen in practice and is not modelled.)

use crate::util::java_hash;

/// `HashMap.hash`: the high half of the hash folded into the low half.
pub(crate) fn spread(key: &str) -> u32 {
    let h = java_hash(key) as u32;
    h ^ (h >> 16)
}

/// [`spread`] of an ASCII name, computed by the compiler for the names the store knows
/// (a name that is not ASCII would hash its UTF-16 units; none of them is).
pub(crate) const fn spread_ascii(key: &str) -> u32 {
    let b = key.as_bytes();
    let mut h: i32 = 0;
    let mut i = 0;
    while i < b.len() {
        h = h.wrapping_mul(31).wrapping_add(b[i] as i32);
        i += 1;
    }
    let h = h as u32;
    h ^ (h >> 16)
}

/// Capacity of a `HashMap<>(128)` holding `n` keys.
pub(crate) fn capacity_for(n: usize) -> u32 {
    let mut cap: u32 = 128;
    while n > (cap as usize / 4) * 3 && cap < (1 << 30) {
        cap <<= 1;
    }
    cap
}

/// Puts `items` (name, value) into a map in order, as `HashMap.put` would (a repeated name
/// keeps its first place and takes the last value), and gives them back in that map's
/// iteration order.
pub(crate) fn java_map_order<T, F: Fn(&T) -> &str>(items: Vec<T>, name: F) -> Vec<T> {
    let mut put: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        match put.iter().position(|p| name(p) == name(&item)) {
            Some(i) => put[i] = item,
            None => put.push(item),
        }
    }
    let mask = capacity_for(put.len()) - 1;
    // A stable sort keeps the put order within a bucket.
    put.sort_by_cached_key(|p| spread(name(p)) & mask);
    put
}

/// [`java_map_order`] of items whose names are distinct, in place: a stable insertion sort on
/// the buckets (computed once) for the few dozen items a message has, without allocating.
pub(crate) fn java_map_order_distinct<T>(items: &mut [T], name: impl Fn(&T) -> &str) {
    const SMALL: usize = 32;
    if items.len() > SMALL {
        let mask = capacity_for(items.len()) - 1;
        items.sort_by_cached_key(|p| spread(name(p)) & mask);
        return;
    }
    let mask = capacity_for(items.len()) - 1;
    let mut buckets = [0u32; SMALL];
    for (b, p) in buckets.iter_mut().zip(items.iter()) {
        *b = spread(name(p)) & mask;
    }
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && buckets[j - 1] > buckets[j] {
            buckets.swap(j - 1, j);
            items.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// Whether `names` (distinct) are already in a `HashMap<>(128)`'s order.
pub(crate) fn is_java_map_order<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> bool {
    let mask = capacity_for(names.len()) - 1;
    let mut last = 0;
    for n in names {
        let b = spread(n) & mask;
        if b < last {
            return false;
        }
        last = b;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_order_of_a_capacity_128_map() {
        let names = [
            "KEYS",
            "TAGS",
            "WAIT",
            "DELAY",
            "REAL_TOPIC",
            "REAL_QID",
            "UNIQ_KEY",
        ];
        let ordered = java_map_order(names.to_vec(), |n| n);
        let buckets: Vec<u32> = ordered.iter().map(|n| spread(n) & 127).collect();
        let mut sorted = buckets.clone();
        sorted.sort_unstable();
        assert_eq!(buckets, sorted);
        assert!(is_java_map_order(ordered.iter().copied()));
        // Repeated names keep the first place and the last value.
        let got = java_map_order(vec![("A", "1"), ("B", "2"), ("A", "3")], |p| p.0);
        assert_eq!(got.len(), 2);
        assert!(got.contains(&("A", "3")));
    }

    #[test]
    fn distinct_names_sort_in_place_as_the_map_orders_them() {
        for n in [0usize, 1, 2, 7, 31, 32, 33, 120] {
            // Names in an order unlike the map's, some sharing a bucket.
            let names: Vec<String> = (0..n).rev().map(|i| format!("P{i}")).collect();
            let mut got: Vec<&str> = names.iter().map(String::as_str).collect();
            java_map_order_distinct(&mut got, |n| n);
            let want = java_map_order(names.iter().map(String::as_str).collect(), |n| n);
            assert_eq!(got, want, "{n} names");
        }
    }

    /// Orders printed by Java 17's `HashMap<>(128)` for the same puts.
    #[test]
    fn the_order_java_iterates_in() {
        let puts = [
            "KEYS",
            "TAGS",
            "UNIQ_KEY",
            "DELAY",
            "WAIT",
            "REAL_TOPIC",
            "REAL_QID",
        ];
        assert_eq!(
            java_map_order(puts.to_vec(), |n| n),
            [
                "UNIQ_KEY",
                "DELAY",
                "TAGS",
                "KEYS",
                "WAIT",
                "REAL_TOPIC",
                "REAL_QID"
            ]
        );
        // 120 keys: the map has grown to 256 buckets.
        let names: Vec<String> = (0..120).map(|i| format!("P{i}")).collect();
        let got: Vec<&str> = java_map_order(names.iter().map(String::as_str).collect(), |n| n);
        let java = "P61,P60,P63,P62,P65,P64,P67,P66,P69,P68,P70,P72,P71,P74,P73,P76,P75,P78,P77,\
                    P79,P81,P80,P83,P82,P85,P84,P87,P86,P89,P88,P90,P92,P91,P94,P93,P96,P95,P10,\
                    P98,P97,P12,P11,P99,P14,P13,P16,P15,P18,P17,P19,P104,P103,P106,P105,P100,\
                    P102,P101,P108,P107,P21,P20,P109,P23,P22,P25,P24,P27,P26,P29,P28,P30,P32,\
                    P31,P34,P33,P36,P35,P38,P37,P39,P41,P40,P43,P42,P45,P44,P47,P46,P49,P48,P0,\
                    P115,P1,P114,P2,P117,P3,P116,P4,P111,P5,P110,P6,P113,P7,P112,P8,P9,P50,P52,\
                    P119,P51,P118,P54,P53,P56,P55,P58,P57,P59";
        assert_eq!(got, java.split(',').collect::<Vec<_>>());
    }
}
