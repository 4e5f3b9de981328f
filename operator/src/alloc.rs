//! mimalloc's run-time options, for the binaries that allocate with it (`muster-operator`,
//! and the operator benchmark's test control plane). Through mimalloc's own C API, which the
//! `mimalloc` crate links: the crate exposes options only with its `extended` feature, which
//! needs one more crate.

use std::ffi::{c_int, c_long};

unsafe extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
}

/// The options used here, as numbered by mimalloc.h's `mi_option_e` (v2 and v3 alike).
#[derive(Clone, Copy, Debug)]
#[repr(i32)]
pub enum MiOption {
    /// `mi_option_arena_eager_commit`: commit an arena's memory when it is reserved (1), as
    /// it is used (0), or only where the system overcommits (2, the default).
    ArenaEagerCommit = 4,
    /// `mi_option_purge_delay`: hand freed pages back to the system after this many
    /// milliseconds (0: at once; -1: never; 10 by default).
    PurgeDelay = 15,
}

/// Sets `option`. It allocates nothing, so it may run before `main` (an ELF constructor).
pub fn set(option: MiOption, value: c_long) {
    // SAFETY: mi_option_set only stores the value; mimalloc reads it where it applies.
    unsafe { mi_option_set(option as c_int, value) }
}
