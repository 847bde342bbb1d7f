//! The service's metrics: declared once here, added to each scrape by [`collect`].

use hotpath_metrics::{Desc, Samples};

use super::*;

static DECISIONS: Desc = Desc::counter(
    "hotpath_popups_decisions_total",
    "Popup decisions, by result.",
)
.labels(&["result"]);
static EVENTS: Desc =
    Desc::counter("hotpath_popups_events_total", "Clicks and closes recorded.").labels(&["action"]);
static REFUSED: Desc = Desc::counter(
    "hotpath_popups_refused_total",
    "Popup requests refused, by reason.",
)
.labels(&["reason"]);
static USERS: Desc = Desc::gauge("hotpath_popups_users", "Users whose state is in memory.");
static USERS_LIMIT: Desc = Desc::gauge("hotpath_popups_users_limit", "popups.max_users.");
static USERS_BYTES: Desc = Desc::gauge(
    "hotpath_popups_users_bytes",
    "Bytes the user table takes (buckets and heap).",
);
static BYTES_PER_USER: Desc = Desc::gauge(
    "hotpath_popups_bytes_per_user",
    "Bytes the user table takes per user in memory.",
);
static USERS_EVICTED: Desc = Desc::counter(
    "hotpath_popups_users_evicted_total",
    "Idle users dropped to stay under the cap.",
);
static KNOWN_USERS: Desc = Desc::gauge(
    "hotpath_popups_known_users",
    "Users known to have state (a new user needs no lookup).",
);
static FRESH_USERS: Desc = Desc::counter(
    "hotpath_popups_fresh_users_total",
    "New users started without a lookup.",
);
static LOADS: Desc = Desc::counter(
    "hotpath_popups_loads_total",
    "Users loaded from the database.",
);
static LOAD_QUERIES: Desc = Desc::counter(
    "hotpath_popups_load_queries_total",
    "Database lookups of user state.",
);
static LOAD_FAILURES: Desc = Desc::counter(
    "hotpath_popups_load_failures_total",
    "Failed lookups of user state.",
);
static POPUPS: Desc = Desc::gauge("hotpath_popups_popups", "Popups in the catalog.");
static CATALOG_RELOADS: Desc = Desc::counter(
    "hotpath_popups_catalog_reloads_total",
    "Catalog changes found by polling the table.",
);
static CATALOG_POLL_FAILURES: Desc = Desc::counter(
    "hotpath_popups_catalog_poll_failures_total",
    "Failed polls of the popup table.",
);
static ADMIN_THROTTLED: Desc = Desc::counter(
    "hotpath_popups_admin_throttled_total",
    "Admin requests refused with 429: their address sent more wrong tokens than \
     popups.max_auth_failures_per_min.",
);
static GUESSERS_FORGOTTEN: Desc = Desc::counter(
    "hotpath_popups_guessers_forgotten_total",
    "Addresses counted for wrong admin tokens, forgotten before their minute ended to hold \
     at most 65,536 (guessing spread over more addresses).",
);
static ADMIN_WRITES: Desc = Desc::counter(
    "hotpath_popups_admin_writes_total",
    "Popups saved through the admin API.",
);

pub(super) fn collect(popups: &Popups, out: &mut Samples) {
    let s = &popups.shared;
    let c = &s.counters;
    let (users, bytes) = s.users();
    out.section("popups")
        .labeled(&DECISIONS, &["shown"], c.shown.get())
        .labeled(&DECISIONS, &["none"], c.none.get())
        .labeled(&EVENTS, &["click"], c.clicks.get())
        .labeled(&EVENTS, &["close"], c.closes.get());
    for (reason, n) in [
        ("bad_request", &c.bad_requests),
        ("bad_token", &c.bad_tokens),
        ("replay", &c.replays),
        ("journal_full", &c.journal_full),
        ("loads_full", &c.load_busy),
        ("load_failed", &c.load_errors),
    ] {
        out.labeled(&REFUSED, &[reason], n.get());
    }
    out.add(&USERS, users)
        .add(&USERS_LIMIT, s.cfg.max_users)
        .add(&USERS_BYTES, bytes)
        .add(&BYTES_PER_USER, bytes / users.max(1))
        .add(&USERS_EVICTED, s.users.evicted.get())
        .add(&KNOWN_USERS, s.users.known())
        .add(&FRESH_USERS, s.users.fresh.get())
        .add(&LOADS, c.loads.get())
        .add(&LOAD_QUERIES, c.load_queries.get())
        .add(&LOAD_FAILURES, c.load_failures.get())
        .add(&POPUPS, s.live.read().catalog.popups().len())
        .add(&CATALOG_RELOADS, c.reloads.get())
        .add(&CATALOG_POLL_FAILURES, c.reload_failures.get())
        .add(&ADMIN_WRITES, c.admin_writes.get())
        .add(&ADMIN_THROTTLED, s.token_guesses.refused.get())
        .add(&GUESSERS_FORGOTTEN, s.token_guesses.forgotten.get());
}
