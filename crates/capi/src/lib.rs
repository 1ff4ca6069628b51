//! `libshoal`: the C ABI of the standalone Shoal object store.
//!
//! The declarations and the contract of every function are in `include/shoal.h`; this file
//! implements them over [`shoal_store`]. The conventions are librados's: a function returns 0
//! (or a byte count) on success and a negative errno on failure, taken from
//! [`StoreError::errno`]. Null pointers and strings that are not UTF-8 give `-EINVAL`. No
//! panic ever unwinds into C: every entry point catches it and returns `-EIO`.
//!
//! A mounted store is an opaque `shoal_store_t *` (a boxed [`ShoalStore`]). The store itself is
//! thread-safe, so one handle may be used from several threads at once, except that
//! `shoal_store_umount` must not race with any other call on the same handle.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use shoal_store::{BackendKind, Durability, MkfsOptions, Store, StoreError, Transaction};

/// A mounted store behind a `shoal_store_t *`.
pub struct ShoalStore {
    store: Store,
    /// Set when a write with `sync == 0` has been committed since the last full sync. Only the
    /// `posix` backend needs it: its `Sync` commits fsync just the files they touch, so the C
    /// API's promise that a sync call also makes earlier unsynced writes durable needs an extra
    /// `sync()` there. The `block` engine's device flush already covers every earlier commit.
    unsynced: AtomicBool,
}

impl ShoalStore {
    fn new(store: Store) -> Self {
        Self { store, unsynced: AtomicBool::new(false) }
    }

    /// Commits `txn` durably, together with every earlier unsynced write.
    fn commit_sync(&self, txn: Transaction) -> Result<(), StoreError> {
        self.store.commit(txn, Durability::Sync)?;
        if self.store.backend() != BackendKind::Posix || !self.unsynced.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.store.sync().inspect_err(|_| self.unsynced.store(true, Ordering::Release))
    }

    /// Commits `txn` visibly but without waiting for stable storage.
    fn commit_batch(&self, txn: Transaction) -> Result<(), StoreError> {
        self.store.commit(txn, Durability::Batch)?;
        self.unsynced.store(true, Ordering::Release);
        Ok(())
    }
}

/// Why a call failed, before it becomes a negative errno.
enum Failure {
    /// A bad argument from the caller (null pointer, non-UTF-8 string, out-of-range length).
    Arg,
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl Failure {
    fn neg_errno(&self) -> i32 {
        match self {
            Self::Arg => -libc::EINVAL,
            Self::Store(e) => {
                let n = e.errno();
                if n > 0 { -n } else { -libc::EIO }
            }
        }
    }
}

/// Runs `f`, turning a failure into a negative errno and a panic into `-EIO`.
fn guard<T>(f: impl FnOnce() -> Result<T, Failure>, ok: impl FnOnce(T) -> i64) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => i64::from(e.neg_errno()),
        Err(_) => i64::from(-libc::EIO),
    }
}

/// [`guard`] for the functions that return `int` 0 on success.
fn guard_int(f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    // Every value `guard` returns here is 0 or a negated errno, both of which fit in an int.
    guard(f, |()| 0) as c_int
}

/// Borrows a C string as UTF-8.
///
/// # Safety
///
/// `p` must be null or point to a NUL-terminated string that stays valid and unmodified for
/// the lifetime `'a`.
unsafe fn str_arg<'a>(p: *const c_char) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::Arg);
    }
    // SAFETY: non-null, and the caller guarantees a valid NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Failure::Arg)
}

/// Borrows the store behind a handle.
///
/// # Safety
///
/// `p` must be null or a handle returned by [`shoal_store_mount`] and not yet unmounted.
unsafe fn store_arg<'a>(p: *mut ShoalStore) -> Result<&'a ShoalStore, Failure> {
    // SAFETY: the caller guarantees that a non-null `p` is a live handle.
    unsafe { p.as_ref() }.ok_or(Failure::Arg)
}

/// Creates a new, empty store in directory `path` and leaves it unmounted.
///
/// # Safety
///
/// `path` and `backend` must each be null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_mkfs(path: *const c_char, backend: *const c_char, size_bytes: u64) -> c_int {
    guard_int(|| {
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { str_arg(path) }?;
        // SAFETY: forwarded from this function's contract.
        let backend: BackendKind = unsafe { str_arg(backend) }?.parse()?;
        let opts = MkfsOptions { backend, size_bytes, device: None, force: false };
        // Dropping the returned store unmounts it (checkpointing and releasing the lock).
        drop(shoal_store::mkfs(Path::new(path), &opts)?);
        Ok(())
    })
}

/// Mounts the store in directory `path` and stores a new handle in `*out`.
///
/// # Safety
///
/// `path` must be null or a valid NUL-terminated string; `out` must be null or valid for a
/// write of one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_mount(path: *const c_char, out: *mut *mut ShoalStore) -> c_int {
    guard_int(|| {
        if out.is_null() {
            return Err(Failure::Arg);
        }
        // SAFETY: `out` is non-null and the caller guarantees it is writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { str_arg(path) }?;
        let store = shoal_store::open(Path::new(path))?;
        let handle = Box::into_raw(Box::new(ShoalStore::new(store)));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Unmounts the store and frees the handle, which is invalid afterwards whatever the result.
///
/// # Safety
///
/// `store` must be null or a handle returned by [`shoal_store_mount`] that has not been
/// unmounted, and no other call may be using it concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_umount(store: *mut ShoalStore) -> c_int {
    guard_int(|| {
        if store.is_null() {
            return Err(Failure::Arg);
        }
        // SAFETY: the caller hands over ownership of a live handle made by `Box::into_raw`.
        let handle = unsafe { Box::from_raw(store) };
        // Make everything durable first so that a failure can be reported; dropping the store
        // then checkpoints (the block engine) and releases the mount lock. The handle is freed
        // even if the flush fails, since the caller may not use it again.
        let flushed = handle.store.flush();
        drop(handle);
        flushed?;
        Ok(())
    })
}

/// Creates an empty collection, durably.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` must be null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_create_collection(store: *mut ShoalStore, coll: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: forwarded from this function's contract.
        let (s, coll) = unsafe { (store_arg(store)?, str_arg(coll)?) };
        let mut txn = Transaction::new();
        txn.create_collection(coll);
        s.commit_sync(txn)?;
        Ok(())
    })
}

/// Creates an empty object if it does not exist, else updates its mtime; durably.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` and `obj` must each be null or a valid
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_create(store: *mut ShoalStore, coll: *const c_char, obj: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: forwarded from this function's contract.
        let (s, coll, obj) = unsafe { (store_arg(store)?, str_arg(coll)?, str_arg(obj)?) };
        let mut txn = Transaction::new();
        txn.touch(coll, obj);
        s.commit_sync(txn)?;
        Ok(())
    })
}

/// Removes an object with all its data, durably.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` and `obj` must each be null or a valid
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_delete(store: *mut ShoalStore, coll: *const c_char, obj: *const c_char) -> c_int {
    guard_int(|| {
        // SAFETY: forwarded from this function's contract.
        let (s, coll, obj) = unsafe { (store_arg(store)?, str_arg(coll)?, str_arg(obj)?) };
        let mut txn = Transaction::new();
        txn.remove(coll, obj);
        s.commit_sync(txn)?;
        Ok(())
    })
}

/// Writes `len` bytes from `buf` at offset `off` of an object, creating it if needed.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` and `obj` must each be null or a valid
/// NUL-terminated string; `buf` must be valid for reads of `len` bytes (it may be null only
/// when `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_write(
    store: *mut ShoalStore,
    coll: *const c_char,
    obj: *const c_char,
    buf: *const c_void,
    len: u64,
    off: u64,
    sync: c_int,
) -> i64 {
    guard(
        || {
            // SAFETY: forwarded from this function's contract.
            let (s, coll, obj) = unsafe { (store_arg(store)?, str_arg(coll)?, str_arg(obj)?) };
            // Refuse an impossible extent before copying the caller's buffer, so that a huge
            // `len` costs neither memory nor a read past the buffer's end.
            shoal_store::names::check_extent(coll, obj, off, len)?;
            let n = usize::try_from(len).map_err(|_| Failure::Arg)?;
            let data = if n == 0 {
                Vec::new()
            } else {
                if buf.is_null() {
                    return Err(Failure::Arg);
                }
                // SAFETY: `buf` is non-null and the caller guarantees `len` readable bytes;
                // `len` is at most the maximum object size, far below `isize::MAX`.
                unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }.to_vec()
            };
            let mut txn = Transaction::new();
            txn.write(coll, obj, off, data);
            if sync != 0 {
                s.commit_sync(txn)?
            } else {
                s.commit_batch(txn)?
            }
            Ok(len)
        },
        // `len` passed `check_extent`, so it is at most 4 GiB.
        |n| n as i64,
    )
}

/// Reads up to `len` bytes at offset `off` of an object into `buf`.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` and `obj` must each be null or a valid
/// NUL-terminated string; `buf` must be valid for writes of `len` bytes (it may be null only
/// when `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_read(
    store: *mut ShoalStore,
    coll: *const c_char,
    obj: *const c_char,
    buf: *mut c_void,
    len: u64,
    off: u64,
) -> i64 {
    guard(
        || {
            // SAFETY: forwarded from this function's contract.
            let (s, coll, obj) = unsafe { (store_arg(store)?, str_arg(coll)?, str_arg(obj)?) };
            if buf.is_null() && len != 0 {
                return Err(Failure::Arg);
            }
            let data = s.store.read(coll, obj, off, len)?;
            // The store never returns more than asked for; check anyway rather than overrun.
            if data.len() as u64 > len {
                return Err(Failure::Store(StoreError::Corrupt(format!(
                    "read of {coll}/{obj} returned {} bytes, {len} asked for",
                    data.len()
                ))));
            }
            if !data.is_empty() {
                // SAFETY: `buf` is non-null (`len` >= `data.len()` > 0) and the caller
                // guarantees `len` writable bytes; `data` is a separate allocation.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
            }
            Ok(data.len())
        },
        // An object holds at most 4 GiB, so the count fits.
        |n| n as i64,
    )
}

/// Reports an object's size and modification time.
///
/// # Safety
///
/// `store` must be null or a live handle; `coll` and `obj` must each be null or a valid
/// NUL-terminated string; `size_bytes` and `mtime_ns` must each be null or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shoal_store_status(
    store: *mut ShoalStore,
    coll: *const c_char,
    obj: *const c_char,
    size_bytes: *mut u64,
    mtime_ns: *mut i64,
) -> c_int {
    guard_int(|| {
        // SAFETY: forwarded from this function's contract.
        let (s, coll, obj) = unsafe { (store_arg(store)?, str_arg(coll)?, str_arg(obj)?) };
        let st = s.store.stat(coll, obj)?;
        if !size_bytes.is_null() {
            // SAFETY: non-null, and the caller guarantees it is writable.
            unsafe { size_bytes.write(st.size_bytes) };
        }
        if !mtime_ns.is_null() {
            // SAFETY: as above.
            unsafe { mtime_ns.write(st.mtime_ns) };
        }
        Ok(())
    })
}

/// Describes an errno (negative or positive) with a static NUL-terminated string.
///
/// Unlike `strerror(3)` this is thread-safe: the strings come from a fixed table covering every
/// errno the library returns by itself, plus common ones the operating system may pass through.
#[unsafe(no_mangle)]
pub extern "C" fn shoal_store_strerror(err: c_int) -> *const c_char {
    let msg: &'static CStr = match catch_unwind(|| describe(err)) {
        Ok(m) => m,
        Err(_) => c"unknown error",
    };
    msg.as_ptr()
}

fn describe(err: c_int) -> &'static CStr {
    let Ok(n) = c_int::try_from(err.unsigned_abs()) else {
        return c"unknown error";
    };
    match n {
        0 => c"success",
        libc::ENOENT => c"no such store, collection or object",
        libc::EEXIST => c"already exists",
        libc::EBUSY => c"store is in use (mounted elsewhere)",
        libc::ENOSPC => c"no space left on the store",
        libc::EINVAL => c"invalid argument",
        libc::ENAMETOOLONG => c"name too long",
        libc::ENOTEMPTY => c"collection is not empty",
        libc::EFBIG => c"object would exceed the maximum object size",
        libc::EBADMSG => c"checksum mismatch: stored data is corrupt",
        libc::EUCLEAN => c"not a Shoal store, or store metadata is corrupt",
        libc::EIO => c"input/output error",
        // Passed through from the operating system by I/O errors.
        libc::EPERM => c"operation not permitted",
        libc::EACCES => c"permission denied",
        libc::EROFS => c"read-only file system",
        libc::ENOTDIR => c"not a directory",
        libc::EISDIR => c"is a directory",
        libc::ENOMEM => c"out of memory",
        libc::EDQUOT => c"disk quota exceeded",
        libc::EAGAIN => c"resource temporarily unavailable",
        _ => c"unknown error",
    }
}
