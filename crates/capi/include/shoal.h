/*
 * shoal.h - C API of the standalone Shoal object store (libshoal).
 *
 * A store is a directory holding collections, each holding named objects of up to 4 GiB of
 * byte data. Link with -lshoal.
 *
 * Conventions (as in librados):
 *  - Every function returns 0, or a byte count for shoal_store_write and shoal_store_read, on
 *    success and a NEGATIVE errno on failure. shoal_store_strerror describes an errno.
 *  - Strings are NUL-terminated UTF-8. A NULL pointer where a string or handle is required,
 *    or a string that is not UTF-8, gives -EINVAL.
 *  - Collection and object names are 1 to 255 bytes; a collection name may not contain '/'.
 *    An invalid name gives -EINVAL, or -ENAMETOOLONG if it is too long.
 *  - Errors common to the calls that name an object: -ENOENT if the collection or the object
 *    does not exist, -EIO (or the errno of the failed system call) on an I/O error.
 *  - An internal error (a bug) never crashes the caller: the call returns -EIO.
 *
 * Threads: a mounted store may be used from several threads at once. Only shoal_store_umount
 * must not run concurrently with any other call on the same handle.
 *
 * Durability: each mutating call is atomic: after any crash either all of it is visible or none
 * of it. shoal_store_create_collection, shoal_store_create, shoal_store_delete and
 * shoal_store_write with sync != 0 are on stable storage when they return (they survive a
 * power failure), and so is every write made before them. shoal_store_write with sync == 0 is
 * visible to readers and survives a crash of the process when it returns; it becomes durable
 * at the next durable call on the same store or at shoal_store_umount.
 */
#ifndef SHOAL_H
#define SHOAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A mounted store. Opaque; obtained from shoal_store_mount, freed by shoal_store_umount. */
typedef struct shoal_store shoal_store_t;

/*
 * Creates a new, empty store in directory `path` (created if missing) and leaves it unmounted.
 * `backend` is "block" (data in a file `path`/block preallocated to `size_bytes` bytes, at
 * least 16 MiB; metadata in an embedded key-value store) or "posix" (one file per object;
 * `size_bytes` is only the capacity the store reports, the file system's free space is the
 * real limit). The empty store is durable when the call returns.
 *
 * Returns 0, or -EEXIST if the directory is not empty (an existing store, mounted or not, is
 * never overwritten), -EINVAL for an unknown backend (including "mem", which has no
 * directory) or if `path` exists and is not a directory, -ENOSPC if `size_bytes` is too small
 * for a block store or the file system cannot hold it.
 */
int shoal_store_mkfs(const char *path, const char *backend, uint64_t size_bytes);

/*
 * Mounts the store in directory `path` exclusively and sets *out to its handle. Mounting
 * replays whatever a crash left to recover.
 *
 * On failure *out is set to NULL (unless `out` itself is NULL). Returns 0, or -ENOENT if
 * `path` does not exist, -EUCLEAN if it is not a Shoal store or its metadata is corrupt,
 * -EBUSY if the store is already mounted, by this process or another.
 */
int shoal_store_mount(const char *path, shoal_store_t **out);

/*
 * Makes every write durable, unmounts the store and frees the handle. The handle is invalid
 * after this call whatever it returns.
 *
 * Returns 0, -EINVAL if `store` is NULL, or a negative errno if the final flush failed (then
 * writes made with sync == 0 may not be durable; the store is still unmounted and recovers at
 * its next mount).
 */
int shoal_store_umount(shoal_store_t *store);

/*
 * Creates an empty collection. Durable when it returns.
 *
 * Returns 0, or -EEXIST if the collection exists.
 */
int shoal_store_create_collection(shoal_store_t *store, const char *coll);

/*
 * Creates an empty object in collection `coll`; if the object exists only its mtime is
 * updated. Durable when it returns.
 *
 * Returns 0, or -ENOENT if the collection does not exist.
 */
int shoal_store_create(shoal_store_t *store, const char *coll, const char *obj);

/*
 * Removes an object with all its data. Durable when it returns.
 *
 * Returns 0, or -ENOENT if the collection or the object does not exist.
 */
int shoal_store_delete(shoal_store_t *store, const char *coll, const char *obj);

/*
 * Writes `len` bytes from `buf` at byte offset `off` of an object, creating the object if it
 * does not exist and extending it if the write ends past its size (a gap reads as zeros).
 * `buf` may be NULL only when `len` is 0.
 *
 * With sync != 0 the write is on stable storage when the call returns, together with every
 * earlier write to the store. With sync == 0 it is visible to readers and survives a crash of
 * the process when the call returns, and becomes durable at the next durable call (a write
 * with sync != 0, create, delete or create_collection) or at shoal_store_umount.
 *
 * Returns the number of bytes written (`len`), or -ENOENT if the collection does not exist,
 * -EFBIG if `off + len` exceeds the maximum object size (4 GiB), -ENOSPC if the store is full.
 * On failure nothing of the write is applied; a failure of a sync write while flushing may
 * leave the write applied but not known to be durable.
 */
int64_t shoal_store_write(shoal_store_t *store, const char *coll, const char *obj,
                          const void *buf, uint64_t len, uint64_t off, int sync);

/*
 * Reads up to `len` bytes at byte offset `off` of an object into `buf`, which must have room
 * for `len` bytes (it may be NULL only when `len` is 0).
 *
 * Returns the number of bytes read, fewer than `len` only when the object ends first and 0
 * when `off` equals the object's size. An `off` PAST the object's size is an error: -EINVAL.
 * Returns -ENOENT if the collection or the object does not exist, and -EBADMSG if the stored
 * data fails its checksum (corrupt data is never returned).
 */
int64_t shoal_store_read(shoal_store_t *store, const char *coll, const char *obj,
                         void *buf, uint64_t len, uint64_t off);

/*
 * Reports an object's size in bytes through `size_bytes` and the time of its last change, in
 * nanoseconds since the Unix epoch, through `mtime_ns`. Either pointer may be NULL to skip it.
 *
 * Returns 0, or -ENOENT if the collection or the object does not exist.
 */
int shoal_store_status(shoal_store_t *store, const char *coll, const char *obj,
                       uint64_t *size_bytes, int64_t *mtime_ns);

/*
 * Describes an errno, given negative (as returned by this API) or positive, with a static,
 * NUL-terminated, never NULL string. Thread-safe, unlike strerror(3). Errnos the library does
 * not know are described as "unknown error".
 */
const char *shoal_store_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_H */
