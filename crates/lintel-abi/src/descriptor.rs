//! Doors and buffers as they cross in a slot: fixed 16-byte descriptors,
//! read by the receiver against state the sender cannot write.

use serde::{Deserialize, Serialize};

use crate as abi;

/// A door as it travels: whose grant table names it, and the index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoorDescriptor {
    pub kind: u32,
    pub idx: u32,
    pub pid: u32,
}

impl DoorDescriptor {
    /// A door whose server (`pid`) died before it could be passed on.
    pub fn dead(pid: u32) -> DoorDescriptor {
        DoorDescriptor {
            kind: abi::WD_DEAD,
            idx: 0,
            pid,
        }
    }

    pub fn to_bytes(self) -> [u8; abi::DOOR_DESCRIPTOR] {
        let mut b = [0u8; abi::DOOR_DESCRIPTOR];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.idx.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; abi::DOOR_DESCRIPTOR]) -> DoorDescriptor {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        DoorDescriptor {
            kind: w(0),
            idx: w(4),
            pid: w(8),
        }
    }
}

/// A buffer as it travels: its kind ([`abi::BUF_SEALED`], [`abi::BUF_LOAN`],
/// [`abi::BUF_RETURNED`], [`abi::BUF_FD`]), its length, and for a loan its offset in the
/// lender's arena. Written at [`abi::OFF_BUFS`] + i × [`abi::BUFFER_DESCRIPTOR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferDescriptor {
    pub kind: u32,
    pub len: u32,
    pub off: u64,
}

impl BufferDescriptor {
    pub fn to_bytes(self) -> [u8; abi::BUFFER_DESCRIPTOR] {
        let mut b = [0u8; abi::BUFFER_DESCRIPTOR];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.off.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; abi::BUFFER_DESCRIPTOR]) -> BufferDescriptor {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[8..16]);
        BufferDescriptor {
            kind: w(0),
            len: w(4),
            off: u64::from_le_bytes(off),
        }
    }

    /// Where descriptor `i` sits in a slot.
    pub fn offset(i: usize) -> usize {
        abi::OFF_BUFS + i * abi::BUFFER_DESCRIPTOR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_descriptors_round_trip() {
        let d = BufferDescriptor {
            kind: abi::BUF_LOAN,
            len: 7,
            off: 1 << 33,
        };
        assert_eq!(BufferDescriptor::from_bytes(&d.to_bytes()), d);
    }
}
