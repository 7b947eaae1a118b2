//! Placement: manifest, launcher, name service (work in progress).
