//! hotpath's popup decision service, after the popup report: a page asks whether there is a
//! popup for this user; the service picks one (or none), records when the user may see it
//! again, and logs what the user then does.
//!
//! - [`model`]: a popup's payload, priority, active window, targeting, rollout and frequency
//!   rules, parsed and checked from JSON;
//! - [`decide`]: targeting, rollout by a stable hash, frequency rules, the choice by priority
//!   with stable ties, and how shows, clicks and closes move a user's next eligible time;
//! - [`api`]: the wire formats, without I/O (show tokens: [`token`]);
//! - [`users`]: the per-user state in memory (loaded on first sight, bounded), keyed by
//!   [`user_id`]s;
//! - [`service`]: the endpoints, and the loader, poller and admin threads.
//!
//! Must not: speak SQL (the store does, fed by journaled changes) or open sockets (the server
//! does). Workers never wait on the database.

pub mod api;
pub mod decide;
mod error;
pub mod model;
pub mod service;
pub mod stored;
pub mod user_id;
pub mod users;

/// Show tokens (a wire format, kept with the codecs so the load generator signs them too).
pub use hotpath_wire::popup_token as token;

pub use decide::{Action, Catalog, Seen, Viewer};
pub use error::PopupsError;
pub use model::{Frequency, Popup, Targeting, Version, Wait};
pub use service::Popups;
