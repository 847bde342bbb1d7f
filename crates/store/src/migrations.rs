//! Versioned schema migrations, one SQL text per dialect, applied in order: the store's own
//! ([`MIGRATIONS`], recorded in `hp_schema`), then each service's ([`Service::migrations`],
//! recorded in `hp_service_schema` under the service's name, so two services' versions never
//! collide). A migration is never edited once released; a change is a new version.
//!
//! Migrations 1 to 4 predate per-service migrations and create the tracker's, popup service's
//! and Lua routes' tables; migration 5 adds `hp_service_schema`, and a service added since
//! declares its tables in its own list.

use crate::backend::{Backend, Dialect};
use crate::queue::Service;
use crate::table::Value;
use crate::StoreError;

/// One schema version.
#[derive(Debug)]
pub struct Migration {
    /// The version (1, 2, ...).
    pub version: u32,
    /// What it does.
    pub name: &'static str,
    /// Statements for SQLite.
    pub sqlite: &'static [&'static str],
    /// Statements for PostgreSQL.
    pub postgres: &'static [&'static str],
    /// Statements for MySQL and MariaDB.
    pub mysql: &'static [&'static str],
}

impl Migration {
    /// The statements for `dialect`.
    pub fn statements(&self, dialect: Dialect) -> &'static [&'static str] {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
            Dialect::Mysql => self.mysql,
        }
    }
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "torrents and journal positions",
        sqlite: &[
            "CREATE TABLE hp_torrents (info_hash BLOB PRIMARY KEY, completed INTEGER NOT NULL, \
             seeders INTEGER NOT NULL, leechers INTEGER NOT NULL, first_seen INTEGER NOT NULL, \
             last_active INTEGER NOT NULL) WITHOUT ROWID",
            "CREATE TABLE hp_journal (worker INTEGER PRIMARY KEY, seq INTEGER NOT NULL)",
        ],
        postgres: &[
            "CREATE TABLE hp_torrents (info_hash BYTEA PRIMARY KEY, completed BIGINT NOT NULL, \
             seeders BIGINT NOT NULL, leechers BIGINT NOT NULL, first_seen BIGINT NOT NULL, \
             last_active BIGINT NOT NULL)",
            "CREATE TABLE hp_journal (worker INTEGER PRIMARY KEY, seq BIGINT NOT NULL)",
        ],
        mysql: &[
            "CREATE TABLE hp_torrents (info_hash BINARY(20) PRIMARY KEY, completed BIGINT NOT NULL, \
             seeders BIGINT NOT NULL, leechers BIGINT NOT NULL, first_seen BIGINT NOT NULL, \
             last_active BIGINT NOT NULL) ENGINE=InnoDB",
            "CREATE TABLE hp_journal (worker INTEGER PRIMARY KEY, seq BIGINT NOT NULL) ENGINE=InnoDB",
        ],
    },
    Migration {
        version: 2,
        name: "access list",
        sqlite: &[
            "CREATE TABLE hp_access_list (info_hash BLOB PRIMARY KEY, note TEXT NOT NULL DEFAULT '', \
             added_at INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
        ],
        postgres: &[
            "CREATE TABLE hp_access_list (info_hash BYTEA PRIMARY KEY, note TEXT NOT NULL DEFAULT '', \
             added_at BIGINT NOT NULL DEFAULT 0)",
        ],
        mysql: &[
            "CREATE TABLE hp_access_list (info_hash BINARY(20) PRIMARY KEY, \
             note VARCHAR(255) NOT NULL DEFAULT '', added_at BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
        ],
    },
    Migration {
        version: 3,
        name: "popups",
        sqlite: &[
            "CREATE TABLE hp_popups (id INTEGER PRIMARY KEY, definition TEXT NOT NULL, \
             updated_at INTEGER NOT NULL)",
            "CREATE TABLE hp_popup_users (user_id TEXT NOT NULL, popup_id INTEGER NOT NULL, \
             next_eligible INTEGER NOT NULL, shows INTEGER NOT NULL, last_action INTEGER NOT NULL, \
             updated_at INTEGER NOT NULL, PRIMARY KEY (user_id, popup_id)) WITHOUT ROWID",
            "CREATE TABLE hp_popup_events (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, \
             user_id TEXT NOT NULL, popup_id INTEGER NOT NULL, action INTEGER NOT NULL)",
            "CREATE TABLE hp_popup_daily (popup_id INTEGER NOT NULL, day INTEGER NOT NULL, \
             shows INTEGER NOT NULL, PRIMARY KEY (popup_id, day)) WITHOUT ROWID",
        ],
        postgres: &[
            "CREATE TABLE hp_popups (id INTEGER PRIMARY KEY, definition TEXT NOT NULL, \
             updated_at BIGINT NOT NULL)",
            "CREATE TABLE hp_popup_users (user_id TEXT NOT NULL, popup_id INTEGER NOT NULL, \
             next_eligible BIGINT NOT NULL, shows BIGINT NOT NULL, last_action SMALLINT NOT NULL, \
             updated_at BIGINT NOT NULL, PRIMARY KEY (user_id, popup_id))",
            "CREATE TABLE hp_popup_events (id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, \
             user_id TEXT NOT NULL, popup_id INTEGER NOT NULL, action SMALLINT NOT NULL)",
            "CREATE TABLE hp_popup_daily (popup_id INTEGER NOT NULL, day INTEGER NOT NULL, \
             shows BIGINT NOT NULL, PRIMARY KEY (popup_id, day))",
        ],
        mysql: &[
            "CREATE TABLE hp_popups (id INTEGER PRIMARY KEY, definition TEXT NOT NULL, \
             updated_at BIGINT NOT NULL) ENGINE=InnoDB",
            "CREATE TABLE hp_popup_users (user_id VARCHAR(255) NOT NULL, popup_id INTEGER NOT NULL, \
             next_eligible BIGINT NOT NULL, shows BIGINT NOT NULL, last_action SMALLINT NOT NULL, \
             updated_at BIGINT NOT NULL, PRIMARY KEY (user_id, popup_id)) ENGINE=InnoDB",
            "CREATE TABLE hp_popup_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, at BIGINT NOT NULL, \
             user_id VARCHAR(255) NOT NULL, popup_id INTEGER NOT NULL, action SMALLINT NOT NULL) ENGINE=InnoDB",
            "CREATE TABLE hp_popup_daily (popup_id INTEGER NOT NULL, day INTEGER NOT NULL, \
             shows BIGINT NOT NULL, PRIMARY KEY (popup_id, day)) ENGINE=InnoDB",
        ],
    },
    Migration {
        version: 4,
        name: "script tables",
        sqlite: &[
            "CREATE TABLE hp_lua_rows (id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, \
             at INTEGER NOT NULL, data TEXT NOT NULL)",
            "CREATE INDEX hp_lua_rows_tbl ON hp_lua_rows (tbl, at)",
            "CREATE TABLE hp_lua_counters (tbl TEXT NOT NULL, k TEXT NOT NULL, col TEXT NOT NULL, \
             value INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (tbl, k, col)) WITHOUT ROWID",
        ],
        postgres: &[
            "CREATE TABLE hp_lua_rows (id BIGSERIAL PRIMARY KEY, tbl TEXT NOT NULL, \
             at BIGINT NOT NULL, data TEXT NOT NULL)",
            "CREATE INDEX hp_lua_rows_tbl ON hp_lua_rows (tbl, at)",
            "CREATE TABLE hp_lua_counters (tbl TEXT NOT NULL, k TEXT NOT NULL, col TEXT NOT NULL, \
             value BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (tbl, k, col))",
        ],
        mysql: &[
            "CREATE TABLE hp_lua_rows (id BIGINT AUTO_INCREMENT PRIMARY KEY, tbl VARCHAR(64) NOT NULL, \
             at BIGINT NOT NULL, data MEDIUMTEXT NOT NULL, INDEX hp_lua_rows_tbl (tbl, at)) ENGINE=InnoDB",
            "CREATE TABLE hp_lua_counters (tbl VARCHAR(64) NOT NULL, k VARCHAR(255) NOT NULL, \
             col VARCHAR(64) NOT NULL, value BIGINT NOT NULL, updated_at BIGINT NOT NULL, \
             PRIMARY KEY (tbl, k, col)) ENGINE=InnoDB",
        ],
    },
    Migration {
        version: 5,
        name: "per-service migrations",
        sqlite: &[
            "CREATE TABLE hp_service_schema (service TEXT NOT NULL, version INTEGER NOT NULL, \
             name TEXT NOT NULL, applied_at INTEGER NOT NULL, PRIMARY KEY (service, version))",
        ],
        postgres: &[
            "CREATE TABLE hp_service_schema (service TEXT NOT NULL, version INTEGER NOT NULL, \
             name TEXT NOT NULL, applied_at BIGINT NOT NULL, PRIMARY KEY (service, version))",
        ],
        mysql: &[
            "CREATE TABLE hp_service_schema (service VARCHAR(64) NOT NULL, version INTEGER NOT NULL, \
             name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL, \
             PRIMARY KEY (service, version)) ENGINE=InnoDB",
        ],
    },
    Migration {
        version: 6,
        name: "text keys compare byte for byte on MySQL and MariaDB",
        // SQLite and PostgreSQL compare text byte for byte already. MySQL's default collation
        // folds case and accents and pads with spaces, so popup users `Bob`, `bob`, `bob `
        // and `böb` (and script keys) were one row: one user's cooldown was another's.
        // `{bin}` is the server's byte-exact collation without padding (see the MySQL
        // backend's `apply_migration`).
        sqlite: &[],
        postgres: &[],
        mysql: &[
            "ALTER TABLE hp_popup_users MODIFY user_id VARCHAR(255) CHARACTER SET utf8mb4 \
             COLLATE {bin} NOT NULL",
            "ALTER TABLE hp_popup_events MODIFY user_id VARCHAR(255) CHARACTER SET utf8mb4 \
             COLLATE {bin} NOT NULL",
            "ALTER TABLE hp_lua_rows MODIFY tbl VARCHAR(64) CHARACTER SET utf8mb4 \
             COLLATE {bin} NOT NULL",
            "ALTER TABLE hp_lua_counters \
             MODIFY tbl VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {bin} NOT NULL, \
             MODIFY k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {bin} NOT NULL, \
             MODIFY col VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {bin} NOT NULL",
        ],
    },
    Migration {
        version: 7,
        name: "the shows each popup user's last click and close answered",
        // A show yields one click and one close: these say which were given, so a replayed
        // token is refused after a restart too.
        sqlite: &[
            "ALTER TABLE hp_popup_users ADD COLUMN clicked_show_at INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE hp_popup_users ADD COLUMN closed_show_at INTEGER NOT NULL DEFAULT 0",
        ],
        postgres: &[
            "ALTER TABLE hp_popup_users ADD COLUMN clicked_show_at BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE hp_popup_users ADD COLUMN closed_show_at BIGINT NOT NULL DEFAULT 0",
        ],
        mysql: &[
            "ALTER TABLE hp_popup_users ADD COLUMN clicked_show_at BIGINT NOT NULL DEFAULT 0, \
             ADD COLUMN closed_show_at BIGINT NOT NULL DEFAULT 0",
        ],
    },
];

/// Who a migration belongs to in [`MigrationState::owner`]: the store itself.
pub const STORE: &str = "store";

/// The version that added `hp_service_schema`.
const SERVICE_SCHEMA: u32 = 5;

/// The newest schema version of the store's own migrations this build knows.
pub fn latest() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// One migration's state in a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationState {
    /// [`STORE`], or the service's name.
    pub owner: &'static str,
    /// The version (per owner).
    pub version: u32,
    /// What it does.
    pub name: &'static str,
    /// Unix seconds it was applied at; `None` when pending.
    pub applied_at: Option<i64>,
}

/// `(service, version, applied_at)` of the migrations of `services` the database records and
/// this build knows (none before migration 5). Per service, at most as many rows as it has
/// migrations are read, whatever the table holds; a recorded version above those is refused
/// (the database is newer than this build).
fn applied_service_migrations(
    db: &mut dyn Backend,
    store: &[(u32, i64)],
    services: &[&'static Service],
) -> Result<Vec<(&'static str, u32, i64)>, StoreError> {
    let mut out = Vec::new();
    if !store.iter().any(|(v, _)| *v == SERVICE_SCHEMA) {
        return Ok(out);
    }
    for s in services {
        let known = s.migrations.len() as i64;
        let name = Value::from(s.name);
        let mut newest = 0;
        db.query(
            "SELECT MAX(version) FROM hp_service_schema WHERE service = ?",
            std::slice::from_ref(&name),
            &mut |r| newest = r[0].int(),
        )?;
        if newest > known {
            return Err(StoreError::Schema(format!(
                "the database has migration {newest} of service {}, newer than this hotpath \
                 knows ({known}): run a newer hotpath",
                s.name
            )));
        }
        db.query(
            "SELECT version, applied_at FROM hp_service_schema \
             WHERE service = ? AND version BETWEEN 1 AND ?",
            &[name, Value::Int(known)],
            &mut |r| out.push((s.name, r[0].int() as u32, r[1].int())),
        )?;
    }
    Ok(out)
}

/// Checks that a service's versions run 1, 2, ... (a build error otherwise).
fn check_service(s: &Service) -> Result<(), StoreError> {
    for (i, m) in s.migrations.iter().enumerate() {
        if m.version as usize != i + 1 {
            return Err(StoreError::Schema(format!(
                "service {}: migration {} is listed as number {}",
                s.name,
                m.version,
                i + 1
            )));
        }
    }
    Ok(())
}

/// Every known migration, the store's and `services`', and whether the database has it.
/// Fails when the database has a version this build does not know (it is newer than this
/// hotpath, or than the service).
pub fn status(
    db: &mut dyn Backend,
    services: &[&'static Service],
) -> Result<Vec<MigrationState>, StoreError> {
    let applied = db.applied_migrations()?;
    if let Some(&(v, _)) = applied.iter().find(|(v, _)| *v > latest()) {
        return Err(StoreError::Schema(format!(
            "the database is at schema version {v}, newer than this hotpath knows ({}): \
             run a newer hotpath",
            latest()
        )));
    }
    for s in services {
        check_service(s)?;
    }
    let by_service = applied_service_migrations(db, &applied, services)?;
    let mut out = known(services);
    for m in &mut out {
        m.applied_at = if m.owner == STORE {
            applied.iter().find(|(v, _)| *v == m.version).map(|a| a.1)
        } else {
            by_service
                .iter()
                .find(|(name, v, _)| *name == m.owner && *v == m.version)
                .map(|a| a.2)
        };
    }
    Ok(out)
}

/// Every migration this build knows, the store's then `services`', none applied.
pub fn known(services: &[&'static Service]) -> Vec<MigrationState> {
    let all = MIGRATIONS.iter().map(|m| (STORE, m)).chain(
        services
            .iter()
            .flat_map(|s| s.migrations.iter().map(|m| (s.name, m))),
    );
    all.map(|(owner, m)| MigrationState {
        owner,
        version: m.version,
        name: m.name,
        applied_at: None,
    })
    .collect()
}

/// Applies every pending migration in order, the store's first; returns those applied.
pub fn migrate(
    db: &mut dyn Backend,
    services: &[&'static Service],
) -> Result<Vec<MigrationState>, StoreError> {
    let mut done = Vec::new();
    let states = status(db, services)?;
    if states.iter().any(|s| s.applied_at.is_none()) {
        db.execute(db.dialect().create_schema_table())?;
    }
    for mut state in states.into_iter().filter(|s| s.applied_at.is_none()) {
        let now = crate::unix_now();
        let version = i64::from(state.version);
        if state.owner == STORE {
            let m = &MIGRATIONS[state.version as usize - 1];
            db.apply_migration(
                m.statements(db.dialect()),
                "INSERT INTO hp_schema (version, name, applied_at) VALUES (?, ?, ?)",
                &[Value::Int(version), Value::from(m.name), Value::Int(now)],
            )?;
        } else {
            let s = services
                .iter()
                .find(|s| s.name == state.owner)
                .expect("status lists known services");
            let m = &s.migrations[state.version as usize - 1];
            db.apply_migration(
                m.statements(db.dialect()),
                "INSERT INTO hp_service_schema (service, version, name, applied_at) \
                 VALUES (?, ?, ?, ?)",
                &[
                    Value::from(s.name),
                    Value::Int(version),
                    Value::from(m.name),
                    Value::Int(now),
                ],
            )?;
        }
        log::info!(
            "{}: schema migration {} {} ({}) applied",
            db.dialect().name(),
            state.owner,
            state.version,
            state.name
        );
        state.applied_at = Some(now);
        done.push(state);
    }
    Ok(done)
}

/// Fails unless every migration is applied (for a start with `store.migrate = false`).
pub fn require_current(
    db: &mut dyn Backend,
    services: &[&'static Service],
) -> Result<(), StoreError> {
    let pending: Vec<String> = status(db, services)?
        .iter()
        .filter(|s| s.applied_at.is_none())
        .map(|s| format!("{} {} ({})", s.owner, s.version, s.name))
        .collect();
    if pending.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Schema(format!(
            "migrations pending: {}; run `hotpath db migrate` or set store.migrate = true",
            pending.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every migration changes some dialect's schema; one that leaves a dialect as it is (6:
    /// SQLite and PostgreSQL compare text byte for byte already) says so in its comment.
    #[test]
    fn versions_are_consecutive_and_every_migration_has_statements() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1);
            let dialects = [Dialect::Sqlite, Dialect::Postgres, Dialect::Mysql];
            let with = dialects.iter().filter(|d| !m.statements(**d).is_empty());
            assert!(with.count() > 0, "{}", m.version);
            if m.version != 6 {
                for d in dialects {
                    assert!(!m.statements(d).is_empty(), "{} {:?}", m.version, d);
                }
            }
        }
    }

    /// The schema table in the crate's documentation names the latest version and every
    /// table the migrations create (README sends readers there).
    #[test]
    fn the_schema_doc_is_current() {
        let doc = include_str!("lib.rs");
        assert!(
            doc.contains(&format!("//! # Schema (version {})", latest())),
            "update the schema heading in crates/store/src/lib.rs"
        );
        for m in MIGRATIONS {
            for st in m.statements(Dialect::Sqlite) {
                if let Some(rest) = st.strip_prefix("CREATE TABLE ") {
                    let table = rest.split_whitespace().next().unwrap();
                    assert!(
                        doc.contains(&format!("//! | `{table}` |")),
                        "{table} (migration {}) is missing from the schema doc",
                        m.version
                    );
                }
            }
        }
    }
}
