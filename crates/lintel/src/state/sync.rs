//! The atomics, lock and fences the in-process protocols (`refs`, `claim`)
//! are written over: std's atomics, parking_lot's locks and `fence`'s
//! asymmetric pair. `model` compiles the same protocol files over loom's
//! (where both halves of the pair are full fences, which is how the pair
//! orders), so the model checker explores the code that runs.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, fence};

pub(crate) use parking_lot::Mutex;

pub(crate) use crate::sys::fence::{heavy, light};
