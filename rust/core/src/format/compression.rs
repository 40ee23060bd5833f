//! Compressed message bodies (docs/format.md#compressed-bodies): RocketMQ's producers compress
//! bodies over 4 KiB and mark the record's SYSFLAG with `COMPRESSED_FLAG`; 5.x also records the
//! algorithm in bits 8-10 (`0x100` LZ4, `0x200` ZSTD, `0x300` ZLIB, with 0 from older clients
//! meaning ZLIB: `CompressionType.findByValue`). The store keeps the compressed bytes (the body CRC
//! covers them); readers give back the body the producer sent, as RocketMQ's consumers do
//! (`MessageDecoder.decode` with `deCompressBody`).
//!
//! The formats are the ones RocketMQ's compressors write: a zlib stream (`java.util.zip.Deflater`,
//! `ZlibCompressor`), an LZ4 frame (`LZ4FrameOutputStream`, `Lz4Compressor`) and a zstd frame
//! (`ZstdOutputStream`, `ZstdCompressor`).

use std::io::Read;

use crate::format::sysflag;

/// Mask of the compression type bits of SYSFLAG (`COMPRESSION_TYPE_COMPARATOR`).
pub const COMPRESSION_TYPE_MASK: i32 = 0x700;

/// Largest body decompression produces. A producer checks the body against its
/// `maxMessageSize` (4 MiB by default) before compressing it, so real bodies stay far below
/// this; the bound keeps a hostile record (a few KiB expanding to gigabytes) from exhausting
/// memory.
pub const MAX_DECOMPRESSED_BODY: usize = 256 * 1024 * 1024;

/// The algorithm of a compressed body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Zlib,
    Lz4,
    Zstd,
}

impl Compression {
    /// The algorithm a record's SYSFLAG names: `None` for an uncompressed body, `Err` with the
    /// type value for a compressed body of a type RocketMQ does not define.
    pub fn of_sys_flag(sys_flag: i32) -> Option<Result<Compression, i32>> {
        if sys_flag & sysflag::COMPRESSED == 0 {
            return None;
        }
        Some(match (sys_flag & COMPRESSION_TYPE_MASK) >> 8 {
            0 | 3 => Ok(Compression::Zlib),
            1 => Ok(Compression::Lz4),
            2 => Ok(Compression::Zstd),
            other => Err(other),
        })
    }

    /// RocketMQ's name of the algorithm (`CompressionType`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::Zlib => "ZLIB",
            Compression::Lz4 => "LZ4",
            Compression::Zstd => "ZSTD",
        }
    }
}

/// Why a compressed body could not be given back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecompressError(pub String);

impl std::fmt::Display for DecompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends the body a record with `sys_flag` holds compressed as `data` to `out`, at most
/// [`MAX_DECOMPRESSED_BODY`] bytes. On error `out` is left as it was.
pub fn decompress_into(
    sys_flag: i32,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    decompress_limited(sys_flag, data, out, MAX_DECOMPRESSED_BODY)
}

fn decompress_limited(
    sys_flag: i32,
    data: &[u8],
    out: &mut Vec<u8>,
    max: usize,
) -> Result<(), DecompressError> {
    let kind = match Compression::of_sys_flag(sys_flag) {
        None => {
            out.extend_from_slice(data);
            return Ok(());
        }
        Some(Ok(kind)) => kind,
        Some(Err(value)) => {
            return Err(DecompressError(format!(
                "the body is compressed with an unknown compression type {value} (SYSFLAG {sys_flag:#x})"
            )))
        }
    };
    let start = out.len();
    let failed = |out: &mut Vec<u8>, why: String| {
        out.truncate(start);
        Err(DecompressError(format!(
            "the {} compressed body ({} bytes) cannot be decompressed: {why}",
            kind.name(),
            data.len()
        )))
    };
    let limit = max as u64 + 1;
    let read = match kind {
        Compression::Zlib => flate2::read::ZlibDecoder::new(data)
            .take(limit)
            .read_to_end(out),
        Compression::Lz4 => lz4_flex::frame::FrameDecoder::new(data)
            .take(limit)
            .read_to_end(out),
        Compression::Zstd => match ruzstd::decoding::StreamingDecoder::new(data) {
            Ok(d) => d.take(limit).read_to_end(out),
            Err(e) => return failed(out, e.to_string()),
        },
    };
    match read {
        Err(e) => failed(out, e.to_string()),
        Ok(n) if n > max => failed(out, format!("it expands past {max} bytes")),
        Ok(_) => Ok(()),
    }
}

/// The body of a record with `sys_flag` whose stored body is `data`: borrowed when not
/// compressed, decompressed otherwise.
pub fn body_of(sys_flag: i32, data: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, DecompressError> {
    if sys_flag & sysflag::COMPRESSED == 0 {
        return Ok(std::borrow::Cow::Borrowed(data));
    }
    let mut out = Vec::new();
    decompress_into(sys_flag, data, &mut out)?;
    Ok(std::borrow::Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn types_come_from_the_sys_flag_bits() {
        assert_eq!(Compression::of_sys_flag(0), None);
        assert_eq!(Compression::of_sys_flag(0x300), None, "no COMPRESSED flag");
        assert_eq!(Compression::of_sys_flag(0x1), Some(Ok(Compression::Zlib)));
        assert_eq!(Compression::of_sys_flag(0x301), Some(Ok(Compression::Zlib)));
        assert_eq!(Compression::of_sys_flag(0x101), Some(Ok(Compression::Lz4)));
        assert_eq!(
            Compression::of_sys_flag(0x201 | 0x30),
            Some(Ok(Compression::Zstd))
        );
        assert_eq!(Compression::of_sys_flag(0x401), Some(Err(4)));
    }

    #[test]
    fn every_algorithm_round_trips_and_damage_is_an_error() {
        let body: Vec<u8> = (0..20_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 97) as u8)
            .collect();
        for (flag, packed) in [
            (0x1, zlib(&body)),
            (0x301, zlib(&body)),
            (0x101, lz4(&body)),
            (0x201, zstd(&body)),
        ] {
            let mut out = b"prefix".to_vec();
            decompress_into(flag, &packed, &mut out).unwrap();
            assert_eq!(&out[..6], b"prefix");
            assert_eq!(&out[6..], &body[..], "sysflag {flag:#x}");
            assert_eq!(body_of(flag, &packed).unwrap().as_ref(), &body[..]);
            // Cut short, or garbage: an error, and `out` unchanged.
            for bad in [&packed[..packed.len() / 2], &b"not compressed at all"[..]] {
                let mut out = b"keep".to_vec();
                let e = decompress_into(flag, bad, &mut out).unwrap_err();
                assert!(e.0.contains("cannot be decompressed"), "{e}");
                assert_eq!(out, b"keep");
            }
        }
        assert_eq!(body_of(0, b"plain").unwrap().as_ref(), b"plain");
        assert!(decompress_into(0x701, b"x", &mut Vec::new())
            .unwrap_err()
            .0
            .contains("unknown compression type 7"));
    }

    #[test]
    fn a_body_that_expands_too_far_is_refused() {
        // 4 MiB of zeros compresses to a few KiB; with a 1 MiB bound it is refused, as
        // MAX_DECOMPRESSED_BODY refuses bigger expansions.
        let zeros = vec![0u8; 4 * 1024 * 1024];
        for (flag, bomb) in [
            (0x1, zlib(&zeros)),
            (0x101, lz4(&zeros)),
            (0x201, zstd(&zeros)),
        ] {
            assert!(bomb.len() < 64 * 1024);
            let mut out = Vec::new();
            let err = decompress_limited(flag, &bomb, &mut out, 1024 * 1024).unwrap_err();
            assert!(err.0.contains("expands past 1048576 bytes"), "{err}");
            assert!(out.is_empty());
            decompress_limited(flag, &bomb, &mut out, 4 * 1024 * 1024).unwrap();
            assert_eq!(out.len(), zeros.len());
        }
    }
}
