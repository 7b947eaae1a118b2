//! Properties of the stub encoding that generated code relies on: every
//! value decodes to itself, `wire_size` predicts the encoding exactly, and
//! bytes from a hostile peer, whatever they are, decode to a value or a
//! typed `WireError`, never a panic or a runaway allocation.

use lintel::stub::{Reader, Wire, WireError, Writer, wire_size};
use proptest::prelude::*;

/// A record shaped like a service's arguments: every kind of field the
/// encoding has (scalars, text, sequences, options, results, nesting).
#[derive(Debug, Clone, PartialEq, lintel::stub::Wire)]
struct Record {
    id: u64,
    delta: i32,
    ratio: f64,
    flag: bool,
    letter: char,
    name: String,
    blob: Vec<u8>,
    tags: Vec<String>,
    parent: Option<Box<u16>>,
    outcome: Result<u32, String>,
    pairs: Vec<(u8, i64)>,
    fixed: [u16; 3],
    shape: Shape,
}

#[derive(Debug, Clone, PartialEq, lintel::stub::Wire)]
enum Shape {
    Empty,
    Point(i32, i32),
    Named { label: String, sides: u8 },
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Empty),
        (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Shape::Point(x, y)),
        (".{0,12}", any::<u8>()).prop_map(|(label, sides)| Shape::Named { label, sides }),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        (
            any::<u64>(),
            any::<i32>(),
            any::<f64>().prop_filter("NaN is not equal to itself", |f| !f.is_nan()),
        ),
        (
            any::<bool>(),
            any::<char>(),
            ".{0,24}",
            prop::collection::vec(any::<u8>(), 0..200),
        ),
        (
            prop::collection::vec(".{0,8}", 0..6),
            prop::option::of(any::<u16>().prop_map(Box::new)),
            prop_oneof![any::<u32>().prop_map(Ok), ".{0,8}".prop_map(Err)],
        ),
        (
            prop::collection::vec((any::<u8>(), any::<i64>()), 0..8),
            any::<[u16; 3]>(),
            shape(),
        ),
    )
        .prop_map(
            |(
                (id, delta, ratio),
                (flag, letter, name, blob),
                (tags, parent, outcome),
                (pairs, fixed, shape),
            )| Record {
                id,
                delta,
                ratio,
                flag,
                letter,
                name,
                blob,
                tags,
                parent,
                outcome,
                pairs,
                fixed,
                shape,
            },
        )
}

fn encode<T: Wire>(v: &T) -> Vec<u8> {
    let (mut data, mut doors) = (Vec::new(), Vec::new());
    v.encode(&mut Writer::new(&mut data, &mut doors));
    assert!(doors.is_empty());
    data
}

/// Decode a whole message the way a stub does: the value, then nothing left.
fn decode<T: Wire>(bytes: &[u8]) -> Result<T, WireError> {
    let mut r = Reader::new(bytes, &[]);
    let v = T::decode(&mut r)?;
    r.finish()?;
    Ok(v)
}

proptest! {
    #[test]
    fn every_record_decodes_to_itself(v in record()) {
        let bytes = encode(&v);
        prop_assert_eq!(wire_size(&v), (bytes.len(), 0));
        prop_assert_eq!(decode::<Record>(&bytes), Ok(v));
    }

    #[test]
    fn a_cut_or_extended_message_is_an_error(v in record(), cut in any::<prop::sample::Index>(), extra in 1u8..) {
        let bytes = encode(&v);
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode::<Record>(short).is_err());
        let mut long = bytes.clone();
        long.push(extra);
        prop_assert_eq!(decode::<Record>(&long), Err(WireError("trailing bytes")));
    }

    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        // Whatever the outcome, it returns: no panic, no huge allocation
        // from a forged count.
        let _ = decode::<Record>(&bytes);
        let _ = decode::<Vec<String>>(&bytes);
        let _ = decode::<Vec<Vec<u64>>>(&bytes);
        let _ = decode::<Option<Result<char, Shape>>>(&bytes);
        if let Ok(s) = decode::<String>(&bytes) {
            // What decodes re-encodes to the same bytes: one encoding per value.
            prop_assert_eq!(encode(&s), bytes);
        }
    }

    #[test]
    fn a_forged_count_cannot_claim_more_than_the_message_holds(count in 1u32.., tail in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = count.to_le_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        // Each u64 item needs 8 bytes: a count beyond what follows fails.
        if count as usize * 8 > tail.len() {
            prop_assert!(decode::<Vec<u64>>(&bytes).is_err());
        }
    }
}
