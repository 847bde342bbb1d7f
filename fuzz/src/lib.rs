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
