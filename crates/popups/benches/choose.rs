//! Cost of one decision (`Catalog::choose`) against the size of the catalog: the popups of
//! `bench/compare popups` (mixed targeting on platform, country, version and segments,
//! partial rollouts, frequency rules), repeated with new ids up to 10,000 popups, for viewers
//! drawn from the scenario's values. A fresh user (no state) and a returning one (every popup
//! it was shown cooling down) are timed apart: the first stops at the first popup it may
//! see, the second looks at every popup that targets it.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};

use hotpath_popups::{Action, Catalog, Popup, Seen, Viewer};

/// Popup `i` of the benchmark catalog, as `bench/compare`'s `bench_popups` makes it.
fn popup(i: u32) -> Popup {
    let platforms = [
        r#"["ios"]"#,
        r#"["android"]"#,
        r#"["ios","android"]"#,
        r#"["web"]"#,
        "",
    ];
    let countries = [
        r#"{"include":["DE","AT"]}"#,
        r#"{"include":["US"]}"#,
        r#"{"exclude":["JP"]}"#,
        "",
        r#"{"include":["BR","IN"]}"#,
    ];
    let segments = [
        r#"{"include":["vip"]}"#,
        r#"{"include":["new"]}"#,
        r#"{"exclude":["churn-risk"]}"#,
        "",
        "",
        "",
    ];
    let k = i as usize;
    let mut t = Vec::new();
    if !platforms[k % 5].is_empty() {
        t.push(format!(r#""platform":{{"include":{}}}"#, platforms[k % 5]));
    }
    let c = countries[if !k.is_multiple_of(3) { k % 5 } else { 3 }];
    if !c.is_empty() {
        t.push(format!(r#""country":{c}"#));
    }
    if !segments[k % 6].is_empty() {
        t.push(format!(r#""segment":{}"#, segments[k % 6]));
    }
    if k.is_multiple_of(7) {
        t.push(r#""app_version_min":"2.0.0""#.into());
    }
    if k.is_multiple_of(11) {
        t.push(r#""app_version_max":"2.99.0""#.into());
    }
    let mut f = vec![
        format!(r#""cooldown":{}"#, [60, 600, 3600, 86400][k % 4]),
        format!(
            r#""after_close":{}"#,
            ["3600", "86400", r#""never""#][k % 3]
        ),
        format!(r#""after_click":{}"#, [r#""never""#, "604800"][k % 2]),
    ];
    if k % 4 == 1 {
        f.push(format!(r#""max_shows":{}"#, 1 + k % 5));
    }
    if k % 10 == 3 {
        f.push(format!(r#""daily_cap":{}"#, 20000 * k));
    }
    let json = format!(
        r#"{{"id":{i},"name":"popup {i}","payload":{{"title":"Offer {i}"}},"priority":{},"targeting":{{{}}},"rollout_percent":{},"frequency":{{{}}}}}"#,
        (i * 37) % 17,
        t.join(","),
        [100, 100, 50, 25, 100][k % 5],
        f.join(","),
    );
    Popup::from_json(json.as_bytes()).expect("a valid popup")
}

fn choose(c: &mut Criterion) {
    const PLATFORMS: [&str; 4] = ["ios", "android", "web", "desktop"];
    const COUNTRIES: [&str; 6] = ["DE", "US", "FR", "BR", "JP", "IN"];
    const VERSIONS: [&str; 4] = ["1.9.0", "2.0.3", "2.14.1", "3.1.0"];
    const SEGMENTS: [&[&str]; 5] = [
        &["new"],
        &["vip"],
        &["churn-risk"],
        &["new", "vip"],
        &["beta"],
    ];
    let users: Vec<String> = (0..1024).map(|n| format!("{}", n * 7919 + 13)).collect();
    let viewers: Vec<Viewer<'_>> = (0..1024)
        .map(|n| Viewer {
            user: &users[n],
            platform: Some(PLATFORMS[n % 4]),
            country: Some(COUNTRIES[n % 6]),
            app_version: Some(VERSIONS[n % 4].parse().unwrap()),
            segments: SEGMENTS[n % 5],
        })
        .collect();
    let mut group = c.benchmark_group("popups_choose");
    for size in [1u32, 10, 50, 100, 1_000, 10_000] {
        let catalog = Catalog::new((1..=size).map(popup).collect());
        let now = 1_800_000_000;
        for returning in [false, true] {
            let name = if returning { "returning" } else { "fresh" };
            // A returning user has state for every popup: each cooling down.
            let seen: Vec<(u32, Seen)> = if returning {
                let s = Seen {
                    next_eligible: now + 60,
                    shows: 1,
                    last_action: Action::Shown,
                    ..Seen::default()
                };
                (1..=size).map(|id| (id, s)).collect()
            } else {
                Vec::new()
            };
            let mut n = 0usize;
            group.bench_with_input(BenchmarkId::new(name, size), &catalog, |b, catalog| {
                b.iter(|| {
                    n = (n + 1) % viewers.len();
                    catalog
                        .choose(black_box(&viewers[n]), now, &seen, |_| 0)
                        .map(|p| p.id)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, choose);
criterion_main!(benches);
