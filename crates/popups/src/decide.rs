//! The decision: which popup, if any, a user sees now, and how showing it and the user's
//! answer move the time the user may see it again. Pure functions of the catalog, the
//! request, the user's state and the clock; no I/O, no locks.

use std::hash::Hasher as _;

use crate::model::{Frequency, Popup, Version};

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
}

/// Whether `user` falls in the first `percent` of popup `id`'s rollout: a SipHash of the
/// popup id and the user id, fixed key, so the answer is the same in every process and at
/// every restart, and independent between popups.
pub fn in_rollout(id: u32, user: &str, percent: u8) -> bool {
    if percent >= 100 {
        return true;
    }
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x686f_7470_6174_6821, 0x706f_7075_7073);
    h.write(&id.to_le_bytes());
    h.write(user.as_bytes());
    h.finish() % 100 < u64::from(percent)
}

/// Whether the popup's targeting admits the viewer.
pub fn targeted(p: &Popup, v: &Viewer<'_>) -> bool {
    let t = &p.targeting;
    let version_ok = match (v.app_version, t.app_version_min, t.app_version_max) {
        (_, None, None) => true,
        (None, _, _) => false,
        (Some(have), lo, hi) => lo.is_none_or(|lo| have >= lo) && hi.is_none_or(|hi| have <= hi),
    };
    version_ok
        && t.platform.admits(v.platform)
        && t.country.admits(v.country)
        && t.segment.admits_any(v.segments)
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
    match seen {
        None => true,
        Some(s) => now >= s.next_eligible && f.max_shows.is_none_or(|m| s.shows < m),
    }
}

/// The popups to choose from, in the order of choice: priority descending, then id
/// ascending (ties are broken the same way every time).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    popups: Vec<Popup>,
}

impl Catalog {
    /// A catalog of `popups`, ordered for choosing.
    pub fn new(mut popups: Vec<Popup>) -> Catalog {
        popups.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        Catalog { popups }
    }

    /// Every popup, in the order of choice.
    pub fn popups(&self) -> &[Popup] {
        &self.popups
    }

    /// The popup with this id.
    pub fn get(&self, id: u32) -> Option<&Popup> {
        self.popups.iter().find(|p| p.id == id)
    }

    /// The first popup, in the order of choice, that is active, targets the viewer, has
    /// the viewer in its rollout and whose frequency rules allow it; `None` when none does.
    /// `seen` gives the user's state per popup id, `shows_today` each popup's shows today.
    pub fn choose(
        &self,
        v: &Viewer<'_>,
        now: u64,
        seen: impl Fn(u32) -> Option<Seen>,
        shows_today: impl Fn(u32) -> u64,
    ) -> Option<&Popup> {
        self.popups.iter().find(|p| {
            active(p, now)
                && targeted(p, v)
                && in_rollout(p.id, v.user, p.rollout_percent)
                && allowed(
                    &p.frequency,
                    seen(p.id).as_ref(),
                    now,
                    // Counted only for popups with a cap: most have none.
                    if p.frequency.daily_cap.is_some() {
                        shows_today(p.id)
                    } else {
                        0
                    },
                )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Filter, Never, Targeting, Wait};
    use std::collections::HashMap;

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

    fn none(_: u32) -> Option<Seen> {
        None
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
        assert_eq!(catalog.choose(&v, 0, none, zero).map(|p| p.id), Some(4));
        // 4 in its cooldown, 9 over its daily cap: 3 is next.
        let mut cooling = HashMap::new();
        cooling.insert(
            4,
            Seen {
                next_eligible: 500,
                shows: 1,
                last_action: Action::Shown,
            },
        );
        let seen = |id| cooling.get(&id).copied();
        let today = |id| if id == 9 { 100 } else { 0 };
        assert_eq!(catalog.choose(&v, 10, seen, today).map(|p| p.id), Some(3));
        // Nothing eligible: none.
        let mut v = viewer("bob");
        v.country = Some("FR");
        let never = |_| {
            Some(Seen {
                next_eligible: u64::MAX,
                shows: 1,
                last_action: Action::Click,
            })
        };
        assert!(catalog.choose(&v, 10, never, zero).is_none());
    }
}
