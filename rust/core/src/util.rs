//! Small shared helpers whose results are part of RocketMQ's formats: Java `String.hashCode`,
//! the masked CRC32, 20-digit file names and upper-case hex.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Result, StoreError};

/// Java `String.hashCode()`: `h = 31*h + u` over the UTF-16 code units, wrapping 32-bit.
///
/// RocketMQ uses it for tag codes, index keys and lock striping, so the UTF-16 view matters for
/// any character outside the BMP (a surrogate pair contributes two code units).
pub(crate) fn java_hash(s: &str) -> i32 {
    java_hash_extend(0, s)
}

/// Continues a Java `String.hashCode` over more characters: `java_hash_extend(java_hash(a), b)
/// == java_hash(a + b)`, without building the concatenation.
pub(crate) fn java_hash_extend(start: i32, s: &str) -> i32 {
    if s.is_ascii() {
        return java_hash_extend_ascii(start, s.as_bytes());
    }
    let mut h: i32 = start;
    for u in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(u));
    }
    h
}

/// [`java_hash_extend`] over bytes the caller has checked to be ASCII (each byte is then one
/// UTF-16 code unit; other bytes would hash wrongly, hence crate-private). Four characters
/// per step: h*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3 (the same sum, wrapping, with a quarter of
/// the serial multiply-adds).
#[inline]
pub(crate) fn java_hash_extend_ascii(start: i32, s: &[u8]) -> i32 {
    debug_assert!(s.is_ascii());
    let mut h: i32 = start;
    let mut quads = s.chunks_exact(4);
    for q in &mut quads {
        h = h
            .wrapping_mul(31 * 31 * 31 * 31)
            .wrapping_add(i32::from(q[0]) * (31 * 31 * 31))
            .wrapping_add(i32::from(q[1]) * (31 * 31))
            .wrapping_add(i32::from(q[2]) * 31)
            .wrapping_add(i32::from(q[3]));
    }
    for &b in quads.remainder() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(b));
    }
    h
}

/// Opens a file of the store with `opts`, never through a symbolic link (`O_NOFOLLOW`), and
/// only if it is a regular file: a link, folder, FIFO or device where the store keeps `what`
/// is [`StoreError::Corrupted`] naming it, found before a byte is read or written (a link
/// would send the store's writes to a file outside the store).
pub(crate) fn open_store_file(path: &Path, opts: &mut OpenOptions, what: &str) -> Result<File> {
    open_store_file_len(path, opts, what).map(|(file, _)| file)
}

/// [`open_store_file`], with the file's length from the same `fstat` that checked its type
/// (callers that check a size need not ask again).
pub(crate) fn open_store_file_len(
    path: &Path,
    opts: &mut OpenOptions,
    what: &str,
) -> Result<(File, u64)> {
    let file = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => StoreError::corrupted(
                path,
                format!("the {what} is a symbolic link; the store never reads or writes its files through links"),
            ),
            _ => StoreError::io(format!("cannot open {what}"), path, e),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io(format!("cannot stat {what}"), path, e))?;
    if !meta.file_type().is_file() {
        return Err(not_a_regular_file(path, what));
    }
    Ok((file, meta.len()))
}

fn not_a_regular_file(path: &Path, what: &str) -> StoreError {
    StoreError::corrupted(
        path,
        format!("the {what} is not a regular file (a folder, link, FIFO or device is there)"),
    )
}

/// Checks, without following links, that `path` is absent or a regular file; true if it is
/// there. What the store will write later is checked with this before anything changes.
pub(crate) fn check_regular_or_absent(path: &Path, what: &str) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => Ok(true),
        Ok(meta) if meta.file_type().is_symlink() => Err(StoreError::corrupted(
            path,
            format!("the {what} is a symbolic link; the store never reads or writes its files through links"),
        )),
        Ok(_) => Err(not_a_regular_file(path, what)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io(format!("cannot stat {what}"), path, e)),
    }
}

/// Checks, without following links, that the fixed-size file at `path` (checkpoint, timer
/// wheel, timer checkpoint) is absent, or a regular file that is empty (created, never sized)
/// or exactly `expected` bytes; `describe` says what that size is made of.
pub(crate) fn check_fixed_size_or_absent(
    path: &Path,
    what: &str,
    expected: u64,
    describe: &str,
) -> Result<()> {
    if check_regular_or_absent(path, what)? {
        let len = std::fs::symlink_metadata(path)
            .map_err(|e| StoreError::io(format!("cannot stat {what}"), path, e))?
            .len();
        check_fixed_size(path, what, len, expected, describe)?;
    }
    Ok(())
}

/// Opens the fixed-size file at `path` for reading and writing, creating it empty if missing,
/// and checks its size as [`check_fixed_size_or_absent`] does; returns it and its length
/// (0 for a file just created, which the caller sizes).
pub(crate) fn open_fixed_size_file(
    path: &Path,
    what: &str,
    expected: u64,
    describe: &str,
) -> Result<(File, u64)> {
    let (file, len) = open_store_file_len(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        what,
    )?;
    check_fixed_size(path, what, len, expected, describe)?;
    Ok((file, len))
}

/// A fixed-size file of `len` bytes is empty (just created) or exactly `expected` bytes.
fn check_fixed_size(
    path: &Path,
    what: &str,
    len: u64,
    expected: u64,
    describe: &str,
) -> Result<()> {
    if len != 0 && len != expected {
        return Err(StoreError::corrupted(
            path,
            format!("the {what} is {len} bytes, expected {expected}{describe}"),
        ));
    }
    Ok(())
}

/// Checks that `path` is absent or a folder (a link to a folder counts: an operator may keep
/// the commitlog or the index on another disk that way); true if it is there.
pub(crate) fn check_dir_or_absent(path: &Path, what: &str) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(StoreError::corrupted(
            path,
            format!("the {what} folder is not a folder"),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling link is not "absent": creating the folder would fail or go elsewhere.
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(StoreError::corrupted(
                    path,
                    format!("the {what} folder is a link to nothing"),
                ));
            }
            Ok(false)
        }
        Err(e) => Err(StoreError::io(
            format!("cannot stat the {what} folder"),
            path,
            e,
        )),
    }
}

/// A fresh CRC32 hasher, made once: `crc32fast::hash` asks the CPU's features again at every
/// call (a handful of feature lookups per record), a clone of this one does not.
static CRC32_FRESH: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();

/// `UtilAll.crc32`: CRC32 (IEEE) masked with `0x7FFFFFFF`, so never negative.
#[inline]
pub(crate) fn masked_crc32(data: &[u8]) -> i32 {
    let mut hasher = CRC32_FRESH.get_or_init(crc32fast::Hasher::new).clone();
    hasher.update(data);
    (hasher.finalize() & 0x7FFF_FFFF) as i32
}

/// `UtilAll.offset2FileName`: the offset as 20 zero-padded decimal digits.
pub(crate) fn offset_to_file_name(offset: i64) -> String {
    format!("{offset:020}")
}

/// Parses a 20-digit segment name back into its start offset; anything else is `None`.
pub(crate) fn file_name_to_offset(name: &str) -> Option<i64> {
    if name.len() != 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse::<i64>().ok()
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `UtilAll.bytes2string`: upper-case hex, two characters per byte.
pub(crate) fn hex_upper(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0x0F)] as char);
    }
    out
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_vectors_from_the_spec() {
        assert_eq!(java_hash("TAG1"), 2_567_159);
        assert_eq!(java_hash("TagA"), 2_598_919);
        assert_eq!(java_hash("abc"), 96_354);
        assert_eq!(java_hash("FooBar#Hello"), -101_609_924);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(java_hash(""), 0);
        let ext = java_hash_extend(java_hash_extend(java_hash("FooBar"), "#"), "Hello");
        assert_eq!(ext, java_hash("FooBar#Hello"));
    }

    #[test]
    fn java_hash_four_at_a_time_equals_the_serial_definition() {
        let text = "order-12345 user-987 TopicTest#KEY_with.all~sorts/of:chars_0123456789";
        for start in [0, 1, -7, i32::MAX, i32::MIN] {
            for end in 0..=text.len() {
                let s = &text[..end];
                let serial = s
                    .bytes()
                    .fold(start, |h, b| h.wrapping_mul(31).wrapping_add(i32::from(b)));
                assert_eq!(java_hash_extend(start, s), serial, "{s:?} from {start}");
            }
        }
    }

    #[test]
    fn java_hash_uses_utf16_code_units() {
        // U+1F600 is the surrogate pair D83D DE00 in UTF-16.
        let expected = 0xD83Di32.wrapping_mul(31).wrapping_add(0xDE00);
        assert_eq!(java_hash("\u{1F600}"), expected);
        // A BMP character is one code unit.
        assert_eq!(java_hash("\u{00e9}"), 0xE9);
    }

    #[test]
    fn masked_crc_vector_from_the_spec() {
        assert_eq!(crc32fast::hash(b"body"), 3_685_223_346);
        assert_eq!(masked_crc32(b"body"), 1_537_739_698);
        assert_eq!(masked_crc32(b""), 0);
    }

    #[test]
    fn masked_crc_starts_afresh_at_every_call() {
        // The shared fresh hasher is cloned, never fed: every call's CRC is its bytes' alone,
        // at every length the kernels split on (below 16, 128, 256 and 2 KiB, and above).
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in [0, 1, 15, 16, 127, 128, 255, 256, 1024, 2047, 2048, 4999] {
            for _ in 0..2 {
                let expected = (crc32fast::hash(&bytes[..len]) & 0x7FFF_FFFF) as i32;
                assert_eq!(masked_crc32(&bytes[..len]), expected, "{len} bytes");
            }
        }
    }

    #[test]
    fn file_names_are_twenty_digits() {
        assert_eq!(offset_to_file_name(0), "00000000000000000000");
        assert_eq!(offset_to_file_name(1_073_741_824), "00000000001073741824");
        assert_eq!(
            file_name_to_offset("00000000001073741824"),
            Some(1_073_741_824)
        );
        assert_eq!(file_name_to_offset("1073741824"), None);
        assert_eq!(file_name_to_offset("0000000000107374182x"), None);
        assert_eq!(file_name_to_offset("+0000000001073741824"), None);
    }

    #[test]
    fn hex_is_upper_case() {
        assert_eq!(hex_upper(&[0x00, 0xAB, 0x7f]), "00AB7F");
    }
}
