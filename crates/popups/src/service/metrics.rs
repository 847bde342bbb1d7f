//! The service's lines of `/metrics`.

use super::*;

pub(super) fn write(popups: &Popups, out: &mut String) {
    use std::fmt::Write as _;
    let s = &popups.shared;
    let c = &s.counters;
    let g = Counter::get;
    let (users, bytes) = s.users();
    let popups = s.live.read().catalog.popups().len();
    let spent = s.spent.len();
    let _ = write!(
        out,
        "# HELP hotpath_popups_decisions_total Popup decisions, by result.\n\
         # TYPE hotpath_popups_decisions_total counter\n\
         hotpath_popups_decisions_total{{result=\"shown\"}} {}\n\
         hotpath_popups_decisions_total{{result=\"none\"}} {}\n\
         # HELP hotpath_popups_events_total Clicks and closes recorded.\n\
         # TYPE hotpath_popups_events_total counter\n\
         hotpath_popups_events_total{{action=\"click\"}} {}\n\
         hotpath_popups_events_total{{action=\"close\"}} {}\n\
         # HELP hotpath_popups_refused_total Popup requests refused, by reason.\n\
         # TYPE hotpath_popups_refused_total counter\n\
         hotpath_popups_refused_total{{reason=\"bad_request\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"bad_token\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"replay\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"spent_full\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"journal_full\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"loads_full\"}} {}\n\
         hotpath_popups_refused_total{{reason=\"load_failed\"}} {}\n\
         # HELP hotpath_popups_spent_tokens Answered shows remembered (popups.max_spent_tokens at most).\n\
         # TYPE hotpath_popups_spent_tokens gauge\n\
         hotpath_popups_spent_tokens {spent}\n\
         # HELP hotpath_popups_users Users whose state is in memory.\n\
         # TYPE hotpath_popups_users gauge\n\
         hotpath_popups_users {users}\n\
         # HELP hotpath_popups_users_limit popups.max_users.\n\
         # TYPE hotpath_popups_users_limit gauge\n\
         hotpath_popups_users_limit {}\n\
         # HELP hotpath_popups_users_bytes Bytes the user table takes (buckets and heap).\n\
         # TYPE hotpath_popups_users_bytes gauge\n\
         hotpath_popups_users_bytes {bytes}\n\
         # HELP hotpath_popups_users_evicted_total Idle users dropped to stay under the cap.\n\
         # TYPE hotpath_popups_users_evicted_total counter\n\
         hotpath_popups_users_evicted_total {}\n\
         # HELP hotpath_popups_known_users Users known to have state (a new user needs no lookup).\n\
         # TYPE hotpath_popups_known_users gauge\n\
         hotpath_popups_known_users {}\n\
         # HELP hotpath_popups_fresh_users_total New users started without a lookup.\n\
         # TYPE hotpath_popups_fresh_users_total counter\n\
         hotpath_popups_fresh_users_total {}\n\
         # HELP hotpath_popups_loads_total Users loaded from the database.\n\
         # TYPE hotpath_popups_loads_total counter\n\
         hotpath_popups_loads_total {}\n\
         # HELP hotpath_popups_load_queries_total Database lookups of user state.\n\
         # TYPE hotpath_popups_load_queries_total counter\n\
         hotpath_popups_load_queries_total {}\n\
         # HELP hotpath_popups_load_failures_total Failed lookups of user state.\n\
         # TYPE hotpath_popups_load_failures_total counter\n\
         hotpath_popups_load_failures_total {}\n\
         # HELP hotpath_popups_popups Popups in the catalog.\n\
         # TYPE hotpath_popups_popups gauge\n\
         hotpath_popups_popups {popups}\n\
         # HELP hotpath_popups_catalog_reloads_total Catalog changes found by polling the table.\n\
         # TYPE hotpath_popups_catalog_reloads_total counter\n\
         hotpath_popups_catalog_reloads_total {}\n\
         # HELP hotpath_popups_catalog_poll_failures_total Failed polls of the popup table.\n\
         # TYPE hotpath_popups_catalog_poll_failures_total counter\n\
         hotpath_popups_catalog_poll_failures_total {}\n\
         # HELP hotpath_popups_admin_writes_total Popups saved through the admin API.\n\
         # TYPE hotpath_popups_admin_writes_total counter\n\
         hotpath_popups_admin_writes_total {}\n",
        g(&c.shown),
        g(&c.none),
        g(&c.clicks),
        g(&c.closes),
        g(&c.bad_requests),
        g(&c.bad_tokens),
        g(&c.replays),
        g(&c.spent_full),
        g(&c.journal_full),
        g(&c.load_busy),
        g(&c.load_errors),
        s.cfg.max_users,
        g(&s.users.evicted),
        s.users.known(),
        g(&s.users.fresh),
        g(&c.loads),
        g(&c.load_queries),
        g(&c.load_failures),
        g(&c.reloads),
        g(&c.reload_failures),
        g(&c.admin_writes),
    );
}
