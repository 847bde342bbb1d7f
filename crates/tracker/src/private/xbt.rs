//! XBT's derived passkeys. An XBT site need not store a passkey per user: the passkey in a
//! user's .torrent file is 8 hex digits of the user's id (big-endian) followed by the first 12
//! bytes, in 24 hex digits, of SHA-1 over the site's secret (`torrent_pass_private_key` in
//! `xbt_config`), the user's `torrent_pass_version`, the user id and the torrent's info hash:
//! `"{secret} {version} {uid} "` then the 20 raw bytes. So a passkey holds for one user on
//! one torrent, and raising `torrent_pass_version` revokes every passkey the user had.
//!
//! Owns: [`Derived`], [`Versioned`], the passkey's arithmetic. Must not: do I/O.

use parking_lot::RwLock;
use sha1::{Digest, Sha1};
use std::sync::Arc;

use super::registry::{Entry, Registry};
use super::User;

/// A user as derived passkeys need them: the user, and their `torrent_pass_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versioned {
    /// The user.
    pub user: User,
    /// Their `torrent_pass_version` (0 where the table has no such column; XBT's is an `INT`).
    pub version: i32,
    /// Seconds after a torrent's `ctime` before they may download it (XBT's `wait_time`; 0:
    /// none).
    pub wait_time: u32,
    /// How many of their clients may download one torrent at once (XBT's `peers_limit`; 0:
    /// no limit of their own).
    pub peers_limit: u16,
}

impl Entry for Versioned {
    fn id(&self) -> u32 {
        self.user.id
    }
}

/// What checks derived passkeys: the users by id, and the site's secret.
pub struct Derived {
    /// Users by id (4 bytes, big-endian), each with their passkey version.
    pub users: Registry<[u8; 4], Versioned>,
    /// The site's `torrent_pass_private_key`; `None` until read (no derived passkey holds).
    secret: RwLock<Option<Arc<[u8]>>>,
    /// Whether some user has a wait time (the torrents' ctimes are kept only then).
    waits: std::sync::atomic::AtomicBool,
}

impl Derived {
    /// No users and no secret yet; at most `max` users.
    pub fn new(max: usize) -> Derived {
        Derived {
            users: Registry::new(max),
            secret: RwLock::new(None),
            waits: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Sets the site's secret (`None`: derived passkeys off).
    pub fn set_secret(&self, secret: Option<&[u8]>) {
        let mut s = self.secret.write();
        if s.as_deref() != secret {
            *s = secret.map(Arc::from);
        }
    }

    /// Whether some user has a wait time (XBT's `wait_time`).
    pub fn any_wait(&self) -> bool {
        self.waits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes whether some user has a wait time, after a read of the users.
    pub fn set_any_wait(&self, any: bool) {
        self.waits.store(any, std::sync::atomic::Ordering::Relaxed);
    }

    /// The user whose derived passkey for `info_hash` is `key`, if any.
    pub fn user(&self, key: &[u8], info_hash: &[u8; 20]) -> Option<User> {
        let uid = uid_of(key)?;
        let v = self.users.get(&uid.to_be_bytes())?;
        let secret = self.secret.read().clone()?;
        matches(key, &secret, v.version, uid, info_hash).then_some(v.user)
    }
}

/// What hotpath takes from XBT's settings table (`xbt_config`, rows of name and value, which
/// XBT reads at start and every `read_config_interval`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `torrent_pass_private_key`: the secret of derived passkeys.
    pub secret: Option<Vec<u8>>,
    /// `announce_interval`: the interval clients are told (seconds, 60 to 86,400).
    pub announce_interval: Option<u32>,
    /// `offline_message`: when set, every announce is refused with it (at most 200 bytes of
    /// printable text, as XBT's own pages set it).
    pub offline_message: Option<String>,
    /// `log_announce`: each announce of a known user is written into `xbt_announce_log`.
    pub log_announce: bool,
    /// `log_scrape`: each scrape of a known user is written into `xbt_scrape_log`.
    pub log_scrape: bool,
    /// `auto_register`: an announce of a known user for an unknown torrent is served, and
    /// the torrent added to the torrents table.
    pub auto_register: bool,
    /// Settings present that hotpath takes from its own config instead, each with the key.
    pub not_applied: Vec<(String, &'static str)>,
}

/// The longest `torrent_pass_private_key` taken (XBT's `value` column is a `VARCHAR(255)`).
const MAX_SECRET: usize = 255;

/// XBT's settings that hotpath's own config keys stand for, with those keys.
const OWN_KEYS: [(&str, &str); 8] = [
    ("read_db_interval", "private.poll_secs"),
    ("write_db_interval", "store.flush_interval_ms"),
    ("full_scrape", "tracker.full_scrape"),
    ("clean_up_interval", "tracker.peer_timeout_secs"),
    ("listen_port", "listen.http and listen.udp"),
    ("listen_ipa", "listen.http and listen.udp"),
    (
        "gzip_scrape",
        "(hotpath's scrapes are small: not compressed)",
    ),
    ("anonymous_announce", "(a private tracker needs a passkey)"),
];

impl Settings {
    /// The settings of rows (name, value) of the settings table; a value that is not what its
    /// name takes is left out, as XBT leaves out a name it does not know.
    pub fn of<'a>(rows: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Settings {
        let mut s = Settings::default();
        for (name, value) in rows {
            let text = std::str::from_utf8(value).ok().map(str::trim);
            match name {
                // At most XBT's column (255 bytes): the secret is hashed by every derived
                // passkey's check.
                "torrent_pass_private_key" if (1..=MAX_SECRET).contains(&value.len()) => {
                    s.secret = Some(value.to_vec())
                }
                "announce_interval" => {
                    s.announce_interval = text
                        .and_then(|t| t.parse::<u32>().ok())
                        .filter(|v| (60..=86_400).contains(v));
                }
                "log_announce" => s.log_announce = text == Some("1"),
                "log_scrape" => s.log_scrape = text == Some("1"),
                "auto_register" => s.auto_register = text == Some("1"),
                "offline_message" => {
                    s.offline_message = text
                        .filter(|t| {
                            !t.is_empty() && t.len() <= 200 && t.chars().all(|c| !c.is_control())
                        })
                        .map(str::to_string);
                }
                _ => {
                    if let Some((_, key)) = OWN_KEYS.iter().find(|(n, _)| *n == name) {
                        s.not_applied.push((name.to_string(), key));
                    }
                }
            }
        }
        s.not_applied.sort();
        s
    }
}

/// The user id of a passkey of the derived form (32 hex digits, either case), or `None`.
pub fn uid_of(key: &[u8]) -> Option<u32> {
    if key.len() != 32 || !key.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut uid = 0u32;
    for &c in &key[..8] {
        uid = uid << 4 | u32::from(hex(c));
    }
    Some(uid)
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c.to_ascii_lowercase() - b'a' + 10,
    }
}

/// The 12 bytes a derived passkey carries after the user id.
fn mac(secret: &[u8], version: i32, uid: u32, info_hash: &[u8; 20]) -> [u8; 12] {
    let mut h = Sha1::new();
    h.update(secret);
    h.update(format!(" {version} {uid} ").as_bytes());
    h.update(info_hash);
    let digest = h.finalize();
    let mut out = [0; 12];
    out.copy_from_slice(&digest[..12]);
    out
}

/// Whether `key` (32 hex digits) is user `uid`'s passkey at `version` for `info_hash`.
fn matches(key: &[u8], secret: &[u8], version: i32, uid: u32, info_hash: &[u8; 20]) -> bool {
    let want = mac(secret, version, uid, info_hash);
    // Every byte is compared, whichever differs first.
    let differ = key[8..32].chunks(2).zip(want).fold(0u8, |acc, (pair, w)| {
        acc | ((hex(pair[0]) << 4 | hex(pair[1])) ^ w)
    });
    differ == 0
}

/// User `uid`'s passkey at `version` for `info_hash`: what an XBT site puts in the .torrent
/// file it hands out (lowercase hex).
pub fn passkey(secret: &[u8], version: i32, uid: u32, info_hash: &[u8; 20]) -> String {
    let mut s = format!("{uid:08x}");
    for b in mac(secret, version, uid, info_hash) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: [u8; 20] = [0xa1; 20];

    /// The passkey of a known input, computed apart from this code (Python's hashlib):
    /// `hashlib.sha1(b"s3cret 0 1 " + bytes([0xa1] * 20)).hexdigest()[:24]`.
    #[test]
    fn a_passkey_is_the_uid_and_twelve_bytes_of_sha1() {
        let k = passkey(b"s3cret", 0, 1, &HASH);
        assert_eq!(k, "00000001218c51c576bc3ec96b800428");
        assert_eq!(uid_of(k.as_bytes()), Some(1));
        assert!(matches(k.as_bytes(), b"s3cret", 0, 1, &HASH));
        assert!(matches(k.to_uppercase().as_bytes(), b"s3cret", 0, 1, &HASH));
    }

    /// A user by id is a 24-byte entry (plus the registry's 4-byte position and 8-byte id
    /// index): README states it.
    #[test]
    fn a_user_by_id_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<([u8; 4], Versioned)>(), 24);
    }

    /// The settings hotpath takes from `xbt_config`, and what a hostile row gets.
    #[test]
    fn settings_are_taken_where_they_make_sense() {
        let rows: [(&str, &[u8]); 8] = [
            ("log_announce", b"1"),
            ("torrent_pass_private_key", b"k3y"),
            ("announce_interval", b" 900 "),
            ("offline_message", b"down for maintenance"),
            ("read_db_interval", b"30"),
            ("no_such_setting", b"1"),
            ("full_scrape", b"1"),
            ("mysql_password", b"secret"),
        ];
        let s = Settings::of(rows);
        assert_eq!(s.secret.as_deref(), Some(&b"k3y"[..]));
        assert_eq!(s.announce_interval, Some(900));
        assert!(s.log_announce && !s.log_scrape);
        assert_eq!(s.offline_message.as_deref(), Some("down for maintenance"));
        assert_eq!(
            s.not_applied,
            [
                ("full_scrape".to_string(), "tracker.full_scrape"),
                ("read_db_interval".to_string(), "private.poll_secs")
            ]
        );
        let hostile: [(&str, &[u8]); 4] = [
            ("announce_interval", b"5"),
            ("offline_message", b"line\nbreak"),
            ("torrent_pass_private_key", b""),
            ("announce_interval", b"-1"),
        ];
        assert_eq!(Settings::of(hostile), Settings::default());
        let huge = vec![b'k'; MAX_SECRET + 1];
        assert_eq!(
            Settings::of([("torrent_pass_private_key", &huge[..])]).secret,
            None,
            "a secret past XBT's column, which every derived check would hash"
        );
        let long = "x".repeat(201);
        assert_eq!(
            Settings::of([("offline_message", long.as_bytes())]).offline_message,
            None
        );
    }

    #[test]
    fn a_passkey_holds_for_its_user_version_torrent_and_secret_only() {
        let k = passkey(b"s3cret", 3, 77, &HASH);
        let d = Derived::new(10);
        let user = User {
            id: 77,
            can_leech: true,
        };
        d.users
            .put(
                &77u32.to_be_bytes(),
                Versioned {
                    user,
                    version: 3,
                    wait_time: 0,
                    peers_limit: 0,
                },
            )
            .unwrap();
        // No secret yet: nothing holds.
        assert_eq!(d.user(k.as_bytes(), &HASH), None);
        d.set_secret(Some(b"s3cret"));
        assert_eq!(d.user(k.as_bytes(), &HASH), Some(user));
        assert_eq!(d.user(k.as_bytes(), &[0xb2; 20]), None, "another torrent");
        // The version raised: the old passkey is revoked, the new one holds.
        d.users
            .put(
                &77u32.to_be_bytes(),
                Versioned {
                    user,
                    version: 4,
                    wait_time: 0,
                    peers_limit: 0,
                },
            )
            .unwrap();
        assert_eq!(d.user(k.as_bytes(), &HASH), None);
        let k4 = passkey(b"s3cret", 4, 77, &HASH);
        assert_eq!(d.user(k4.as_bytes(), &HASH), Some(user));
        d.set_secret(Some(b"other"));
        assert_eq!(d.user(k4.as_bytes(), &HASH), None, "another secret");
        // Another user's id in front of a valid tail, a short key, a non-hex one.
        let mut forged = k4.clone().into_bytes();
        forged[7] = b'e';
        assert_eq!(d.user(&forged, &HASH), None);
        assert_eq!(uid_of(&k4.as_bytes()[..31]), None);
        assert_eq!(uid_of(b"0000004dzzzzzzzzzzzzzzzzzzzzzzzz"), None);
    }
}
