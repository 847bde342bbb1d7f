//! What every fuzz target shares: a capped allocator, so a decoder that would allocate without
//! bound aborts the run (libFuzzer reports it as a crash, with the input) instead of passing
//! while it takes gigabytes.

use std::alloc::System;

use cap::Cap;

/// Most bytes all live allocations of one run may hold. Every decoder works in buffers a few
/// times its input (inputs stay under 1 MB: `-max_len` in `scripts/fuzz`), and the swarm
/// table's caps are set low in the snapshot target, so anything near this is a missing bound.
pub const ALLOC_LIMIT: usize = 256 << 20;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, ALLOC_LIMIT);

/// Bytes allocated now (for targets that check a bound of their own).
pub fn allocated() -> usize {
    ALLOC.allocated()
}

/// Every service that writes through the store, as the binary wires them.
pub static SERVICES: [&hotpath_store::Service; 4] = [
    &hotpath_tracker::stored::TRACKER,
    &hotpath_tracker::private::stored::PRIVATE,
    &hotpath_popups::stored::POPUPS,
    &hotpath_lua::stored::LUA,
];

/// [`SERVICES`] with private mode writing each site preset's tables instead of hotpath's
/// (XBT's, XBT's before 2019, TorrentPier's).
pub fn site_services() -> Vec<[&'static hotpath_store::Service; 4]> {
    use hotpath_config::{PrivateConfig, PrivateSchema};
    [
        PrivateSchema::Xbt,
        PrivateSchema::XbtFiles,
        PrivateSchema::Torrentpier,
        PrivateSchema::Gazelle,
        PrivateSchema::Unit3d,
    ]
    .map(|schema| {
        let site = hotpath_tracker::private::stored::service(&PrivateConfig {
            schema,
            ..PrivateConfig::default()
        });
        let mut all = SERVICES;
        all[1] = site;
        all
    })
    .to_vec()
}

/// A change of any of [`SERVICES`], decoded by the service its tag names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyChange {
    /// The tracker's.
    Torrent(hotpath_tracker::stored::TorrentChange),
    /// The popup service's.
    Popup(hotpath_popups::stored::PopupChange),
    /// The Lua routes'.
    Lua(hotpath_lua::stored::LuaChange),
    /// Private mode's accounting.
    Account(hotpath_tracker::private::stored::AccountChange),
    /// Private mode's torrent counts.
    Counts(hotpath_tracker::private::stored::CountsChange),
    /// Private mode's pushed users and torrents.
    Registry(hotpath_tracker::private::stored::RegistryChange),
    /// XBT's announce and scrape logs.
    Log(hotpath_tracker::private::stored::LogChange),
}

impl AnyChange {
    /// Decodes the change at the start of `b` by the service its tag names, and its length.
    pub fn decode(b: &[u8]) -> Option<(AnyChange, usize)> {
        use hotpath_lua::stored::LuaChange;
        use hotpath_popups::stored::PopupChange;
        use hotpath_tracker::stored::TorrentChange;
        TorrentChange::decode(b)
            .map(|(c, len)| (AnyChange::Torrent(c), len))
            .or_else(|| PopupChange::decode(b).map(|(c, len)| (AnyChange::Popup(c), len)))
            .or_else(|| LuaChange::decode(b).map(|(c, len)| (AnyChange::Lua(c), len)))
            .or_else(|| {
                hotpath_tracker::private::stored::AccountChange::decode(b)
                    .map(|(c, len)| (AnyChange::Account(c), len))
            })
            .or_else(|| {
                hotpath_tracker::private::stored::CountsChange::decode(b)
                    .map(|(c, len)| (AnyChange::Counts(c), len))
            })
            .or_else(|| {
                hotpath_tracker::private::stored::RegistryChange::decode(b)
                    .map(|(c, len)| (AnyChange::Registry(c), len))
            })
            .or_else(|| {
                hotpath_tracker::private::stored::LogChange::decode(b)
                    .map(|(c, len)| (AnyChange::Log(c), len))
            })
    }

    /// The change as its service encodes it.
    pub fn encoded(&self) -> &dyn hotpath_store::Encode {
        match self {
            AnyChange::Torrent(c) => c,
            AnyChange::Popup(c) => c,
            AnyChange::Lua(c) => c,
            AnyChange::Account(c) => c,
            AnyChange::Counts(c) => c,
            AnyChange::Registry(c) => c,
            AnyChange::Log(c) => c,
        }
    }
}
