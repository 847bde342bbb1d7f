//! Leech slots: how many torrents each user may download at once. Everyone has
//! `private.leech_slots` (0: no limit); a user whose ratio is under one of
//! `private.ratio_tiers` has that tier's slots instead, as TorrentPier's rating tiers give.
//! The ratio is read from the site's totals at each poll ([`super::source`]); only users
//! under a tier are held, so a site of good ratios costs nothing here.
//!
//! Owns: [`LeechSlots`]. Must not: do I/O, or count what users download (the ledger does).

use hashbrown::HashMap;
use hotpath_config::PrivateConfig;
use parking_lot::RwLock;

/// The slots rules and the users under a tier.
#[derive(Debug)]
pub struct LeechSlots {
    /// Slots of a user under no tier (0: no limit).
    default: u16,
    /// (ratio, slots), lowest ratio first.
    tiers: Vec<(f64, u16)>,
    /// Bytes downloaded before the tiers apply to a user.
    min_downloaded: u64,
    /// Users under a tier: their slots.
    limited: RwLock<HashMap<u32, u16>>,
    /// Most users held (`private.max_users`).
    max: usize,
}

impl LeechSlots {
    /// The rules of `[private]`.
    pub fn new(c: &PrivateConfig) -> LeechSlots {
        LeechSlots {
            default: u16::try_from(c.leech_slots).unwrap_or(u16::MAX),
            tiers: c.tiers(),
            min_downloaded: c.ratio_min_downloaded,
            limited: RwLock::default(),
            max: c.max_users,
        }
    }

    /// Whether the tiers need the site's totals.
    pub fn reads_totals(&self) -> bool {
        !self.tiers.is_empty()
    }

    /// The slots of a user who uploaded `up` and downloaded `down` bytes: a tier's, or
    /// `None` for the default.
    pub fn tier(&self, up: u64, down: u64) -> Option<u16> {
        if down == 0 || down <= self.min_downloaded {
            return None;
        }
        let ratio = up as f64 / down as f64;
        self.tiers
            .iter()
            .find(|&&(below, _)| ratio < below)
            .map(|&(_, n)| n)
    }

    /// `user`'s slots now (0: no limit).
    pub fn of(&self, user: u32) -> u16 {
        if self.tiers.is_empty() {
            return self.default;
        }
        self.limited
            .read()
            .get(&user)
            .copied()
            .unwrap_or(self.default)
    }

    /// Takes the totals of the rows read, (user id, uploaded, downloaded): every user when
    /// `whole` (those not among them are under no tier), else the changed ones. Returns the
    /// rows left out at the cap.
    pub fn take(&self, whole: bool, rows: impl IntoIterator<Item = (u32, u64, u64)>) -> usize {
        let mut skipped = 0;
        if whole {
            let mut fresh = HashMap::new();
            for (user, up, down) in rows {
                if let Some(n) = self.tier(up, down) {
                    if fresh.len() >= self.max {
                        skipped += 1;
                    } else {
                        fresh.insert(user, n);
                    }
                }
            }
            *self.limited.write() = fresh;
            return skipped;
        }
        let mut limited = self.limited.write();
        for (user, up, down) in rows {
            match self.tier(up, down) {
                Some(n) if limited.len() < self.max || limited.contains_key(&user) => {
                    limited.insert(user, n);
                }
                Some(_) => skipped += 1,
                None => {
                    limited.remove(&user);
                }
            }
        }
        skipped
    }

    /// Users under a tier.
    pub fn limited(&self) -> usize {
        self.limited.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(default: u32, min: u64) -> LeechSlots {
        let mut c = PrivateConfig {
            leech_slots: default,
            ratio_min_downloaded: min,
            max_users: 3,
            ..Default::default()
        };
        // TorrentPier's own tiers, written out of order.
        for (r, n) in [("0.6", 3), ("0.4", 1), ("0.5", 2)] {
            c.ratio_tiers.insert(r.into(), n);
        }
        LeechSlots::new(&c)
    }

    #[test]
    fn the_lowest_tier_a_ratio_is_under_applies() {
        let s = slots(8, 1000);
        assert_eq!(s.tier(300, 1001), Some(1));
        assert_eq!(s.tier(450, 1001), Some(2));
        assert_eq!(s.tier(550, 1001), Some(3));
        assert_eq!(s.tier(601, 1001), None);
        // Too little downloaded for a ratio: no tier, as nothing downloaded.
        assert_eq!(s.tier(0, 1000), None);
        assert_eq!(s.tier(0, 0), None);
        s.take(true, [(1, 0, 5000), (2, 9000, 5000), (3, 2400, 5000)]);
        assert_eq!((s.of(1), s.of(2), s.of(3), s.of(4)), (1, 8, 2, 8));
        // A changed row moves its user; one out of every tier leaves.
        s.take(false, [(1, 5000, 5000), (2, 0, 5000)]);
        assert_eq!((s.of(1), s.of(2)), (8, 1));
        assert_eq!(s.limited(), 2);
    }

    #[test]
    fn users_under_a_tier_are_capped() {
        let s = slots(0, 0);
        let rows = (1..=10).map(|u| (u, 0, 100));
        assert_eq!(s.take(true, rows), 7);
        assert_eq!(s.limited(), 3);
        assert_eq!(s.take(false, [(20, 0, 100), (1, 0, 100)]), 1);
        assert_eq!(s.of(20), 0, "left out: the default");
        // No tiers: everyone has the default, nothing is held.
        let plain = LeechSlots::new(&PrivateConfig {
            leech_slots: 4,
            ..Default::default()
        });
        assert!(!plain.reads_totals());
        assert_eq!(plain.of(1), 4);
    }
}
