//! What a caller can do about a failure. Every library error says which [`ErrorKind`] it is;
//! the server turns a kind into an HTTP status in one place (`server::error`), and the CLI
//! prints the sentence. The sentence says what happened; the kind says who can fix it.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Who can act on a failure, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or asks for something impossible; the same request fails again.
    BadRequest,
    /// The request is well-formed but what it carries is refused (a broken PDF, a component
    /// that implements no stage).
    Invalid,
    /// Something the request names does not exist.
    NotFound,
    /// The request does not fit the appliance's state now (nothing stored or indexed yet); it
    /// may work later.
    Conflict,
    /// The request carries no valid token.
    Unauthorized,
    /// The token may not do this.
    Forbidden,
    /// The request is larger than the appliance accepts.
    TooLarge,
    /// The appliance is busy; try again after the time it gives.
    Overloaded,
    /// The work ran past its time limit.
    Timeout,
    /// Something failed inside the appliance; nothing the caller sent is at fault.
    Internal,
}

impl ErrorKind {
    /// The kind's name in error bodies (`"not_found"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Invalid => "invalid",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Internal => "internal",
        }
    }
}

/// `text` on one line: runs of white space (the line breaks of a library's pretty-printed
/// detail) become one space, so that an error stays one sentence in a log line or a response.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An error that knows its [`ErrorKind`].
pub trait Classified: std::error::Error {
    /// What the caller can do about it.
    fn kind(&self) -> ErrorKind;
}

// The one policy for poisoned locks: take the value anyway. Every value the appliance guards
// (caches, job views, logs, live profiles) is changed by single assignments or inserts, so a
// thread that panicked while holding a guard cannot have left it half-written, and refusing
// every later request over one crash would turn a bug into an outage.

/// Locks `m`, recovering from a poisoned lock.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `l`, recovering from a poisoned lock.
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `l`, recovering from a poisoned lock.
pub fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
