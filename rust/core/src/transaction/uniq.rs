//! `UNIQ_KEY` generation in `MessageClientIDSetter`'s layout: the hex (uppercase) of
//! ip (4 or 16 bytes) ‖ pid (2) ‖ a 4-byte process value ‖ ms since the start of the month in
//! local time (4) ‖ a counter (2): 32 hex digits for an IPv4 host, 56 for IPv6.
//!
//! RocketMQ's 4-byte process value is its class loader's identity hash; here it is a random
//! value drawn per process and per month (drawn again when the month rolls over), so two
//! processes with the same pid (a restart, or two hosts) differ in it, and one process's ids
//! of one month never equal its ids of another (the ms field starts again each month). The ms
//! field and the counter are taken together in one compare-and-swap, never going back within a
//! month ([`next_stamp`]); the month's start is read from two atomics (a lock only at the
//! month's turn). The pid is read again in a forked child.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::format::HostAddr;

/// The last (ms since the month's start, counter) given out, as `ms << 16 | counter`.
static LAST: AtomicU64 = AtomicU64::new(0);
/// Start of the current month (local time) and of the next one, in ms.
static MONTH_START: AtomicI64 = AtomicI64::new(0);
static NEXT_MONTH: AtomicI64 = AtomicI64::new(i64::MIN);
/// The process value for the current month.
static NONCE: AtomicU32 = AtomicU32::new(0);
/// (fork generation + 1) << 32 | pid of the process that last read its pid; 0 before.
static PID: AtomicU64 = AtomicU64::new(0);
static MONTH_LOCK: Mutex<()> = Mutex::new(());

/// A generated id: the 16 bytes of an IPv4 layout as a number (the table's key), or the text
/// of an IPv6 one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UniqId {
    V4(u128),
    V6(String),
}

impl UniqId {
    /// The id's text into `buf` (32 hex digits) or the IPv6 text.
    pub(crate) fn as_str<'a>(&'a self, buf: &'a mut [u8; 32]) -> &'a str {
        match self {
            UniqId::V4(v) => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = HEX[((v >> (124 - 4 * i)) & 0xF) as usize];
                }
                // Only ASCII hex digits were written.
                std::str::from_utf8(buf).unwrap_or_default()
            }
            UniqId::V6(s) => s,
        }
    }
}

fn pid() -> u16 {
    let gen = crate::fork::generation().wrapping_add(1);
    let cached = PID.load(Ordering::Relaxed);
    if cached >> 32 == gen & 0xFFFF_FFFF && cached != 0 {
        return cached as u16;
    }
    let pid = std::process::id();
    PID.store(
        ((gen & 0xFFFF_FFFF) << 32) | u64::from(pid),
        Ordering::Relaxed,
    );
    pid as u16
}

/// A random 32-bit value: the clock's nanoseconds, the pid, a stack address and a counter,
/// mixed (splitmix64).
fn random_u32() -> u32 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let mut z = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ (&local as *const u8 as u64).rotate_left(17)
        ^ CALLS
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// Start of the month holding `ms` and of the next one, in local time (`Calendar` with the
/// default time zone, as RocketMQ).
fn month_bounds(ms: i64) -> (i64, i64) {
    #[allow(clippy::unnecessary_cast)]
    let secs = ms.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r and mktime read and write only the structs passed.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return utc_month_bounds(ms);
        }
        tm.tm_mday = 1;
        tm.tm_hour = 0;
        tm.tm_min = 0;
        tm.tm_sec = 0;
        tm.tm_isdst = -1;
        let mut next = tm;
        let start = libc::mktime(&mut tm);
        next.tm_mon += 1;
        let end = libc::mktime(&mut next);
        if start == -1 || end == -1 {
            return utc_month_bounds(ms);
        }
        (start as i64 * 1000, end as i64 * 1000)
    }
}

fn utc_month_bounds(ms: i64) -> (i64, i64) {
    let days = ms.div_euclid(86_400_000);
    // Civil-from-days (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5; // day of month - 1
    let start = (days - d) * 86_400_000;
    let month_len = match mp {
        0 | 2 | 4 | 5 | 7 | 9 | 10 => 31, // Mar May Jul Aug Oct Dec Jan
        11 => {
            let y = yoe + era * 400 + 1; // February of year y
            if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
                29
            } else {
                28
            }
        }
        _ => 30,
    };
    (start, start + month_len * 86_400_000)
}

/// Moves the month forward when `now` reached the next one (a new process value with it).
#[cold]
fn roll_month(now: i64) {
    let _g = MONTH_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if now < NEXT_MONTH.load(Ordering::Acquire) && NEXT_MONTH.load(Ordering::Acquire) != i64::MIN {
        return;
    }
    let (start, next) = month_bounds(now);
    NONCE.store(random_u32(), Ordering::Release);
    // The ms field starts again with the month (and a new process value).
    LAST.store(0, Ordering::Relaxed);
    MONTH_START.store(start, Ordering::Release);
    NEXT_MONTH.store(next, Ordering::Release);
}

/// The (ms, counter) of a new id: `ms` with the counter at 0 when it is later than the last
/// one given out, else the last one plus one (a counter past 65,535 carries into the ms). One
/// compare-and-swap over both, so no two ids of a month share them: RocketMQ's separate
/// counter repeats when a thread is held between reading the clock and taking the counter
/// while 65,536 others are taken (seen: one duplicate in 80,000 ids from 4 threads in CI).
fn next_stamp(ms: u32) -> (u32, u16) {
    let want = u64::from(ms) << 16;
    let mut cur = LAST.load(Ordering::Relaxed);
    loop {
        let next = if want > cur { want } else { cur + 1 };
        match LAST.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return ((next >> 16) as u32, next as u16),
            Err(c) => cur = c,
        }
    }
}

/// `createUniqID` for a producer on `host` (the store host: the producer is local).
pub(crate) fn new_uniq_id(host: &HostAddr, now_ms: i64) -> UniqId {
    if now_ms >= NEXT_MONTH.load(Ordering::Acquire) {
        roll_month(now_ms);
    }
    let start = MONTH_START.load(Ordering::Acquire);
    let mut diff = now_ms.wrapping_sub(start) as i32;
    if diff < 0 && diff > -1_000_000 {
        // The clock went back a little (RocketMQ: "may cause by NTP").
        diff = 0;
    }
    let nonce = NONCE.load(Ordering::Acquire);
    let (diff, counter) = next_stamp(diff as u32);
    let pid = pid();
    match host {
        HostAddr::V4 { ip, .. } => {
            let v = (u128::from(u32::from_be_bytes(*ip)) << 96)
                | (u128::from(pid) << 80)
                | (u128::from(nonce) << 48)
                | (u128::from(diff) << 16)
                | u128::from(counter);
            UniqId::V4(v)
        }
        HostAddr::V6 { ip, .. } => {
            let mut raw = [0u8; 28];
            raw[..16].copy_from_slice(ip);
            raw[16..18].copy_from_slice(&pid.to_be_bytes());
            raw[18..22].copy_from_slice(&nonce.to_be_bytes());
            raw[22..26].copy_from_slice(&diff.to_be_bytes());
            raw[26..28].copy_from_slice(&counter.to_be_bytes());
            UniqId::V6(crate::util::hex_upper(&raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn layout_of_an_ipv4_id() {
        let host = HostAddr::V4 {
            ip: [10, 1, 2, 3],
            port: 10911,
        };
        let now = crate::util::now_millis();
        let id = new_uniq_id(&host, now);
        let mut buf = [0u8; 32];
        let s = id.as_str(&mut buf).to_owned();
        assert_eq!(s.len(), 32);
        assert!(s.starts_with("0A010203"));
        let pid = std::process::id() as u16;
        assert_eq!(&s[8..12], format!("{pid:04X}"));
        // The ms since the month's start, as getNearlyTimeFromID reads it back.
        let diff = i64::from(u32::from_str_radix(&s[20..28], 16).unwrap());
        let (start, next) = month_bounds(now);
        assert!(start <= now && now < next);
        // The clock read, or a later one another thread's id took first (tests run in
        // parallel).
        let after = crate::util::now_millis();
        assert!(
            now <= start + diff && start + diff <= after,
            "{now} {diff} {after}"
        );
        assert_eq!(
            crate::transaction::table::parse_hex128(&s),
            Some(match id {
                UniqId::V4(v) => v,
                UniqId::V6(_) => unreachable!(),
            })
        );
    }

    #[test]
    fn ipv6_ids_have_56_digits() {
        let host = HostAddr::V6 {
            ip: [0xfe; 16],
            port: 1,
        };
        let id = new_uniq_id(&host, crate::util::now_millis());
        let mut buf = [0u8; 32];
        let s = id.as_str(&mut buf);
        assert_eq!(s.len(), 56);
        assert!(s.starts_with("FEFEFEFE"));
    }

    #[test]
    fn ids_from_many_threads_are_distinct() {
        let host = HostAddr::V4 {
            ip: [127, 0, 0, 1],
            port: 1,
        };
        let all: Vec<u128> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..20_000)
                            .map(|_| match new_uniq_id(&host, crate::util::now_millis()) {
                                UniqId::V4(v) => v,
                                UniqId::V6(_) => unreachable!(),
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let set: HashSet<u128> = all.iter().copied().collect();
        assert_eq!(set.len(), all.len());
    }

    #[test]
    fn one_clock_reading_used_past_the_counters_range_still_gives_distinct_ids() {
        // A thread held between its clock read and its id while 65,536 ids are taken: with a
        // separate 16-bit counter its id would repeat one taken at the same ms.
        let host = HostAddr::V4 {
            ip: [127, 0, 0, 1],
            port: 1,
        };
        let now = crate::util::now_millis();
        let ids: HashSet<u128> = (0..70_000)
            .map(|_| match new_uniq_id(&host, now) {
                UniqId::V4(v) => v,
                UniqId::V6(_) => unreachable!(),
            })
            .collect();
        assert_eq!(ids.len(), 70_000);
    }

    #[test]
    fn month_bounds_in_utc_fallback() {
        // 2024-02-10T12:00:00Z: February of a leap year.
        let ms = 1_707_566_400_000;
        let (s, e) = utc_month_bounds(ms);
        assert_eq!(s, 1_706_745_600_000); // 2024-02-01
        assert_eq!(e, 1_709_251_200_000); // 2024-03-01
                                          // 2023-12-31T23:59:59.999Z
        let (s, e) = utc_month_bounds(1_704_067_199_999);
        assert_eq!(s, 1_701_388_800_000); // 2023-12-01
        assert_eq!(e, 1_704_067_200_000); // 2024-01-01
    }
}
