//! The binary's memory allocator: jemalloc, configured for buffers that come and go by the
//! megabyte (decision 0029).
//!
//! Every daemon is this one binary, so the choice holds for OSDs, monitors, gateways and NBD
//! servers alike. glibc's malloc served them before, with two costs measured on this project's
//! loads: a gateway's threads shared one arena (more arenas kept freed 4 MiB buffers per thread
//! and went past the gateway's memory limit), and that arena's lock was a tenth of a gateway's
//! CPU under small PUTs (futex waits and wakes); and large buffers had to be kept out of `mmap`
//! by hand (`M_MMAP_THRESHOLD`), or every 4 MiB message cost the kernel 1,024 page faults and
//! zeroing. jemalloc serves small sizes from per-thread caches without a lock, keeps freed large
//! extents for reuse and returns them to the kernel after a delay, from a background thread.

use tikv_jemallocator::Jemalloc;

#[global_allocator]
static GLOBAL: Jemalloc = Jemalloc;

/// jemalloc's settings, read once when it starts (before `main`):
/// - `background_thread`: freed memory is returned to the kernel by jemalloc's own thread, not
///   in the middle of a request;
/// - `dirty_decay_ms:2000`: freed pages stay for reuse for about two seconds (a burst of 4 MiB
///   buffers reuses them without page faults; an idle process shrinks back soon after);
/// - `muzzy_decay_ms:0`: pages past that delay go back to the kernel at once (`MADV_DONTNEED`),
///   so the resident size a monitor reports is the memory the process holds.
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8; 60] = b"background_thread:true,dirty_decay_ms:2000,muzzy_decay_ms:0\0";

/// Lets arena 0 keep freed pages for reuse about `decay_ms` (instead of the process-wide two
/// seconds) before they go back to the kernel.
///
/// For a process with a memory limit: the pages its buffers freed count in its RSS until then.
/// Under 64 concurrent 4 MiB PUTs a gateway peaked at 233–257 MiB with two seconds and 204–223
/// MiB with half a second, at the same CPU per byte; with no delay at all every reused 4 MiB
/// buffer was faulted in again and the gateway spent 45% more CPU (docs/BENCHMARKS.md).
pub fn set_first_arena_decay_ms(decay_ms: isize) {
    let decay_ms: libc::ssize_t = decay_ms;
    set(c"arena.0.dirty_decay_ms", decay_ms);
}

/// Serves the calling thread's allocations from arena 0 from now on.
///
/// jemalloc spreads threads over several arenas (four per core), and each arena keeps its own
/// freed extents until they decay: a gateway whose runtime threads each freed 4 MiB chunks would
/// hold several arenas' worth of them, as glibc's arenas did (see `gateway_cmd`). Small
/// allocations come from the thread's cache either way, so sharing one arena costs a lock only
/// for large ones.
pub fn use_first_arena() {
    let arena: libc::c_uint = 0;
    set(c"thread.arena", arena);
}

/// Writes jemalloc setting `name`, whose C type is `T`. Logs and carries on if jemalloc refuses:
/// the process then uses more memory, never less safely.
fn set<T: Copy>(name: &std::ffi::CStr, value: T) {
    let mut value = value;
    // SAFETY: `name` is NUL-terminated, `value` is the setting's C type (the callers above pass
    // the type jemalloc documents for it) and lives across the call; nothing is read back (null
    // old pointer and length).
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut value).cast(),
            std::mem::size_of::<T>(),
        )
    };
    if rc != 0 {
        tracing::warn!(errno = rc, setting = ?name, "jemalloc refused a setting");
    }
}
