//! What can go wrong with a link itself (a call's errors are lintel's
//! [`lintel::CallError`]).

/// Why setting up or using a link failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The TLS configuration or handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// The far side exports nothing under this name.
    #[error("the far side exports no door named {0:?}")]
    NotExported(String),
    /// The link is down (closed, cut, or its keepalive went unanswered).
    #[error("the link is down: {0}")]
    LinkDown(String),
    /// The proxy's thread is gone.
    #[error("the proxy has stopped")]
    Stopped,
}

impl NetError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NetError {
        let what = what.into();
        move |source| NetError::Io { what, source }
    }
}
