//! `data_dir/refused.jsonl` as `hotpath db refused --replay` reads it: an operator edits it by
//! hand, so any text may be there. Every line is an entry or a bad line, never both; an entry
//! whose row fits its table becomes one row that writes back to the same JSON.
#![no_main]

use hotpath_fuzz::SERVICES;
use hotpath_store::queue::tables;
use hotpath_store::refused::parse;
use hotpath_store::Batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tables = tables(&SERVICES);
    let (entries, bad) = parse(text);
    assert!(entries.len() + bad.len() <= text.lines().count());
    for e in entries {
        if let Ok(b) = Batch::from_row_json(&tables, &e.table, &e.row) {
            assert_eq!(b.rows(), 1);
            let (table, row) = b.row_json(0);
            assert_eq!(table, e.table);
            let again = Batch::from_row_json(&tables, table, &row).expect("written back, read");
            assert_eq!(again, b);
        }
    }
});
