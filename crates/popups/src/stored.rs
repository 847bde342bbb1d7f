//! The popup service as the write-behind store knows it: its change (journal tag 2), the queue
//! that merges users' states, the event log and shows per day, its tables, and its reads of
//! the database and of what waits to be written.
//!
//! Owns: [`PopupChange`] and its journal encoding, [`PopupQueue`], the `hp_popup*` tables,
//! [`POPUPS`], [`PopupDb`] and [`PopupStore`]. Must not: do I/O outside those two.

use std::any::Any;
use std::collections::HashMap as StdMap;

// hashbrown's default hasher: these maps are keyed by data the workers merge on every commit.
use hashbrown::HashMap;
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::{Backend, Encode, Queue, Service, Store, StoreError};
use smallvec::SmallVec;

use crate::user_id::UserId;

/// [`PopupChange`]'s action: shown.
pub const SHOWN: u8 = 1;
/// [`PopupChange`]'s action: clicked.
pub const CLICK: u8 = 2;
/// [`PopupChange`]'s action: closed.
pub const CLOSE: u8 = 3;
/// The longest user id a change carries.
pub const MAX_USER_LEN: usize = 255;

/// The popup service's journal tag: a show (and a click or close journaled by an older build).
const TAG: u8 = 2;
/// A click or close, with the show it answers.
const TAG_ANSWER: u8 = 8;
/// Encoded size of a [`PopupChange`] without its user id (tag 2; tag 8 has 4 bytes more).
const FIXED: usize = 1 + 4 + 1 + 8 + 4 + 4 + 1;

/// A popup shown to a user, or the user's click or close: the user's state for that popup
/// after it (absolute, so the newest wins), and one line of the event log. Decoded, it owns
/// its user id (inline when short: no allocation); a request journals one that borrows the id
/// from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopupChange<U = UserId> {
    /// The user id (at most [`MAX_USER_LEN`] bytes).
    pub user: U,
    /// The popup id.
    pub popup: u32,
    /// What happened: [`SHOWN`], [`CLICK`] or [`CLOSE`].
    pub action: u8,
    /// Unix second from which the user may see the popup again (`u64::MAX`: never).
    pub next_eligible: u64,
    /// Times the user has been shown the popup, this one included.
    pub shows: u32,
    /// Unix seconds of the event.
    pub at: u32,
    /// For a click or close, the unix second of the show it answers (its token's); 0 for a
    /// show, and for an answer an older build journaled (its own second then stands for the
    /// show's, see [`PopupChange::answered_show`]).
    pub answers: u32,
}

impl PopupChange {
    /// Decodes the change at the start of `b` and its length; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<(PopupChange, usize)> {
        let fixed = match *b.first()? {
            TAG => FIXED,
            TAG_ANSWER => FIXED + 4,
            _ => return None,
        };
        if b.len() < fixed {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let len = fixed + usize::from(b[fixed - 1]);
        let user = std::str::from_utf8(b.get(fixed..len)?).ok()?;
        let action = b[5];
        let at = u32_at(18);
        // Tag 8 is a click or close with the show it answers (never 0); tag 2 has none.
        let answers = match (fixed == FIXED, action) {
            (true, _) => 0,
            (false, CLICK | CLOSE) if u32_at(22) != 0 => u32_at(22),
            (false, _) => return None,
        };
        let change = PopupChange {
            popup: u32_at(1),
            action,
            next_eligible: u64::from_le_bytes(b[6..14].try_into().unwrap()),
            shows: u32_at(14),
            at,
            answers,
            user: UserId::new(user),
        };
        Some((change, len))
    }
}

impl<U> PopupChange<U> {
    /// Whether it is written as tag 8: a click or close that names the show it answers.
    fn tagged_answer(&self) -> bool {
        matches!(self.action, CLICK | CLOSE) && self.answers != 0
    }

    /// The second of the show a click or close answered: the one it names, or for one an
    /// older build journaled, its own (an answer comes after its show, so no later show is
    /// taken for answered).
    pub fn answered_show(&self) -> u32 {
        if self.answers != 0 {
            self.answers
        } else {
            self.at
        }
    }
}

impl<U: AsRef<str>> Encode for PopupChange<U> {
    fn encoded_len(&self) -> usize {
        let answer = if self.tagged_answer() { 4 } else { 0 };
        FIXED + answer + self.user.as_ref().len().min(MAX_USER_LEN)
    }

    /// A user id is cut at [`MAX_USER_LEN`] bytes (callers refuse longer ones before).
    fn encode(&self, out: &mut Vec<u8>) {
        let answer = self.tagged_answer();
        out.push(if answer { TAG_ANSWER } else { TAG });
        out.extend_from_slice(&self.popup.to_le_bytes());
        out.push(self.action);
        out.extend_from_slice(&self.next_eligible.to_le_bytes());
        out.extend_from_slice(&self.shows.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        if answer {
            out.extend_from_slice(&self.answers.to_le_bytes());
        }
        let user = hotpath_store::queue::cut(self.user.as_ref(), MAX_USER_LEN);
        out.push(user.len() as u8);
        out.extend_from_slice(user);
    }
}

/// One user's state for one popup, as the flusher upserts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopupUserRow {
    /// Unix second from which the popup may be shown again (`u64::MAX`: never).
    pub next_eligible: u64,
    /// Times shown.
    pub shows: u32,
    /// The last action ([`SHOWN`], [`CLICK`], [`CLOSE`]).
    pub last_action: u8,
    /// Unix seconds of that action.
    pub updated_at: u32,
    /// Unix second of the show the user's last click on the popup answered (0: none), and
    /// of the show their last close answered: an answer to a show at or before it was
    /// given already.
    pub clicked_show: u32,
    /// See `clicked_show`.
    pub closed_show: u32,
}

impl PopupUserRow {
    /// A row of [`POPUP_USERS`]: `(user, popup, state)`.
    pub fn from_row(row: &[Value]) -> (&str, u32, PopupUserRow) {
        let state = PopupUserRow {
            next_eligible: loaded_time(row[2].int()),
            shows: row[3].int() as u32,
            last_action: row[4].int() as u8,
            updated_at: row[5].int() as u32,
            clicked_show: row[6].int().clamp(0, i64::from(u32::MAX)) as u32,
            closed_show: row[7].int().clamp(0, i64::from(u32::MAX)) as u32,
        };
        (row[0].text(), row[1].int() as u32, state)
    }

    /// This state laid over `under`, an older one of the same user and popup: this one
    /// stays, with the later of both clicks and of both closes (an answer is never
    /// forgotten, whatever came after it).
    pub fn laid_over(self, under: &PopupUserRow) -> PopupUserRow {
        PopupUserRow {
            clicked_show: self.clicked_show.max(under.clicked_show),
            closed_show: self.closed_show.max(under.closed_show),
            ..self
        }
    }

    /// The order of a user's states for one popup: later second, then more shows, then an
    /// answer after the show it answers. Several workers (and, replayed, several journals)
    /// may hold changes of one user, and no order among them is kept: this one is.
    pub fn order(&self) -> (u32, u32, bool) {
        (self.updated_at, self.shows, self.last_action != SHOWN)
    }
}

/// One line of the popup event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopupEvent {
    /// Unix seconds.
    pub at: u32,
    /// The user id.
    pub user: UserId,
    /// The popup id.
    pub popup: u32,
    /// [`SHOWN`], [`CLICK`] or [`CLOSE`].
    pub action: u8,
}

/// A user's pending rows per popup: one inline (a user mostly changes one popup between
/// two flushes), more on the heap.
type UserRows = SmallVec<[(u32, PopupUserRow); 1]>;

/// The popup service's queue: users' states, the event log and shows per day.
#[derive(Debug, Default)]
pub struct PopupQueue {
    /// Per user, per popup: the newest state (keyed by user so a user's pending state is
    /// one lookup when the popup service loads it).
    users: HashMap<UserId, UserRows>,
    /// Rows in `users`.
    user_rows: usize,
    /// The event log, in arrival order.
    events: Vec<PopupEvent>,
    /// Per (popup, UTC day): shows to add.
    daily: HashMap<(u32, u32), u64>,
}

impl PopupQueue {
    /// Sets a user's state for a popup unless the state held is later (see
    /// [`PopupUserRow::order`]); of two equal in order, the one merged last wins.
    fn put_user(&mut self, user: &UserId, popup: u32, row: PopupUserRow) {
        let rows = match self.users.get_mut(user) {
            Some(rows) => rows,
            None => self.users.entry(user.clone()).or_default(),
        };
        match rows.iter_mut().find(|(p, _)| *p == popup) {
            Some((_, r)) => {
                *r = if row.order() >= r.order() {
                    row.laid_over(r)
                } else {
                    r.laid_over(&row)
                };
            }
            None => {
                rows.push((popup, row));
                self.user_rows += 1;
            }
        }
    }

    /// A user's pending state per popup (written to the database by the next flush).
    pub fn user(&self, user: &str) -> &[(u32, PopupUserRow)] {
        self.users.get(user).map_or(&[], |rows| rows.as_slice())
    }

    /// The users with pending state.
    pub fn user_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.users.keys().map(UserId::as_str)
    }

    /// `(popup, action)` of every pending event.
    pub fn event_keys(&self) -> impl Iterator<Item = (u32, u8)> + '_ {
        self.events.iter().map(|e| (e.popup, e.action))
    }

    /// Shows pending per popup on UTC day `day`.
    pub fn daily(&self, day: u32) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.daily
            .iter()
            .filter(move |((_, d), _)| *d == day)
            .map(|((p, _), n)| (*p, *n))
    }
}

impl Queue for PopupQueue {
    fn apply(&mut self, bytes: &[u8]) -> Option<usize> {
        let (change, len) = PopupChange::decode(bytes)?;
        let answered = change.answered_show();
        let PopupChange {
            user,
            popup,
            action,
            next_eligible,
            shows,
            at,
            ..
        } = change;
        let row = PopupUserRow {
            next_eligible,
            shows,
            last_action: action,
            updated_at: at,
            clicked_show: if action == CLICK { answered } else { 0 },
            closed_show: if action == CLOSE { answered } else { 0 },
        };
        self.put_user(&user, popup, row);
        self.events.push(PopupEvent {
            at,
            user,
            popup,
            action,
        });
        if action == SHOWN {
            *self.daily.entry((popup, at / 86_400)).or_insert(0) += 1;
        }
        Some(len)
    }

    fn rows(&self) -> usize {
        self.user_rows + self.events.len() + self.daily.len()
    }

    fn take(&mut self) -> Vec<Rows> {
        let mut users: Vec<_> = self.users.drain().collect();
        users.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut states = Rows::with_capacity(&POPUP_USERS, self.user_rows);
        self.user_rows = 0;
        for (user, mut rows) in users {
            rows.sort_unstable_by_key(|s| s.0);
            for (popup, r) in rows {
                states.push([
                    Value::Text(user.as_str().into()),
                    popup.into(),
                    Value::Int(stored_time(r.next_eligible)),
                    r.shows.into(),
                    u32::from(r.last_action).into(),
                    r.updated_at.into(),
                    r.clicked_show.into(),
                    r.closed_show.into(),
                ]);
            }
        }
        let mut events = Rows::with_capacity(&POPUP_EVENTS, self.events.len());
        for e in self.events.drain(..) {
            events.push([
                e.at.into(),
                Value::Text(e.user.as_str().into()),
                e.popup.into(),
                u32::from(e.action).into(),
            ]);
        }
        let mut daily: Vec<_> = self.daily.drain().collect();
        daily.sort_unstable();
        let mut shows = Rows::with_capacity(&POPUP_DAILY, daily.len());
        for ((popup, day), n) in daily {
            shows.push([popup.into(), day.into(), Value::Int(n as i64)]);
        }
        vec![states, events, shows]
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::new(PopupQueue {
            users: HashMap::with_capacity(self.users.len()),
            user_rows: 0,
            events: Vec::with_capacity(self.events.len()),
            daily: HashMap::with_capacity(self.daily.len()),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The popup service, as the store knows it. Its tables were created by the store's
/// migration 3, before services had their own; it has none of its own yet.
pub static POPUPS: Service = Service {
    name: "popups",
    tags: &[TAG, TAG_ANSWER],
    tables: &[&POPUP_USERS, &POPUP_EVENTS, &POPUP_DAILY],
    queue: &|| Box::<PopupQueue>::default(),
    migrations: &[],
};

/// `hp_popup_users`: a user's state per popup; of two, the later in [`PopupUserRow::order`]
/// stays.
pub static POPUP_USERS: Table = Table {
    name: "hp_popup_users",
    columns: &[
        col("user_id", Type::Text, Merge::Key),
        col("popup_id", Type::Int, Merge::Key),
        col("next_eligible", Type::Int, Merge::Replace),
        col("shows", Type::Int, Merge::Replace),
        col("last_action", Type::Int, Merge::Replace),
        col("updated_at", Type::Int, Merge::Replace),
        col("clicked_show_at", Type::Int, Merge::Max),
        col("closed_show_at", Type::Int, Merge::Max),
    ],
    update_only: false,
    keeps_older: Some(|older, newer| {
        PopupUserRow::from_row(older).2.order() > PopupUserRow::from_row(newer).2.order()
    }),
};

/// `hp_popup_events`: the event log.
pub static POPUP_EVENTS: Table = Table {
    name: "hp_popup_events",
    columns: &[
        col("at", Type::Int, Merge::Keep),
        col("user_id", Type::Text, Merge::Keep),
        col("popup_id", Type::Int, Merge::Keep),
        col("action", Type::Int, Merge::Keep),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_popup_daily`: shows per popup per UTC day.
pub static POPUP_DAILY: Table = Table {
    name: "hp_popup_daily",
    columns: &[
        col("popup_id", Type::Int, Merge::Key),
        col("day", Type::Int, Merge::Key),
        col("shows", Type::Int, Merge::Add),
    ],
    update_only: false,
    keeps_older: None,
};

/// `hp_popups`: popup definitions (the admin API writes them one at a time).
pub static DEFINITIONS: Table = Table {
    name: "hp_popups",
    columns: &[
        col("id", Type::Int, Merge::Key),
        // MySQL's TEXT.
        col("definition", Type::Text, Merge::Replace).max_bytes(65_535),
        col("updated_at", Type::Int, Merge::Replace),
    ],
    update_only: false,
    keeps_older: None,
};

/// A unix time as stored (64-bit signed; "never", `u64::MAX`, becomes `i64::MAX`).
pub fn stored_time(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// A stored time read back (`i64::MAX` is "never" again; negatives are 0).
pub fn loaded_time(t: i64) -> u64 {
    if t == i64::MAX {
        u64::MAX
    } else {
        u64::try_from(t).unwrap_or(0)
    }
}

/// Every user id with popup state, once each (an index scan: the key starts with it).
const POPUP_USER_IDS: &str = "SELECT DISTINCT user_id FROM hp_popup_users";

/// A user's state for one popup as read back: `(user, popup, state)`.
pub type UserRow = (String, u32, PopupUserRow);

/// The `IN` list sizes of a user-state lookup: each lookup is padded (repeating its last user)
/// to one of these, so a driver prepares at most four statements for any number of users.
pub const USER_LOOKUP_SIZES: [usize; 4] = [1, 8, 64, 512];

/// Splits `users` into lookups of [`USER_LOOKUP_SIZES`], each padded with its last user.
pub fn user_lookups<'a>(users: &[&'a str]) -> Vec<Vec<&'a str>> {
    let max = USER_LOOKUP_SIZES[USER_LOOKUP_SIZES.len() - 1];
    users
        .chunks(max)
        .map(|chunk| {
            let size = USER_LOOKUP_SIZES
                .iter()
                .copied()
                .find(|&s| s >= chunk.len())
                .unwrap_or(max);
            let mut v = chunk.to_vec();
            v.resize(size, chunk[chunk.len() - 1]);
            v
        })
        .collect()
}

/// The lookup of `n` users' popup state (`n` placeholders).
fn select_popup_users(n: usize) -> String {
    format!(
        "SELECT user_id, popup_id, next_eligible, shows, last_action, updated_at, \
         clicked_show_at, closed_show_at FROM hp_popup_users WHERE user_id IN ({})",
        vec!["?"; n].join(",")
    )
}

/// Every popup definition, in id order.
const SELECT_POPUPS: &str = "SELECT id, definition FROM hp_popups ORDER BY id";

/// A 128-bit hash of popup rows `(id, text)` in id order: the same for the same rows, and
/// different (but for a 2^-128 chance) when any row is added, removed or changed, however
/// the text is written. Keyed with fixed keys: it is compared only with itself.
#[derive(Default)]
pub struct Fingerprint(siphasher::sip128::SipHasher13);

impl Fingerprint {
    /// Adds the next row.
    pub fn add(&mut self, id: u32, text: &str) {
        use std::hash::Hasher as _;
        self.0.write_u32(id);
        self.0.write_usize(text.len());
        self.0.write(text.as_bytes());
    }

    /// The rows' fingerprint.
    pub fn finish(&self) -> u128 {
        use siphasher::sip128::Hasher128 as _;
        self.0.finish128().as_u128()
    }

    /// The fingerprint of `rows`.
    pub fn of(rows: &[(u32, String)]) -> u128 {
        let mut f = Fingerprint::default();
        for (id, text) in rows {
            f.add(*id, text);
        }
        f.finish()
    }
}

/// The popup service's reads and writes of the database, over any [`Backend`].
pub trait PopupDb: Backend {
    /// Every popup definition in `hp_popups`: `(id, JSON text)`.
    fn popups(&mut self) -> Result<Vec<(u32, String)>, StoreError> {
        let mut out = Vec::new();
        self.query(SELECT_POPUPS, &[], &mut |r| {
            out.push((r[0].int() as u32, r[1].text().to_string()))
        })?;
        Ok(out)
    }

    /// The [`Fingerprint`] of every popup definition in `hp_popups`, without keeping the
    /// rows: the poller reads the table whole only when this changed.
    fn popups_fingerprint(&mut self) -> Result<u128, StoreError> {
        let mut f = Fingerprint::default();
        self.query(SELECT_POPUPS, &[], &mut |r| {
            f.add(r[0].int() as u32, r[1].text())
        })?;
        Ok(f.finish())
    }

    /// The users' state per popup, from `hp_popup_users`: `(user, popup, state)` rows, in
    /// as few statements as [`user_lookups`] allows.
    fn popup_users(&mut self, users: &[&str]) -> Result<Vec<UserRow>, StoreError> {
        let mut out = Vec::new();
        for lookup in user_lookups(users) {
            let params: Vec<Value> = lookup.iter().map(|u| Value::from(*u)).collect();
            self.query(&select_popup_users(lookup.len()), &params, &mut |r| {
                let (user, popup, state) = PopupUserRow::from_row(r);
                out.push((user.to_string(), popup, state));
            })?;
        }
        Ok(out)
    }

    /// One user's state per popup.
    fn popup_user(&mut self, user: &str) -> Result<Vec<(u32, PopupUserRow)>, StoreError> {
        let rows = self.popup_users(&[user])?;
        Ok(rows.into_iter().map(|(_, p, r)| (p, r)).collect())
    }

    /// Calls `each` with every user id that has popup state, streaming (millions of rows
    /// are not held at once).
    fn popup_user_ids(&mut self, each: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        self.query(POPUP_USER_IDS, &[], &mut |r| each(r[0].text()))
    }

    /// Deletes the states of users who were only shown a popup, never answered it, and whose
    /// cooldown ended and last show came before unix second `before`
    /// (`popups.forget_idle_users_after_days`).
    fn forget_idle_users(&mut self, before: i64) -> Result<(), StoreError> {
        self.execute_with(
            "DELETE FROM hp_popup_users WHERE last_action = 1 AND clicked_show_at = 0 \
             AND closed_show_at = 0 AND next_eligible < ? AND updated_at < ?",
            &[Value::Int(before), Value::Int(before)],
        )
    }

    /// Deletes the events before unix second `before` (`popups.keep_events_days`).
    fn forget_events(&mut self, before: i64) -> Result<(), StoreError> {
        self.execute_with(
            "DELETE FROM hp_popup_events WHERE at < ?",
            &[Value::Int(before)],
        )
    }

    /// Creates or replaces popup `id`'s definition (JSON text), stamped `updated_at`.
    fn save_popup(&mut self, id: u32, definition: &str, updated_at: i64) -> Result<(), StoreError> {
        let sql = self.dialect().insert(&DEFINITIONS, 1);
        self.execute_with(
            &sql,
            &[id.into(), definition.into(), Value::Int(updated_at)],
        )
    }

    /// Shows per popup on UTC day `day` (unix seconds / 86400), from `hp_popup_daily`.
    fn popup_daily(&mut self, day: u32) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT popup_id, shows FROM hp_popup_daily WHERE day = ?",
            &[day.into()],
            &mut |r| out.push((r[0].int() as u32, r[1].int() as u64)),
        )?;
        Ok(out)
    }

    /// `(popup, action, events)` over the whole event log (shows, clicks, closes per popup).
    fn popup_event_counts(&mut self) -> Result<Vec<(u32, u8, u64)>, StoreError> {
        let mut out = Vec::new();
        self.query(
            "SELECT popup_id, action, COUNT(*) FROM hp_popup_events \
             GROUP BY popup_id, action ORDER BY popup_id, action",
            &[],
            &mut |r| out.push((r[0].int() as u32, r[1].int() as u8, r[2].int() as u64)),
        )?;
        Ok(out)
    }
}

impl<B: Backend + ?Sized> PopupDb for B {}

/// The popup service's reads through the store: the database's rows with those waiting to be
/// written laid over them (see [`Store::overlay`]).
pub trait PopupStore {
    /// The users with popup state waiting to be written (replayed from the journal, kept
    /// after a failed write, or not flushed yet). Read under the lock the flusher writes
    /// under: a scan of the database started after this call then finds every user this list
    /// lacks. Without it, a batch taken from the queue before the call and committed after
    /// the scan's snapshot was in neither, and its users looked new.
    fn pending_popup_users(&self) -> Result<Vec<String>, StoreError>;

    /// The users' popup state, per user.
    fn popup_users(
        &self,
        users: &[&str],
    ) -> Result<StdMap<String, Vec<(u32, PopupUserRow)>>, StoreError>;

    /// Shows per popup on UTC day `day`.
    fn popup_daily(&self, day: u32) -> Result<StdMap<u32, u64>, StoreError>;

    /// Events per `(popup, action)` over the whole log.
    fn popup_event_counts(&self) -> Result<StdMap<(u32, u8), u64>, StoreError>;
}

impl PopupStore for Store {
    fn pending_popup_users(&self) -> Result<Vec<String>, StoreError> {
        self.overlay(
            |_, carry| {
                let rows = carry.rows_of(&POPUP_USERS);
                Ok(rows.map(|r| r[0].text().to_string()).collect())
            },
            |users: &mut Vec<String>, q: &PopupQueue| {
                users.extend(q.user_names().map(String::from))
            },
        )
    }

    fn popup_users(
        &self,
        users: &[&str],
    ) -> Result<StdMap<String, Vec<(u32, PopupUserRow)>>, StoreError> {
        type Read = (
            StdMap<String, Vec<(u32, PopupUserRow)>>,
            Vec<(String, u32, PopupUserRow)>,
        );
        let (mut out, carried) = self.overlay(
            |db, carry| {
                let mut out: StdMap<String, Vec<(u32, PopupUserRow)>> = StdMap::new();
                for (user, popup, row) in db.popup_users(users)? {
                    out.entry(user).or_default().push((popup, row));
                }
                let carried = carry.rows_of(&POPUP_USERS);
                let carried = carried
                    .map(PopupUserRow::from_row)
                    .filter(|(u, _, _)| users.contains(u))
                    .map(|(u, p, r)| (u.to_string(), p, r))
                    .collect();
                Ok((out, carried))
            },
            |(_, carried): &mut Read, q: &PopupQueue| {
                // The carry's rows, then the queue's over them where they order later (as
                // the next flush merges them).
                for user in users {
                    for &(popup, row) in q.user(user) {
                        match carried.iter_mut().find(|c| c.0 == *user && c.1 == popup) {
                            Some(c) if row.order() >= c.2.order() => c.2 = row.laid_over(&c.2),
                            Some(c) => c.2 = c.2.laid_over(&row),
                            None => carried.push((user.to_string(), popup, row)),
                        }
                    }
                }
            },
        )?;
        for (user, popup, row) in carried {
            let rows = out.entry(user).or_default();
            match rows.iter_mut().find(|(p, _)| *p == popup) {
                Some((_, r)) => *r = row.laid_over(r),
                None => rows.push((popup, row)),
            }
        }
        Ok(out)
    }

    fn popup_daily(&self, day: u32) -> Result<StdMap<u32, u64>, StoreError> {
        self.overlay(
            |db, carry| {
                let mut out: StdMap<u32, u64> = db.popup_daily(day)?.into_iter().collect();
                let carried = carry.rows_of(&POPUP_DAILY);
                for r in carried.filter(|r| r[1].int() == i64::from(day)) {
                    *out.entry(r[0].int() as u32).or_insert(0) += r[2].int() as u64;
                }
                Ok(out)
            },
            |out, q: &PopupQueue| {
                for (popup, n) in q.daily(day) {
                    *out.entry(popup).or_insert(0) += n;
                }
            },
        )
    }

    fn popup_event_counts(&self) -> Result<StdMap<(u32, u8), u64>, StoreError> {
        self.overlay(
            |db, carry| {
                let mut out: StdMap<(u32, u8), u64> = db
                    .popup_event_counts()?
                    .into_iter()
                    .map(|(p, a, n)| ((p, a), n))
                    .collect();
                let carried = carry.rows_of(&POPUP_EVENTS);
                for e in carried {
                    *out.entry((e[2].int() as u32, e[3].int() as u8))
                        .or_insert(0) += 1;
                }
                Ok(out)
            },
            |out, q: &PopupQueue| {
                for key in q.event_keys() {
                    *out.entry(key).or_insert(0) += 1;
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpath_store::queue::{decode_all, Queues};

    fn pop(user: &str, popup: u32, action: u8, next: u64, shows: u32, at: u32) -> PopupChange {
        PopupChange {
            user: user.into(),
            popup,
            action,
            next_eligible: next,
            shows,
            at,
            answers: if action == SHOWN { 0 } else { at - 5 },
        }
    }

    /// A click or close journaled by an older build (tag 2, without the show it answers)
    /// decodes with its own second standing for its show's: a replay of it is refused too.
    #[test]
    fn an_answer_of_an_older_build_decodes_with_its_own_second() {
        let c = pop("alice", 7, CLICK, 9, 1, 500);
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(b[0], TAG_ANSWER);
        assert_eq!(PopupChange::decode(&b).unwrap().0.answers, 495);
        // The older layout: tag 2, no answered second; its own second stands for it, and it
        // encodes back as it was.
        let old: Vec<u8> = [&[TAG][..], &b[1..22], &b[26..]].concat();
        let (d, len) = PopupChange::decode(&old).unwrap();
        assert_eq!((d.answers, d.answered_show(), len), (0, 500, old.len()));
        let mut again = Vec::new();
        d.encode(&mut again);
        assert_eq!(again, old);
        // A show, or an answer of no show, in the answer's layout is not one.
        let mut bad = b.clone();
        bad[5] = SHOWN;
        assert!(PopupChange::decode(&bad).is_none());
        let mut bad = b.clone();
        bad[22..26].copy_from_slice(&[0; 4]);
        assert!(PopupChange::decode(&bad).is_none());
    }

    #[test]
    fn popup_changes_round_trip_and_merge_into_state_log_and_daily_counts() {
        let changes = vec![
            pop("alice", 7, SHOWN, 1_000, 1, 86_400 + 10),
            pop("alice", 7, CLICK, u64::MAX, 1, 86_400 + 20),
            pop("bob", 7, SHOWN, 2_000, 3, 2 * 86_400),
        ];
        let mut buf = Vec::new();
        for c in &changes {
            c.encode(&mut buf);
        }
        assert_eq!(
            buf.len(),
            changes.iter().map(Encode::encoded_len).sum::<usize>()
        );
        assert_eq!(decode_all(&buf, PopupChange::decode), Some(changes.clone()));
        assert!(decode_all(&buf[..buf.len() - 1], PopupChange::decode).is_none());

        let mut p = Queues::new(&[&POPUPS]).unwrap();
        for c in &changes {
            p.push(c).unwrap();
        }
        assert_eq!(p.rows(), 2 + 3 + 2);
        let mut b = p.take();
        p.push(&pop("alice", 7, CLOSE, 5_000, 1, 3 * 86_400))
            .unwrap();
        b.merge(p.take());
        // The newest state wins, the log keeps every event in order, shows per day add.
        let users = b.part(&POPUP_USERS).unwrap();
        let alice = users.row(0);
        assert_eq!(alice[0], Value::from("alice"), "sorted by user");
        assert_eq!(
            alice[2..5],
            [5_000u32.into(), 1u32.into(), u32::from(CLOSE).into()]
        );
        let actions: Vec<i64> = b
            .part(&POPUP_EVENTS)
            .unwrap()
            .iter()
            .map(|e| e[3].int())
            .collect();
        assert_eq!(actions, [SHOWN, CLICK, SHOWN, CLOSE].map(i64::from));
        let daily: Vec<_> = b
            .part(&POPUP_DAILY)
            .unwrap()
            .iter()
            .map(|r| r.to_vec())
            .collect();
        assert_eq!(
            daily,
            [[7u32, 1, 1], [7, 2, 1]].map(|r| r.map(Value::from).to_vec())
        );

        // A failed batch put under newer changes keeps a state that orders later.
        let mut failed = Queues::new(&[&POPUPS]).unwrap();
        failed.push(&pop("dan", 1, CLICK, 70, 2, 500)).unwrap();
        let mut failed = failed.take();
        let mut newer = Queues::new(&[&POPUPS]).unwrap();
        newer.push(&pop("dan", 1, SHOWN, 60, 1, 400)).unwrap();
        failed.merge(newer.take());
        assert_eq!(failed.part(&POPUP_USERS).unwrap().row(0)[2], Value::Int(70));

        // Merged out of order (two workers' journals, replayed one after the other), a
        // user's state still ends at the latest: later second, more shows, answer after show.
        let mut p = Queues::new(&[&POPUPS]).unwrap();
        for c in [
            pop("carol", 1, SHOWN, 50, 2, 100),
            pop("carol", 1, CLICK, 900, 2, 100),
            pop("carol", 1, SHOWN, 40, 1, 100),
            pop("carol", 1, CLOSE, 60, 1, 99),
        ] {
            p.push(&c).unwrap();
        }
        let b = p.take();
        let carol = b.part(&POPUP_USERS).unwrap().row(0);
        assert_eq!(
            carol[2..5],
            [900u32.into(), 2u32.into(), u32::from(CLICK).into()]
        );
    }

    #[test]
    fn user_lookups_pad_to_four_sizes() {
        let users: Vec<String> = (0..600).map(|i| format!("u{i}")).collect();
        let refs: Vec<&str> = users.iter().map(String::as_str).collect();
        let lookups = user_lookups(&refs);
        assert_eq!(lookups.iter().map(Vec::len).collect::<Vec<_>>(), [512, 512]);
        assert_eq!(lookups[1][87], "u599", "padded with its last user");
        assert_eq!(user_lookups(&refs[..3])[0].len(), 8);
        assert!(user_lookups(&[]).is_empty());
    }

    #[test]
    fn times_round_trip_with_never() {
        assert_eq!(loaded_time(stored_time(u64::MAX)), u64::MAX);
        assert_eq!(loaded_time(stored_time(1_700_000_000)), 1_700_000_000);
        assert_eq!(loaded_time(-5), 0);
    }
}
