//! The Confluent wire format: `0x00`, the schema id as a 4-byte big-endian integer, then the
//! Avro binary body. Parsing is total: any byte slice gives either a frame or a [`WireError`].

/// The only magic byte the format defines.
pub const MAGIC_BYTE: u8 = 0;
/// Bytes before the Avro body.
pub const HEADER_LEN: usize = 5;

/// Why bytes are not a Confluent wire-format frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the 5-byte header.
    #[error("record of {len} bytes is shorter than the 5-byte Confluent header")]
    Truncated {
        /// Length of the record.
        len: usize,
    },
    /// The first byte is not 0.
    #[error("magic byte is {found:#04x}, expected 0x00 (not Confluent wire format)")]
    BadMagic {
        /// The byte found.
        found: u8,
    },
}

/// A parsed frame: the schema id and the Avro body it announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Registry id of the writer schema.
    pub schema_id: u32,
    /// Avro binary body.
    pub body: &'a [u8],
}

/// Splits a record into schema id and body.
pub fn parse(bytes: &[u8]) -> Result<Frame<'_>, WireError> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Truncated { len: bytes.len() });
    };
    if header[0] != MAGIC_BYTE {
        return Err(WireError::BadMagic { found: header[0] });
    }
    let schema_id = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    Ok(Frame { schema_id, body })
}

/// Prefixes an Avro body with the header for `schema_id`.
pub fn frame(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(MAGIC_BYTE);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_short_and_bad_magic() {
        assert_eq!(parse(&[]), Err(WireError::Truncated { len: 0 }));
        assert_eq!(parse(&[0, 0, 0, 1]), Err(WireError::Truncated { len: 4 }));
        assert_eq!(
            parse(&[1, 0, 0, 0, 1, 2]),
            Err(WireError::BadMagic { found: 1 })
        );
    }

    #[test]
    fn header_is_big_endian() {
        let f = parse(&[0, 0, 0, 1, 2, 9]).unwrap();
        assert_eq!(f.schema_id, 258);
        assert_eq!(f.body, &[9]);
    }

    proptest! {
        #[test]
        fn frame_round_trips(id in any::<u32>(), body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let framed = frame(id, &body);
            let parsed = parse(&framed).unwrap();
            prop_assert_eq!(parsed.schema_id, id);
            prop_assert_eq!(parsed.body, &body[..]);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse(&bytes);
        }
    }
}
