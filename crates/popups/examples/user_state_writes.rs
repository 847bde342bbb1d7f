//! What the database costs per popups row, through the store's own SQLite backend and
//! statements (the flusher's path after the queue): users' states upserted into
//! `hp_popup_users` (keys scattered over a table of USERS users) against event-log rows
//! appended to `hp_popup_events`. Prints CPU microseconds per row for each.
//!
//! The popups benchmark writes about one user-state row and one event row for every two
//! requests, nearly every state row a key not seen before; TUNING.md reads these figures
//! against the CPU a request may cost for popups to reach 80 % of the machine's ceiling.
//!
//! `cargo run --release -p hotpath-popups --example user_state_writes -- [USERS] [BATCH]`
//! (defaults: 1,000,000 users, batches of 100,000 rows; the database is made in a fresh
//! directory under the system's temporary directory and removed at the end).

use std::time::Instant;

use hotpath_bench::zipf::Zipf;
use hotpath_bench::{cpu_times, UsageWho};
use hotpath_popups::stored::{POPUPS, POPUP_EVENTS, POPUP_USERS};
use hotpath_store::batch::Batch;
use hotpath_store::table::{Rows, Value};
use hotpath_store::{backend, migrations, Backend};

/// The database's directory, removed when the run ends (also when it fails).
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `parts` in one transaction; returns (wall, CPU) seconds.
fn write(db: &mut dyn Backend, parts: Vec<Rows>) -> (f64, f64) {
    let batch = Batch::concat(parts);
    let cpu = || {
        let (user, system) = cpu_times(UsageWho::RUSAGE_THREAD);
        user + system
    };
    let (t, c) = (Instant::now(), cpu());
    db.write_batch(&batch, true).expect("written");
    (t.elapsed().as_secs_f64(), cpu() - c)
}

/// One user's state row.
fn state(user: &str, popup: u32, at: u32) -> [Value; 6] {
    [
        Value::Text(user.into()),
        popup.into(),
        Value::Int(i64::from(at) + 600),
        1u32.into(),
        1u32.into(),
        at.into(),
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64, max: u64, name: &str| -> u64 {
        let Some(text) = args.get(i) else {
            return default;
        };
        match text.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                eprintln!("{name}: `{text}` is not a number from 1 to {max}\nusage: user_state_writes [USERS] [BATCH]");
                std::process::exit(2);
            }
        }
    };
    let users = arg(0, 1_000_000, 100_000_000, "USERS");
    let batch = arg(1, 100_000, 10_000_000, "BATCH") as usize;
    let dir = Scratch(
        std::env::temp_dir().join(format!("hotpath-user-state-writes-{}", std::process::id())),
    );
    let mut db = backend::connect("", &dir.0).expect("a SQLite file");
    migrations::migrate(&mut *db, &[&POPUPS]).expect("migrated");

    // 1 to 4 popups per user (2.5 on average), written in sorted batches as a flusher would.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut preload = Rows::with_capacity(&POPUP_USERS, 250_000);
    let mut held = 0u64;
    for user in 1..=users {
        for p in 0..(1 + user % 4) as u32 {
            preload.push(state(&user.to_string(), 1 + p * 7, 1_800_000_000));
            held += 1;
        }
        if preload.len() >= 250_000 || user == users {
            write(&mut *db, vec![preload]);
            preload = Rows::with_capacity(&POPUP_USERS, 250_000);
        }
    }
    println!("{held} user-state rows over {users} users; batches of {batch} rows");

    let zipf = Zipf::new(users, 0.9).expect("a pool of users");
    for round in 0..4u32 {
        // Popups from 1 to 50 (mostly keys the table lacks, as under the benchmark's load);
        // users drawn evenly in the first two rounds, then as the benchmark draws them (Zipf
        // 0.9: a few come back often). Sorted and without repeats, as the queue hands them over.
        let skewed = round >= 2;
        let mut keys: Vec<(String, u32)> = (0..batch)
            .map(|_| {
                let user = if skewed {
                    zipf.sample(|| rng.f64())
                } else {
                    rng.u64(1..=users)
                };
                (user.to_string(), rng.u32(1..=50))
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let at = 1_800_000_100 + round;
        let mut states = Rows::with_capacity(&POPUP_USERS, keys.len());
        for (user, popup) in &keys {
            states.push(state(user, *popup, at));
        }
        let (wall, cpu) = write(&mut *db, vec![states]);
        let n = keys.len() as f64;
        println!(
            "round {round}, users {}: {} user-state upserts: {:.2} us CPU per row ({:.2} us wall)",
            if skewed { "Zipf 0.9" } else { "even" },
            keys.len(),
            1e6 * cpu / n,
            1e6 * wall / n
        );
        let mut events = Rows::with_capacity(&POPUP_EVENTS, keys.len());
        for (user, popup) in &keys {
            events.push([
                at.into(),
                Value::Text(user.as_str().into()),
                (*popup).into(),
                1u32.into(),
            ]);
        }
        let (wall, cpu) = write(&mut *db, vec![events]);
        println!(
            "round {round}: {} event-log appends: {:.2} us CPU per row ({:.2} us wall)",
            keys.len(),
            1e6 * cpu / n,
            1e6 * wall / n
        );
    }
    drop(db);
}
