/*
 * End-to-end test of libshoal through its C header. Usage: test_capi DIR (an empty, writable
 * directory). Prints "capi: ok" and exits 0 on success; prints what failed and exits 1
 * otherwise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal.h"

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "capi: FAILED at %s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        return 1;                                                                              \
    } while (0)

/* Fails unless `call` (an int or int64_t expression) returns `want`. */
#define EXPECT(call, want)                                                                     \
    do {                                                                                       \
        int64_t got_ = (int64_t)(call);                                                        \
        int64_t want_ = (int64_t)(want);                                                       \
        if (got_ != want_)                                                                     \
            FAIL("%s returned %lld (%s), expected %lld", #call, (long long)got_,               \
                 got_ < 0 ? shoal_store_strerror((int)got_) : "no error", (long long)want_);   \
    } while (0)

#define FIRST_LEN 10000
#define SECOND_LEN 5000
#define TOTAL_LEN (FIRST_LEN + SECOND_LEN)

static unsigned char pattern(size_t i) {
    return (unsigned char)((i * 31u + 7u) ^ (i >> 8));
}

static int test_block(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/store", dir) >= (int)sizeof path)
        FAIL("path too long");

    EXPECT(shoal_store_mkfs(path, "block", 64u << 20), 0);

    shoal_store_t *st = NULL;
    EXPECT(shoal_store_mount(path, &st), 0);
    if (st == NULL)
        FAIL("mount returned 0 but no handle");

    EXPECT(shoal_store_create_collection(st, "c"), 0);
    EXPECT(shoal_store_create(st, "c", "o"), 0);

    static unsigned char wbuf[TOTAL_LEN];
    static unsigned char rbuf[TOTAL_LEN];
    for (size_t i = 0; i < TOTAL_LEN; i++)
        wbuf[i] = pattern(i);
    EXPECT(shoal_store_write(st, "c", "o", wbuf, FIRST_LEN, 0, 1), FIRST_LEN);
    EXPECT(shoal_store_write(st, "c", "o", wbuf + FIRST_LEN, SECOND_LEN, FIRST_LEN, 0), SECOND_LEN);

    memset(rbuf, 0, sizeof rbuf);
    EXPECT(shoal_store_read(st, "c", "o", rbuf, TOTAL_LEN, 0), TOTAL_LEN);
    if (memcmp(rbuf, wbuf, TOTAL_LEN) != 0)
        FAIL("data read back differs from data written");
    /* At the end: no bytes; past the end: the library's -EINVAL. */
    EXPECT(shoal_store_read(st, "c", "o", rbuf, 10, TOTAL_LEN), 0);
    EXPECT(shoal_store_read(st, "c", "o", rbuf, 10, TOTAL_LEN + 1), -EINVAL);

    uint64_t size = 0;
    int64_t mtime = 0;
    EXPECT(shoal_store_status(st, "c", "o", &size, &mtime), 0);
    if (size != TOTAL_LEN)
        FAIL("status size %llu, expected %d", (unsigned long long)size, TOTAL_LEN);
    if (mtime <= 0)
        FAIL("status mtime %lld, expected > 0", (long long)mtime);
    EXPECT(shoal_store_status(st, "c", "o", NULL, NULL), 0);

    EXPECT(shoal_store_read(st, "c", "missing", rbuf, 10, 0), -ENOENT);
    const char *msg = shoal_store_strerror(-ENOENT);
    if (msg == NULL || msg[0] == '\0')
        FAIL("shoal_store_strerror(-ENOENT) is empty");
    if (strcmp(msg, shoal_store_strerror(ENOENT)) != 0)
        FAIL("shoal_store_strerror differs for -ENOENT and ENOENT");

    static int dummy;
    shoal_store_t *second = (shoal_store_t *)(void *)&dummy; /* reset to NULL on failure */
    EXPECT(shoal_store_mount(path, &second), -EBUSY);
    if (second != NULL)
        FAIL("failed mount left *out non-NULL");
    EXPECT(shoal_store_mkfs(path, "block", 64u << 20), -EEXIST);

    EXPECT(shoal_store_delete(st, "c", "o"), 0);
    EXPECT(shoal_store_umount(st), 0);

    st = NULL;
    EXPECT(shoal_store_mount(path, &st), 0);
    EXPECT(shoal_store_status(st, "c", "o", &size, &mtime), -ENOENT);
    EXPECT(shoal_store_umount(st), 0);
    return 0;
}

static int test_posix(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/pstore", dir) >= (int)sizeof path)
        FAIL("path too long");

    EXPECT(shoal_store_mkfs(path, "posix", 64u << 20), 0);
    shoal_store_t *st = NULL;
    EXPECT(shoal_store_mount(path, &st), 0);
    EXPECT(shoal_store_create_collection(st, "c"), 0);

    const char text[] = "hello, shoal";
    char back[sizeof text];
    EXPECT(shoal_store_write(st, "c", "greeting", text, sizeof text, 0, 0), sizeof text);
    EXPECT(shoal_store_write(st, "c", "other", text, 5, 0, 1), 5);
    memset(back, 0, sizeof back);
    EXPECT(shoal_store_read(st, "c", "greeting", back, sizeof back, 0), sizeof text);
    if (memcmp(back, text, sizeof text) != 0)
        FAIL("posix data read back differs from data written");
    EXPECT(shoal_store_umount(st), 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 1;
    }
    if (test_block(argv[1]) != 0)
        return 1;
    if (test_posix(argv[1]) != 0)
        return 1;
    printf("capi: ok\n");
    return 0;
}
