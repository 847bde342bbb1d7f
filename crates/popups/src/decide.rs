//! The decision: which popup, if any, a user sees now, and how showing it and the user's
//! answer move the time the user may see it again. Pure functions of the catalog, the
//! request, the user's state and the clock; no I/O, no locks.

use std::hash::Hasher as _;

use crate::model::{Filter, Frequency, Popup, Version};

/// What the front end tells about the user asking.
#[derive(Debug, Clone, Copy, Default)]
pub struct Viewer<'a> {
    /// The user id.
    pub user: &'a str,
    /// `platform`, if sent.
    pub platform: Option<&'a str>,
    /// `country`, if sent.
    pub country: Option<&'a str>,
    /// `app_version`, if sent.
    pub app_version: Option<Version>,
    /// `segment`s the user is in.
    pub segments: &'a [&'a str],
}

/// The user's last answer to a popup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// Never shown.
    #[default]
    None,
    /// Shown, no answer yet.
    Shown,
    /// Clicked.
    Click,
    /// Closed.
    Close,
}

/// One user's state for one popup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// Unix second from which the popup may be shown again (`u64::MAX`: never).
    pub next_eligible: u64,
    /// Times shown.
    pub shows: u32,
    /// The last thing that happened.
    pub last_action: Action,
    /// Unix second of the show the user's last click answered (0: none), and of the show
    /// their last close answered: a click or a close answering a show at or before it was
    /// given already (a replayed token), however long ago the server started, as this state
    /// is journaled and stored with each answer. (Two shows of one popup to one user in one
    /// second have the same token, so a second is as fine as tokens tell shows apart.)
    pub clicked_show: u32,
    /// See `clicked_show`.
    pub closed_show: u32,
}

impl Seen {
    /// Whether `action` answered a show at `shown_at` already (see `clicked_show`).
    pub fn answered(&self, action: Action, shown_at: u64) -> bool {
        let at = match action {
            Action::Click => self.clicked_show,
            Action::Close => self.closed_show,
            Action::None | Action::Shown => return false,
        };
        at != 0 && u64::from(at) >= shown_at
    }
}

/// Whether `user` falls in the first `percent` of popup `id`'s rollout (see [`Rollout`]).
pub fn in_rollout(id: u32, user: &str, percent: u8) -> bool {
    Rollout::new(user).admits(id, percent)
}

/// A user's place in every popup's rollout: a SipHash of the user id under a fixed key,
/// computed once per request, then mixed with each popup's id (splitmix64's finalizer), so
/// the answer is the same in every process and at every restart, and independent between
/// popups.
#[derive(Debug, Clone, Copy)]
pub struct Rollout(u64);

impl Rollout {
    /// The user's rollout hash.
    pub fn new(user: &str) -> Rollout {
        let mut h =
            siphasher::sip::SipHasher13::new_with_keys(0x686f_7470_6174_6821, 0x706f_7075_7073);
        h.write(user.as_bytes());
        Rollout(h.finish())
    }

    /// Whether the user falls in the first `percent` of popup `id`'s rollout.
    pub fn admits(self, id: u32, percent: u8) -> bool {
        if percent >= 100 {
            return true;
        }
        let mut z = self.0 ^ u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % 100 < u64::from(percent)
    }
}

/// Whether the popup's targeting admits the viewer.
pub fn targeted(p: &Popup, v: &Viewer<'_>) -> bool {
    let t = &p.targeting;
    version_ok(p, v)
        && t.platform.admits(v.platform)
        && t.country.admits(v.country)
        && t.segment.admits_any(v.segments)
}

/// Whether the viewer's app version is inside the popup's range (a range needs a version).
fn version_ok(p: &Popup, v: &Viewer<'_>) -> bool {
    let t = &p.targeting;
    match (v.app_version, t.app_version_min, t.app_version_max) {
        (_, None, None) => true,
        (None, _, _) => false,
        (Some(have), lo, hi) => lo.is_none_or(|lo| have >= lo) && hi.is_none_or(|hi| have <= hi),
    }
}

/// Whether the popup is enabled and inside its active window at `now`.
pub fn active(p: &Popup, now: u64) -> bool {
    p.enabled && p.starts_at.is_none_or(|s| now >= s) && p.ends_at.is_none_or(|e| now < e)
}

/// Whether the frequency rules let this user see it now, with `shows_today` shows of it to
/// everyone today.
pub fn allowed(f: &Frequency, seen: Option<&Seen>, now: u64, shows_today: u64) -> bool {
    if f.daily_cap.is_some_and(|cap| shows_today >= cap) {
        return false;
    }
    seen.is_none_or(|s| state_allows(f, s, now))
}

/// Whether the user's own state for a popup lets them see it now (its cooldown is over, and
/// it has not been shown its most times).
fn state_allows(f: &Frequency, s: &Seen, now: u64) -> bool {
    now >= s.next_eligible && f.max_shows.is_none_or(|m| s.shows < m)
}

/// A set of popups, as positions in the order of choice: one bit per popup.
type Bits = Vec<u64>;

fn set(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

fn clear(bits: &mut [u64], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

/// Popups naming one value of an attribute, by their positions: a list while it is short, a
/// bit set once the list would be larger than one (more than one popup in 32 names the
/// value), so a request pays at most a word-wide pass per value it sends, and memory stays
/// within a few bytes per list entry of the catalog.
#[derive(Debug, Clone)]
enum Named {
    Few(Vec<u32>),
    Many(Bits),
}

impl Named {
    /// `positions` (ascending) as a list or a set of `words` words, whichever is smaller.
    fn new(positions: Vec<u32>, words: usize) -> Named {
        if positions.len() <= 2 * words {
            return Named::Few(positions);
        }
        let mut bits = vec![0; words];
        for &i in &positions {
            set(&mut bits, i as usize);
        }
        Named::Many(bits)
    }

    /// Adds these popups to `to`.
    fn add_to(&self, to: &mut [u64]) {
        match self {
            Named::Few(list) => list.iter().for_each(|&i| set(to, i as usize)),
            Named::Many(bits) => to.iter_mut().zip(bits).for_each(|(t, b)| *t |= b),
        }
    }

    /// Takes these popups out of `from`.
    fn remove_from(&self, from: &mut [u64]) {
        match self {
            Named::Few(list) => list.iter().for_each(|&i| clear(from, i as usize)),
            Named::Many(bits) => from.iter_mut().zip(bits).for_each(|(f, b)| *f &= !b),
        }
    }
}

/// The popups naming one value of an attribute: in their include list, and in their
/// exclude list.
#[derive(Debug, Clone)]
struct Postings {
    include: Named,
    exclude: Named,
}

/// Whom one targeting attribute (platform, country or segment) admits, built once per
/// catalog: the popups with no include list (they admit every value they do not exclude, and
/// a request that sends none), and for each value some popup names, which popups include and
/// exclude it. Memory grows with the catalog's lists, not with popups times values.
/// (The values looked up come from requests; the keys only from the catalog.)
///
/// A filter admits the values a request sends when none is excluded and one is included (or
/// the include list is empty), so the set admitted is `open ∪ include[v…]` less `exclude[v…]`:
/// a copy of a bit set, then a hash lookup per value sent.
#[derive(Debug, Clone, Default)]
struct ByValue {
    open: Bits,
    named: hashbrown::HashMap<Box<str>, Postings>,
}

/// A value's popups while the index is built: positions including it, and excluding it.
type Lists = (Vec<u32>, Vec<u32>);

impl ByValue {
    fn new(popups: &[Popup], words: usize, filter: impl Fn(&Popup) -> &Filter) -> ByValue {
        let mut open = vec![0; words];
        let mut lists: hashbrown::HashMap<Box<str>, Lists> = hashbrown::HashMap::new();
        for (i, p) in popups.iter().enumerate() {
            let f = filter(p);
            if f.include.is_empty() {
                set(&mut open, i);
            }
            let at = u32::try_from(i).expect("a catalog holds fewer than 2^32 popups");
            for (list, exclude) in [(&f.include, false), (&f.exclude, true)] {
                for v in list {
                    let (inc, exc) = lists.entry(v.as_str().into()).or_default();
                    let into = if exclude { exc } else { inc };
                    // A value listed twice by one popup is kept once.
                    if into.last() != Some(&at) {
                        into.push(at);
                    }
                }
            }
        }
        let named = lists
            .into_iter()
            .map(|(v, (inc, exc))| {
                let post = Postings {
                    include: Named::new(inc, words),
                    exclude: Named::new(exc, words),
                };
                (v, post)
            })
            .collect();
        ByValue { open, named }
    }

    /// Narrows `cand` to the popups admitting a request that sent `values` (`scratch`: as
    /// many words as `cand`).
    fn narrow<'v>(
        &self,
        values: impl Iterator<Item = &'v str>,
        cand: &mut [u64],
        scratch: &mut [u64],
    ) {
        // One lookup per value sent (a request sends at most `api::MAX_SEGMENTS`).
        let found: smallvec::SmallVec<[&Postings; 4]> =
            values.filter_map(|v| self.named.get(v)).collect();
        if found.is_empty() {
            for (c, o) in cand.iter_mut().zip(&self.open) {
                *c &= o;
            }
            return;
        }
        scratch.copy_from_slice(&self.open);
        // Every include first: a popup including one value sent and excluding another is out.
        for post in &found {
            post.include.add_to(scratch);
        }
        for post in &found {
            post.exclude.remove_from(scratch);
        }
        for (c, s) in cand.iter_mut().zip(scratch.iter()) {
            *c &= s;
        }
    }
}

/// Words of a popup set kept on the stack (catalogs of up to 1,024 popups); a larger catalog
/// uses buffers kept per thread, so no request allocates.
const STACK_WORDS: usize = 16;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with two zeroed sets of `words` words each.
fn with_sets<T>(words: usize, f: impl FnOnce(&mut [u64], &mut [u64]) -> T) -> T {
    if words <= STACK_WORDS {
        let mut stack = [0u64; 2 * STACK_WORDS];
        let (a, b) = stack[..2 * words].split_at_mut(words);
        return f(a, b);
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            buf.resize(2 * words, 0);
            let (a, b) = buf.split_at_mut(words);
            f(a, b)
        }
        // Only a choice made from inside another's callbacks gets here.
        Err(_) => {
            let mut buf = vec![0; 2 * words];
            let (a, b) = buf.split_at_mut(words);
            f(a, b)
        }
    })
}

/// The popups to choose from, in the order of choice: priority descending, then id
/// ascending (ties are broken the same way every time). Built once per catalog change with
/// an index of whom each popup targets, so a request looks only at the popups its platform,
/// country and segments admit (a hash lookup per value sent and a few word-wide ANDs), not at
/// every popup's lists of strings.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    popups: Vec<Popup>,
    /// Position of each popup id in `popups`.
    ids: hashbrown::HashMap<u32, usize>,
    /// Enabled popups.
    enabled: Bits,
    platform: ByValue,
    country: ByValue,
    segment: ByValue,
}

impl Catalog {
    /// A catalog of `popups`, ordered for choosing.
    pub fn new(mut popups: Vec<Popup>) -> Catalog {
        popups.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        let words = popups.len().div_ceil(64);
        let mut enabled = vec![0; words];
        for (i, p) in popups.iter().enumerate() {
            if p.enabled {
                set(&mut enabled, i);
            }
        }
        Catalog {
            ids: popups.iter().enumerate().map(|(i, p)| (p.id, i)).collect(),
            enabled,
            platform: ByValue::new(&popups, words, |p| &p.targeting.platform),
            country: ByValue::new(&popups, words, |p| &p.targeting.country),
            segment: ByValue::new(&popups, words, |p| &p.targeting.segment),
            popups,
        }
    }

    /// Every popup, in the order of choice.
    pub fn popups(&self) -> &[Popup] {
        &self.popups
    }

    /// The popup with this id.
    pub fn get(&self, id: u32) -> Option<&Popup> {
        self.ids.get(&id).map(|&i| &self.popups[i])
    }

    /// The first popup, in the order of choice, that is active, targets the viewer, has
    /// the viewer in its rollout and whose frequency rules allow it; `None` when none does.
    /// `seen` is the user's state per popup id (each id once), `shows_today` gives each
    /// popup's shows today.
    ///
    /// The popups the user's own state rules out (cooling down, or shown their most times)
    /// are taken out of the candidates first, one hash lookup per popup the user has state
    /// for: the walk then tests only the rules that need no per-user lookup, so a user who
    /// has seen much of a large catalog costs what their state holds, not popups times state.
    pub fn choose(
        &self,
        v: &Viewer<'_>,
        now: u64,
        seen: &[(u32, Seen)],
        shows_today: impl Fn(u32) -> u64,
    ) -> Option<&Popup> {
        with_sets(self.enabled.len(), |cand, scratch| {
            cand.copy_from_slice(&self.enabled);
            self.platform.narrow(v.platform.into_iter(), cand, scratch);
            self.country.narrow(v.country.into_iter(), cand, scratch);
            self.segment
                .narrow(v.segments.iter().copied(), cand, scratch);
            for (id, state) in seen {
                if let Some(&i) = self.ids.get(id) {
                    if !state_allows(&self.popups[i].frequency, state, now) {
                        clear(cand, i);
                    }
                }
            }
            // The user's rollout hash, once per request, and only if a popup asks for it.
            let mut rollout = None;
            for (w, &word) in cand.iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let p = &self.popups[w * 64 + word.trailing_zeros() as usize];
                    word &= word - 1;
                    if active(p, now)
                        && version_ok(p, v)
                        && (p.rollout_percent >= 100
                            || rollout
                                .get_or_insert_with(|| Rollout::new(v.user))
                                .admits(p.id, p.rollout_percent))
                        // Counted only for popups with a cap: most have none.
                        && p.frequency.daily_cap.is_none_or(|cap| shows_today(p.id) < cap)
                    {
                        return Some(p);
                    }
                }
            }
            None
        })
    }
}

/// Records a show at `now`: one more show, eligible again after the cooldown.
pub fn shown(seen: &mut Seen, f: &Frequency, now: u64) {
    seen.shows = seen.shows.saturating_add(1);
    seen.next_eligible = f.cooldown.after(now);
    seen.last_action = Action::Shown;
}

/// Records the user's click or close at `now`: eligible again after `after_click` or
/// `after_close`. Other actions change nothing.
pub fn acted(seen: &mut Seen, f: &Frequency, action: Action, now: u64) {
    let wait = match action {
        Action::Click => f.after_click,
        Action::Close => f.after_close,
        Action::None | Action::Shown => return,
    };
    seen.next_eligible = wait.after(now);
    seen.last_action = action;
}

/// Records that `action` answered the show at unix second `shown_at` (see
/// [`Seen::answered`]).
pub fn answered(seen: &mut Seen, action: Action, shown_at: u64) {
    let at = u32::try_from(shown_at).unwrap_or(u32::MAX);
    match action {
        Action::Click => seen.clicked_show = seen.clicked_show.max(at),
        Action::Close => seen.closed_show = seen.closed_show.max(at),
        Action::None | Action::Shown => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Filter, Never, Targeting, Wait};

    fn popup(id: u32, priority: i32) -> Popup {
        Popup {
            id,
            name: format!("p{id}"),
            payload: serde_json::json!({"id": id}),
            priority,
            starts_at: None,
            ends_at: None,
            targeting: Targeting::default(),
            rollout_percent: 100,
            frequency: Frequency {
                cooldown: Wait::Secs(100),
                after_close: Wait::Secs(1000),
                after_click: Wait::Never(Never::Never),
                max_shows: None,
                daily_cap: None,
            },
            enabled: true,
        }
    }

    fn viewer(user: &str) -> Viewer<'_> {
        Viewer {
            user,
            platform: Some("ios"),
            country: Some("DE"),
            app_version: Some("2.5.0".parse().unwrap()),
            segments: &["vip"],
        }
    }

    fn zero(_: u32) -> u64 {
        0
    }

    #[test]
    fn targeting_table() {
        let inc = |v: &[&str]| Filter {
            include: v.iter().map(|s| s.to_string()).collect(),
            exclude: vec![],
        };
        let exc = |v: &[&str]| Filter {
            include: vec![],
            exclude: v.iter().map(|s| s.to_string()).collect(),
        };
        let cases: Vec<(Targeting, bool)> = vec![
            (Targeting::default(), true),
            (
                Targeting {
                    platform: inc(&["ios"]),
                    ..Default::default()
                },
                true,
            ),
            (
                Targeting {
                    platform: inc(&["android"]),
                    ..Default::default()
                },
                false,
            ),
            (
                Targeting {
                    country: exc(&["DE"]),
                    ..Default::default()
                },
                false,
            ),
            (
                Targeting {
                    segment: inc(&["vip", "new"]),
                    ..Default::default()
                },
                true,
            ),
            (
                Targeting {
                    segment: exc(&["vip"]),
                    ..Default::default()
                },
                false,
            ),
            (
                Targeting {
                    app_version_min: Some("2.5".parse().unwrap()),
                    ..Default::default()
                },
                true,
            ),
            (
                Targeting {
                    app_version_min: Some("2.6".parse().unwrap()),
                    ..Default::default()
                },
                false,
            ),
            (
                Targeting {
                    app_version_max: Some("2.4.9".parse().unwrap()),
                    ..Default::default()
                },
                false,
            ),
        ];
        for (i, (t, want)) in cases.into_iter().enumerate() {
            let mut p = popup(1, 0);
            p.targeting = t;
            assert_eq!(targeted(&p, &viewer("u")), want, "case {i}");
        }
        // A version range needs the front end to send a version.
        let mut p = popup(1, 0);
        p.targeting.app_version_min = Some("1".parse().unwrap());
        let mut v = viewer("u");
        v.app_version = None;
        assert!(!targeted(&p, &v));
    }

    #[test]
    fn active_windows_and_the_switch() {
        let mut p = popup(1, 0);
        p.starts_at = Some(100);
        p.ends_at = Some(200);
        assert!(!active(&p, 99));
        assert!(active(&p, 100));
        assert!(active(&p, 199));
        assert!(!active(&p, 200));
        p.enabled = false;
        assert!(!active(&p, 150));
    }

    #[test]
    fn rollout_is_stable_proportional_and_independent_per_popup() {
        let users: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
        let count = |id: u32, pct: u8| users.iter().filter(|u| in_rollout(id, u, pct)).count();
        let n = count(7, 25);
        assert!((4_600..=5_400).contains(&n), "{n} of 20000 at 25 %");
        assert_eq!(count(7, 0), 0);
        assert_eq!(count(7, 100), 20_000);
        // The same user gets the same answer every time; and raising the percentage only adds users.
        for u in &users[..500] {
            assert_eq!(in_rollout(7, u, 25), in_rollout(7, u, 25));
            assert!(!in_rollout(7, u, 25) || in_rollout(7, u, 50));
        }
        // Two popups at 50 % do not pick the same half.
        let both = users
            .iter()
            .filter(|u| in_rollout(1, u, 50) && in_rollout(2, u, 50))
            .count();
        assert!((4_500..=5_500).contains(&both), "{both}");
    }

    #[test]
    fn frequency_rules_move_the_next_eligible_time() {
        let p = popup(1, 0);
        let f = &p.frequency;
        let mut s = Seen::default();
        assert!(allowed(f, Some(&s), 0, 0));
        shown(&mut s, f, 1000);
        assert_eq!(
            (s.shows, s.next_eligible, s.last_action),
            (1, 1100, Action::Shown)
        );
        assert!(!allowed(f, Some(&s), 1099, 0), "cooldown");
        assert!(allowed(f, Some(&s), 1100, 0));
        acted(&mut s, f, Action::Close, 1050);
        assert_eq!(s.next_eligible, 2050, "after_close");
        assert!(!allowed(f, Some(&s), 2049, 0));
        acted(&mut s, f, Action::Click, 3000);
        assert_eq!(s.next_eligible, u64::MAX, "after_click = never");
        assert!(!allowed(f, Some(&s), u64::MAX - 1, 0));
    }

    #[test]
    fn max_shows_and_the_daily_cap() {
        let mut p = popup(1, 0);
        p.frequency.max_shows = Some(2);
        p.frequency.daily_cap = Some(10);
        let f = &p.frequency;
        let mut s = Seen::default();
        shown(&mut s, f, 0);
        shown(&mut s, f, 200);
        assert!(!allowed(f, Some(&s), 10_000, 0), "two shows are the most");
        assert!(allowed(f, None, 0, 9));
        assert!(!allowed(f, None, 0, 10), "the day's cap is reached");
    }

    #[test]
    fn the_highest_priority_eligible_popup_wins_and_ties_go_to_the_lower_id() {
        let mut low = popup(1, 1);
        low.targeting.country.include = vec!["DE".into()];
        let mut capped = popup(9, 5);
        capped.frequency.daily_cap = Some(100);
        let catalog = Catalog::new(vec![low, capped, popup(4, 5), popup(3, 2)]);
        let ids: Vec<u32> = catalog.popups().iter().map(|p| p.id).collect();
        assert_eq!(ids, vec![4, 9, 3, 1]);
        let v = viewer("alice");
        assert_eq!(catalog.choose(&v, 0, &[], zero).map(|p| p.id), Some(4));
        // 4 in its cooldown, 9 over its daily cap: 3 is next.
        let cooling = [(
            4,
            Seen {
                next_eligible: 500,
                shows: 1,
                last_action: Action::Shown,
                ..Seen::default()
            },
        )];
        let today = |id| if id == 9 { 100 } else { 0 };
        assert_eq!(
            catalog.choose(&v, 10, &cooling, today).map(|p| p.id),
            Some(3)
        );
        // Past the cooldown 4 is back; state for a popup the catalog lacks is passed over.
        let gone = (77, cooling[0].1);
        assert_eq!(
            catalog
                .choose(&v, 500, &[cooling[0], gone], today)
                .map(|p| p.id),
            Some(4)
        );
        // Nothing eligible: none.
        let mut v = viewer("bob");
        v.country = Some("FR");
        let never: Vec<(u32, Seen)> = ids
            .iter()
            .map(|&id| {
                let s = Seen {
                    next_eligible: u64::MAX,
                    shows: 1,
                    last_action: Action::Click,
                    ..Seen::default()
                };
                (id, s)
            })
            .collect();
        assert!(catalog.choose(&v, 10, &never, zero).is_none());
    }

    /// A catalog from the property test's numbers: targeting drawn from small pools of values
    /// (so lists overlap and requests hit both named and unnamed values).
    fn arbitrary_popup(id: u32, n: &[u8]) -> Popup {
        const PLATFORMS: [&str; 4] = ["ios", "android", "web", ""];
        const COUNTRIES: [&str; 5] = ["DE", "US", "FR", "BR", "JP"];
        const SEGMENTS: [&str; 4] = ["vip", "new", "churn", "beta"];
        let pick = |pool: &[&str], mask: u8| -> Vec<String> {
            (0..pool.len())
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| pool[b].to_string())
                .collect()
        };
        let filter = |pool: &[&str], inc: u8, exc: u8| Filter {
            include: pick(pool, inc),
            exclude: pick(pool, exc),
        };
        let mut p = popup(id, i32::from(n[0] % 5));
        p.targeting = Targeting {
            platform: filter(&PLATFORMS, n[1] % 16, n[2] % 4),
            country: filter(&COUNTRIES, n[3] % 32, n[4] % 8),
            segment: filter(&SEGMENTS, n[5] % 16, n[6] % 8),
            app_version_min: n[7].is_multiple_of(4).then(|| "2.0".parse().unwrap()),
            app_version_max: n[7].is_multiple_of(5).then(|| "2.99".parse().unwrap()),
        };
        p.rollout_percent = [100, 50, 25, 0, 100][usize::from(n[8] % 5)];
        p.enabled = !n[9].is_multiple_of(7);
        p.starts_at = n[9].is_multiple_of(5).then_some(50);
        p.ends_at = n[9].is_multiple_of(6).then_some(150);
        p.frequency.daily_cap = n[0].is_multiple_of(9).then_some(3);
        p
    }

    proptest::proptest! {
        /// The index finds what a scan of every popup in the order of choice finds, for any
        /// catalog (more than 64 popups span several words) and any request.
        #[test]
        fn the_index_chooses_what_a_scan_of_every_popup_chooses(
            popups in proptest::collection::vec(proptest::collection::vec(0u8..=255, 10), 0..150),
            platform in proptest::option::of(proptest::sample::select(vec!["ios", "android", "web", "", "tv"])),
            country in proptest::option::of(proptest::sample::select(vec!["DE", "US", "JP", "XX"])),
            segments in proptest::collection::vec(proptest::sample::select(vec!["vip", "new", "churn", "beta", "other"]), 0..4),
            version in proptest::option::of(proptest::sample::select(vec!["1.0", "2.5", "3.0"])),
            user in "[a-z0-9]{1,12}",
            now in 0u64..200,
            seen_mask in 0u64..u64::MAX,
        ) {
            let catalog = Catalog::new(
                popups.iter().enumerate().map(|(i, n)| arbitrary_popup(i as u32 + 1, n)).collect(),
            );
            let v = Viewer {
                user: &user,
                platform,
                country,
                app_version: version.map(|s| s.parse().unwrap()),
                segments: &segments,
            };
            // Some popups are in their cooldown for this user (or shown their most times),
            // some at today's cap.
            let seen = |id: u32| {
                (seen_mask & (1 << (id % 64)) != 0).then_some(Seen {
                    next_eligible: 100,
                    shows: 1 + id % 3,
                    last_action: Action::Shown,
                    ..Seen::default()
                })
            };
            let state: Vec<(u32, Seen)> = catalog
                .popups()
                .iter()
                .filter_map(|p| seen(p.id).map(|s| (p.id, s)))
                .collect();
            let today = |id: u32| u64::from(id % 5);
            let scan = catalog.popups().iter().find(|p| {
                active(p, now)
                    && targeted(p, &v)
                    && in_rollout(p.id, v.user, p.rollout_percent)
                    && allowed(&p.frequency, seen(p.id).as_ref(), now, today(p.id))
            });
            proptest::prop_assert_eq!(
                catalog.choose(&v, now, &state, today).map(|p| p.id),
                scan.map(|p| p.id)
            );
            for p in catalog.popups() {
                proptest::prop_assert_eq!(catalog.get(p.id).map(|q| q.id), Some(p.id));
            }
        }
    }

    /// Numbers for [`arbitrary_popup`] from a fixed sequence (xorshift), for catalogs larger
    /// than a property test draws quickly.
    fn numbers(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// A catalog past the sets kept on the stack (1,024 popups) chooses what a scan chooses,
    /// also when a choice is made from inside another's callback (the per-thread sets are
    /// then in use).
    #[test]
    fn a_large_catalog_chooses_what_a_scan_chooses() {
        let catalog = Catalog::new(
            (0..1_500u32)
                .map(|i| arbitrary_popup(i + 1, &numbers(u64::from(i) + 7, 10)))
                .collect(),
        );
        let inner = Catalog::new(
            (0..1_100u32)
                .map(|i| arbitrary_popup(i + 1, &numbers(u64::from(i) + 99, 10)))
                .collect(),
        );
        let platforms = [Some("ios"), Some("web"), None, Some("tv")];
        let countries = [Some("DE"), Some("JP"), None];
        let segments: [&[&str]; 4] = [&[], &["vip"], &["new", "churn"], &["other"]];
        let mut chosen = 0;
        for n in 0..400usize {
            let user = format!("user{n}");
            let v = Viewer {
                user: &user,
                platform: platforms[n % 4],
                country: countries[n % 3],
                app_version: Some(["1.0", "2.5", "3.0"][n % 3].parse().unwrap()),
                segments: segments[n % 4],
            };
            // Popups whose id shares the request's remainder are cooling down for the user.
            let seen = |id: u32| {
                (id as usize % 7 == n % 7).then_some(Seen {
                    next_eligible: 1_000,
                    shows: 1,
                    last_action: Action::Shown,
                    ..Seen::default()
                })
            };
            let state = |c: &Catalog| -> Vec<(u32, Seen)> {
                c.popups()
                    .iter()
                    .filter_map(|p| seen(p.id).map(|s| (p.id, s)))
                    .collect()
            };
            let (outer_state, inner_state) = (state(&catalog), state(&inner));
            let scan = |c: &Catalog| {
                c.popups()
                    .iter()
                    .find(|p| {
                        active(p, 100)
                            && targeted(p, &v)
                            && in_rollout(p.id, v.user, p.rollout_percent)
                            && allowed(&p.frequency, seen(p.id).as_ref(), 100, 0)
                    })
                    .map(|p| p.id)
            };
            let want_inner = scan(&inner);
            let nested = |_: u32| {
                assert_eq!(
                    inner.choose(&v, 100, &inner_state, zero).map(|p| p.id),
                    want_inner
                );
                0
            };
            let got = catalog.choose(&v, 100, &outer_state, nested).map(|p| p.id);
            assert_eq!(got, scan(&catalog), "request {n}");
            chosen += usize::from(got.is_some());
        }
        // Both answers occur: the comparison is not between two empty results.
        assert!(chosen > 50 && chosen < 400, "{chosen} of 400 chose a popup");
    }
}
