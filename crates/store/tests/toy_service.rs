//! A service the store has never heard of: a counter written behind, declared here and nowhere
//! else (its change, journal tag, queue, table and migration), on every backend. What a new
//! service needs from the store is its public seam ([`Service`], [`Queue`], [`Encode`],
//! [`Store::overlay`]); nothing in the store's crate names it.

use std::any::Any;
use std::collections::HashMap;

use hotpath_store::backend::{self, Backend, Dialect};
use hotpath_store::migrations::{self, Migration, MigrationState, STORE};
use hotpath_store::queue::Queues;
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::testing::test_db;
use hotpath_store::{Batch, Encode, Queue, Service, Store, StoreError};

/// The toy's only change: add `n` to counter `name`.
struct Add<'a> {
    name: &'a str,
    n: i64,
}

/// The toy's journal tag: any byte no other service of the store claims.
const TAG: u8 = 200;

impl Encode for Add<'_> {
    fn encoded_len(&self) -> usize {
        1 + 8 + 1 + self.name.len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(TAG);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.push(self.name.len() as u8);
        out.extend_from_slice(self.name.as_bytes());
    }
}

/// Per counter, what to add.
#[derive(Default)]
struct Counters(HashMap<String, i64>);

impl Queue for Counters {
    fn apply(&mut self, b: &[u8]) -> Option<usize> {
        let n = i64::from_le_bytes(b.get(1..9)?.try_into().ok()?);
        let len = usize::from(*b.get(9)?);
        let name = std::str::from_utf8(b.get(10..10 + len)?).ok()?;
        *self.0.entry(name.to_string()).or_insert(0) += n;
        Some(10 + len)
    }

    fn rows(&self) -> usize {
        self.0.len()
    }

    fn take(&mut self) -> Vec<Rows> {
        let mut all: Vec<_> = self.0.drain().collect();
        all.sort();
        let mut rows = Rows::with_capacity(&COUNTERS, all.len());
        for (name, n) in all {
            rows.push([Value::from(name.as_str()), Value::Int(n)]);
        }
        vec![rows]
    }

    fn empty_like(&self) -> Box<dyn Queue> {
        Box::<Counters>::default()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

static COUNTERS: Table = Table {
    name: "toy_counters",
    columns: &[
        col("name", Type::Text, Merge::Key),
        col("n", Type::Int, Merge::Add),
    ],
    update_only: false,
    keeps_older: None,
};

static TOY: Service = Service {
    name: "toy",
    tags: &[TAG],
    tables: &[&COUNTERS],
    queue: &|| Box::<Counters>::default(),
    migrations: &[Migration {
        version: 1,
        name: "counters",
        sqlite: &["CREATE TABLE toy_counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)"],
        postgres: &["CREATE TABLE toy_counters (name TEXT PRIMARY KEY, n BIGINT NOT NULL)"],
        mysql: &[
            "CREATE TABLE toy_counters (name VARCHAR(64) PRIMARY KEY, n BIGINT NOT NULL) \
                  ENGINE=InnoDB",
        ],
    }],
};

/// The counters the database holds.
fn stored(b: &mut dyn Backend) -> Result<HashMap<String, i64>, StoreError> {
    let mut out = HashMap::new();
    b.query("SELECT name, n FROM toy_counters", &[], &mut |r| {
        out.insert(r[0].text().to_string(), r[1].int());
    })?;
    Ok(out)
}

/// The toy's read: the database's counts with what waits to be written added.
fn counts(store: &Store) -> HashMap<String, i64> {
    store
        .overlay(
            |db, carry: &Batch| {
                let mut out = stored(db)?;
                for r in carry.rows_of(&COUNTERS) {
                    *out.entry(r[0].text().to_string()).or_insert(0) += r[1].int();
                }
                Ok(out)
            },
            |out, q: &Counters| {
                for (name, n) in &q.0 {
                    *out.entry(name.clone()).or_insert(0) += n;
                }
            },
        )
        .unwrap()
}

fn a_new_service_is_journaled_merged_written_and_replayed(d: Dialect) {
    let db = test_db(d, "toy");
    let cfg = db.store_config();
    {
        let (store, restored) = Store::open(&cfg, &[&TOY]).unwrap();
        assert_eq!(restored.replayed, 0);
        let mut w = store.writer(0);
        for (name, n) in [("a", 1), ("b", 5), ("a", 2)] {
            w.append(&Add { name, n }).unwrap();
        }
        w.commit().unwrap();
        assert_eq!(
            store.queued_rows(),
            2,
            "two counters: changes to one merged"
        );
        assert_eq!(
            counts(&store),
            HashMap::from([("a".into(), 3), ("b".into(), 5)])
        );
        assert_eq!(store.flush().unwrap(), 2);
        // Journaled and acknowledged, then the process dies before the next flush.
        w.append(&Add { name: "a", n: 10 }).unwrap();
        w.commit().unwrap();
        std::mem::forget(w);
        drop(store);
    }
    let (store, restored) = Store::open(&cfg, &[&TOY]).unwrap();
    assert_eq!((restored.replayed, restored.rows), (1, 1));
    assert_eq!(
        counts(&store),
        HashMap::from([("a".into(), 13), ("b".into(), 5)])
    );
    store.flush().unwrap();
    let held = store.with_backend(|b| stored(b)).unwrap();
    assert_eq!(held, HashMap::from([("a".into(), 13), ("b".into(), 5)]));
    assert_eq!(store.journal_bytes(), 0);
    let status = store
        .with_backend(|b| migrations::status(b, &[&TOY]))
        .unwrap();
    let toy: Vec<_> = status.iter().filter(|m| m.owner == "toy").collect();
    assert_eq!(toy.len(), 1);
    assert!(toy[0].applied_at.is_some());
}

/// A database at schema version 4 (before per-service migrations) upgrades: the store's
/// migration 5, then the service's own; a service's version newer than the build is refused.
fn a_version_4_database_takes_the_service_migrations(d: Dialect) {
    let db = test_db(d, "toyup");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    b.execute(b.dialect().create_schema_table()).unwrap();
    for m in &migrations::MIGRATIONS[..4] {
        b.apply_migration(
            m.statements(d),
            "INSERT INTO hp_schema (version, name, applied_at) VALUES (?, ?, ?)",
            &[
                Value::Int(m.version.into()),
                Value::from(m.name),
                Value::Int(1),
            ],
        )
        .unwrap();
    }
    let pending: Vec<(&str, u32)> = migrations::status(&mut *b, &[&TOY])
        .unwrap()
        .into_iter()
        .filter(|m| m.applied_at.is_none())
        .map(|m| (m.owner, m.version))
        .collect();
    let mut want: Vec<(&str, u32)> = (5..=migrations::latest()).map(|v| (STORE, v)).collect();
    want.push(("toy", 1));
    assert_eq!(pending, want);
    let e = migrations::require_current(&mut *b, &[&TOY]).unwrap_err();
    assert!(e.to_string().contains("toy 1 (counters)"), "{e}");
    let applied: Vec<MigrationState> = migrations::migrate(&mut *b, &[&TOY]).unwrap();
    assert_eq!(applied.len(), want.len());
    assert!(migrations::migrate(&mut *b, &[&TOY]).unwrap().is_empty());
    migrations::require_current(&mut *b, &[&TOY]).unwrap();
    // Another service's versions are its own: a second service's 1 does not collide.
    static OTHER: Service = Service {
        name: "other",
        tags: &[201],
        tables: &[],
        queue: &|| Box::<Counters>::default(),
        migrations: &[Migration {
            version: 1,
            name: "nothing",
            sqlite: &["CREATE TABLE toy_other (x INTEGER)"],
            postgres: &["CREATE TABLE toy_other (x INTEGER)"],
            mysql: &["CREATE TABLE toy_other (x INTEGER)"],
        }],
    };
    // A row no build wrote (a version below 1) is not read as one applied.
    b.execute(
        "INSERT INTO hp_service_schema (service, version, name, applied_at) \
         VALUES ('other', -1, 'forged', 0)",
    )
    .unwrap();
    let applied = migrations::migrate(&mut *b, &[&TOY, &OTHER]).unwrap();
    assert_eq!((applied[0].owner, applied[0].version), ("other", 1));
    b.execute(
        "INSERT INTO hp_service_schema (service, version, name, applied_at) \
         VALUES ('toy', 2, 'future', 0)",
    )
    .unwrap();
    let e = migrations::status(&mut *b, &[&TOY]).unwrap_err();
    assert!(e.to_string().contains("migration 2 of service toy"), "{e}");
    assert!(!e.retryable());
}

#[test]
fn two_services_may_not_share_a_name_or_a_tag() {
    static TWIN: Service = Service {
        name: "twin",
        tags: &[TAG],
        tables: &[],
        queue: &|| Box::<Counters>::default(),
        migrations: &[],
    };
    let db = test_db(Dialect::Sqlite, "toytag");
    let e = Store::open(&db.store_config(), &[&TOY, &TWIN])
        .err()
        .unwrap();
    assert!(e.to_string().contains("journal tag 200"), "{e}");
    let e = Store::open(&db.store_config(), &[&TOY, &TOY])
        .err()
        .unwrap();
    assert!(e.to_string().contains("two services are named toy"), "{e}");
}

#[test]
fn a_tag_no_service_claims_stops_the_record_after_what_came_before() {
    let mut q = Queues::new(&[&TOY]).unwrap();
    let mut bytes = Vec::new();
    Add { name: "a", n: 2 }.encode(&mut bytes);
    bytes.push(1);
    assert!(q.apply(&bytes).is_none(), "tag 1 is no service's here");
    assert_eq!(q.rows(), 1, "what came before it is merged");
    // A change cut short is not read, nor a length past the payload.
    let mut q = Queues::new(&[&TOY]).unwrap();
    assert!(q.apply(&bytes[..bytes.len() - 2]).is_none());
    assert!(q.apply(&[TAG, 0, 0, 0, 0, 0, 0, 0, 0, 9, b'x']).is_none());
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[test] fn $name() { super::$name(super::Dialect::Sqlite) } )* }
        mod postgres { $( #[test] fn $name() { super::$name(super::Dialect::Postgres) } )* }
        mod mysql { $( #[test] fn $name() { super::$name(super::Dialect::Mysql) } )* }
    };
}

suite!(
    a_new_service_is_journaled_merged_written_and_replayed,
    a_version_4_database_takes_the_service_migrations,
);
