//! Tuning of glibc's `malloc` for the strata binary, decided and measured in ADR 0013.
//!
//! The scan reads a row group's selected pages into fresh buffers of a few hundred KB. glibc
//! serves every allocation above its mmap threshold (128 KB at start) with a new `mmap`, so each
//! buffer costs a page fault per 4 KB touched and a `munmap` when freed; on selective queries
//! that was 6–13 % of the time. Raising the mmap threshold keeps such buffers in the heap, where
//! freed memory is reused, and raising the trim threshold keeps the heap from being returned to
//! the OS (and faulted back in) after every query.
//!
//! A server that ingests keeps a small steady state but peaks during background merges; with the
//! trim threshold raised, the merge's freed buffers would stay resident, so the server returns
//! them after each merge ([`release_free_memory`]).
//!
//! Invariant: [`tune`] runs once, first thing in `main`, before any thread is started. On other
//! platforms and C libraries it does nothing.

/// Allocations below this size come from the heap (glibc's default starts at 128 KB and grows
/// up to 32 MB on 64-bit as large blocks are freed; fixing it at the top of that range makes the
/// first queries of a process behave like the later ones).
pub const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;

/// Free memory at the top of the heap is returned to the OS only above this size.
pub const TRIM_THRESHOLD_BYTES: i32 = 32 << 20;

/// Applies the thresholds above. Returns false when the C library refused one of them (the
/// process then runs with glibc's defaults, which is slower, never wrong).
pub fn tune() -> bool {
    imp::tune()
}

/// Returns the allocator's free memory to the OS, in every arena: for a long-running process
/// after work that peaks far above its steady state (a server's background merge), which
/// otherwise stays resident up to the trim threshold per arena. Costs a walk of the free lists
/// and the page faults of reusing that memory later, so it is for occasional calls only.
pub fn release_free_memory() {
    imp::release_free_memory()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    #[allow(unsafe_code)]
    pub fn release_free_memory() {
        // SAFETY: `malloc_trim` only returns free memory to the OS; glibc documents it as
        // callable at any time from any thread (it takes each arena's lock).
        unsafe {
            libc::malloc_trim(0);
        }
    }

    #[allow(unsafe_code)]
    pub fn tune() -> bool {
        // SAFETY: `mallopt` only sets allocator parameters; glibc documents it as callable at
        // any time, and it is called before other threads exist (see the module invariant).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, super::MMAP_THRESHOLD_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, super::TRIM_THRESHOLD_BYTES) == 1
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub fn tune() -> bool {
        true
    }

    pub fn release_free_memory() {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn glibc_accepts_the_thresholds() {
        assert!(super::tune());
    }
}
