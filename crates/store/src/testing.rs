//! Test support shared by the store's conformance suite and the server's fault tests: a fresh
//! database of each kind per test, so tests run in parallel without seeing each other.
//!
//! PostgreSQL and MySQL are found at `HOTPATH_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `HOTPATH_TEST_MYSQL` (default
//! `mysql://root@127.0.0.1:3306/test`); `scripts/test` starts or installs them. A missing
//! server fails the test that needs it: it is not a skip.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::{self, Dialect};

/// A fresh database of one kind, dropped at the end.
pub struct TestDb {
    /// The database's URL.
    pub url: String,
    /// A scratch directory (the SQLite file, data dirs), removed at the end.
    pub dir: PathBuf,
    cleanup: Option<(String, String)>,
}

impl TestDb {
    /// A store config on this database, its data dir in the scratch directory, the journal
    /// synced by each writer (no syncer thread to wait for).
    pub fn store_config(&self) -> hotpath_config::StoreConfig {
        hotpath_config::StoreConfig {
            url: self.url.clone(),
            data_dir: self.dir.join("data").display().to_string(),
            journal_fsync_ms: 0,
            ..hotpath_config::StoreConfig::default()
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin, sql)) = self.cleanup.take() {
            if let Ok(mut b) = backend::connect(&admin, &self.dir) {
                let _ = b.execute(&sql);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hpt_{tag}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn server_url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// Replaces the database name (the last path segment) of a server URL.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, ""), |(b, q)| (b, q));
    let cut = base.rfind('/').expect("a URL with a database");
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{}/{db}{q}", &base[..cut])
}

/// A fresh database of `dialect`, named after `tag`; panics when its server is not running.
pub fn test_db(dialect: Dialect, tag: &str) -> TestDb {
    let name = unique(tag);
    let dir = temp_dir(&name);
    match dialect {
        Dialect::Sqlite => TestDb {
            url: format!("sqlite://{}", dir.join("test.db").display()),
            dir,
            cleanup: None,
        },
        Dialect::Postgres | Dialect::Mysql => {
            let (var, default) = if dialect == Dialect::Postgres {
                (
                    "HOTPATH_TEST_POSTGRES",
                    "postgres://postgres@127.0.0.1:5432/test",
                )
            } else {
                ("HOTPATH_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
            };
            let admin = server_url(var, default);
            let mut b = backend::connect(&admin, &dir).unwrap();
            b.execute(&format!("CREATE DATABASE {name}"))
                .unwrap_or_else(|e| {
                    panic!(
                        "{} must be running at {admin} (scripts/test starts it): {e}",
                        dialect.name()
                    )
                });
            let drop = if dialect == Dialect::Postgres {
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            } else {
                format!("DROP DATABASE IF EXISTS {name}")
            };
            TestDb {
                url: with_database(&admin, &name),
                dir,
                cleanup: Some((admin, drop)),
            }
        }
    }
}
