//! Tables that belong to a site (XBT's, TorrentPier's): the store updates the rows there and
//! inserts none where the site's other columns have no default, leaves a NULL's column as it
//! is, and writes columns named like reserved words. On every database.

use hotpath_store::backend::{self, Dialect};
use hotpath_store::table::{col, Merge, Rows, Table, Type, Value};
use hotpath_store::testing::test_db;
use hotpath_store::{Backend, Batch};

/// Like `xbt_users`: a pass without default the store cannot fill.
static USERS: Table = Table {
    name: "site_users",
    columns: &[
        col("uid", Type::Int, Merge::Key),
        col("uploaded", Type::Int, Merge::Add),
        col("left", Type::Int, Merge::Replace),
        col("mtime", Type::Int, Merge::Max),
    ],
    update_only: true,
    keeps_older: None,
};

/// Like `xbt_peers`: every column is the store's, so rows are upserted.
static PEERS: Table = Table {
    name: "site_peers",
    columns: &[
        col("tid", Type::Int, Merge::Key),
        col("uid", Type::Int, Merge::Key),
        col("left", Type::Int, Merge::Replace),
        col("uploaded", Type::Int, Merge::Add),
    ],
    update_only: false,
    keeps_older: None,
};

fn rows_of(b: &mut dyn Backend, sql: &str) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    b.query(sql, &[], &mut |r| {
        out.push(r.iter().map(Value::int).collect())
    })
    .unwrap();
    out
}

fn write(b: &mut dyn Backend, users: &[[Value; 4]], peers: &[[i64; 4]]) {
    let mut u = Rows::new(&USERS);
    for r in users {
        u.push(r.clone());
    }
    let mut p = Rows::new(&PEERS);
    for r in peers {
        p.push(r.map(Value::Int));
    }
    b.write(&Batch::concat(vec![u, p])).unwrap();
}

fn site_tables_are_updated_never_filled(d: Dialect) {
    let db = test_db(d, "site");
    let mut b = backend::connect(&db.url, &db.dir).unwrap();
    let q = |n: &str| d.quote(n);
    b.execute(&format!(
        "CREATE TABLE site_users (uid INTEGER PRIMARY KEY, pass CHAR(32) NOT NULL, \
         uploaded BIGINT NOT NULL DEFAULT 0, {} BIGINT NOT NULL DEFAULT 0, \
         mtime INTEGER NOT NULL DEFAULT 0)",
        q("left")
    ))
    .unwrap();
    b.execute(&format!(
        "CREATE TABLE site_peers (tid INTEGER NOT NULL, uid INTEGER NOT NULL, {} BIGINT NOT \
         NULL, uploaded BIGINT NOT NULL, PRIMARY KEY (tid, uid))",
        q("left")
    ))
    .unwrap();
    b.execute("INSERT INTO site_users (uid, pass, uploaded, mtime) VALUES (1, 'a', 100, 50), (2, 'b', 0, 50)")
        .unwrap();
    let int = Value::Int;
    write(
        &mut *b,
        &[
            [int(1), int(7), int(3), int(60)],
            // An older time and no "left": both stay as they are.
            [int(2), int(5), Value::Null, int(10)],
            // A user the site deleted: nothing is inserted, nothing fails.
            [int(3), int(9), int(9), int(9)],
        ],
        &[[10, 1, 500, 7], [10, 2, 0, 5]],
    );
    write(
        &mut *b,
        &[[int(1), int(1), int(0), int(61)]],
        &[[10, 1, 400, 1]],
    );
    let sql = format!(
        "SELECT uid, uploaded, {}, mtime FROM site_users ORDER BY uid",
        q("left")
    );
    assert_eq!(
        rows_of(&mut *b, &sql),
        [[1, 108, 0, 61], [2, 5, 0, 50]],
        "{}",
        d.name()
    );
    let sql = format!(
        "SELECT tid, uid, {}, uploaded FROM site_peers ORDER BY uid",
        q("left")
    );
    assert_eq!(rows_of(&mut *b, &sql), [[10, 1, 400, 8], [10, 2, 0, 5]]);
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $( #[test] fn $name() { super::$name(super::Dialect::Sqlite) } )* }
        mod postgres { $( #[test] fn $name() { super::$name(super::Dialect::Postgres) } )* }
        mod mysql { $( #[test] fn $name() { super::$name(super::Dialect::Mysql) } )* }
    };
}

suite!(site_tables_are_updated_never_filled);
