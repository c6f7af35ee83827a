//! Evidence from the host: heartbeat file mtimes, the job's kernel lock, the owner's pid.
//!
//! Every probe only looks: it never creates, truncates, touches or deletes a file, and it
//! takes no lock when `/proc/locks` can answer. Unreadable evidence is reported as such,
//! never as "missing" or "free".
//!
//! A new source of evidence is a new file here, returning a value of its own type in
//! [`crate::decide`]; [`crate::evidence::gather`] calls it (one line) and
//! [`crate::evidence::render`] writes it down for every output (one entry).

pub mod heartbeat;
pub mod lock;
pub mod owner;

pub use heartbeat::file_heartbeat;
pub use lock::{LockTable, probe_lock};
pub use owner::probe_owner;
