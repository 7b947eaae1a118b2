//! Layer 3, a call's context as plain values.
pub mod after_reply;
pub mod attached;
pub mod caller;
pub mod deadline;
pub mod error;
pub mod settings;
pub mod shuttle;
pub mod stats;
pub mod task_alert;
