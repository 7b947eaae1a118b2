//! The lintel stub generator (work in progress).
