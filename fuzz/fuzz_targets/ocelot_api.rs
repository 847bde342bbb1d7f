//! Ocelot's update API as a Gazelle site calls it: a query decodes to a checked action or to
//! a 400 naming the parameter; the action applies to a Gazelle private tracker with small
//! caps, which answers `success`, a JSON line or an error status, and never holds more tokens
//! than its cap. The same bytes as a query of Ocelot's report API decode to a report or to a
//! 400 naming the parameter.
#![no_main]

use std::sync::OnceLock;

use hotpath_fuzz as _;
use hotpath_tracker::private::gazelle::{decode, decode_report, Action, Report};
use hotpath_tracker::private::push::MAX_BATCH;
use hotpath_tracker::private::Private;
use libfuzzer_sys::fuzz_target;

fn tracker() -> &'static Private {
    static P: OnceLock<Private> = OnceLock::new();
    P.get_or_init(|| {
        let c = hotpath_config::PrivateConfig {
            schema: hotpath_config::PrivateSchema::Gazelle,
            max_users: 64,
            max_torrents: 64,
            max_tokens: 8,
            ..Default::default()
        };
        Private::new(&c, 1_000, 3_600)
    })
}

fuzz_target!(|data: &[u8]| {
    match decode_report(data) {
        Ok(Report::User(key)) => assert!(!key.is_empty() && key.len() <= 64),
        Ok(_) => {}
        Err(e) => assert!(e.status == 400 && !e.message.is_empty(), "{e:?}"),
    }
    let action = match decode(data) {
        Ok(a) => a,
        Err(e) => {
            assert_eq!(e.status, 400, "{e:?}");
            assert!(!e.message.is_empty());
            return;
        }
    };
    match &action {
        Action::RemoveUsers { passkeys } => assert!(passkeys.len() <= MAX_BATCH),
        Action::UpdateTorrents { info_hashes, .. } => assert!(info_hashes.len() <= MAX_BATCH),
        _ => {}
    }
    let p = tracker();
    match p.ocelot(action, 1_000, (1_800, 900)) {
        Ok(body) => assert!(body == "success" || body.starts_with("{\"hash\":")),
        Err(e) => assert!((400..600).contains(&e.status), "{e:?}"),
    }
    let g = p.gazelle.as_ref().expect("the Gazelle preset");
    assert!(g.tokens.read().len() <= 8);
    assert!(p.users.len() <= 64 && p.torrents.len() <= 64);
});
