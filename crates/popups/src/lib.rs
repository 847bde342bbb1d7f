//! hotpath's popup decision service, after the popup report: a page asks whether there is a
//! popup for this user; the service picks one (or none), records when the user may see it
//! again, and logs what the user then does.
//!
//! Built so far: the model ([`model`]: a popup's payload, priority, active window, targeting,
//! rollout and frequency rules, parsed and checked from JSON) and the decision ([`decide`]:
//! targeting, rollout by a stable hash, frequency rules, the choice by priority with stable
//! ties, and how shows, clicks and closes move a user's next eligible time). Pure functions:
//! the HTTP handlers, the per-user cache and the write-behind of shows and events build on
//! them. Must not: talk to a database (the store does) or open sockets (the server does).

pub mod decide;
pub mod model;

pub use decide::{Action, Catalog, Seen, Viewer};
pub use model::{Frequency, Popup, Targeting, Version, Wait};
