#include "io.h"

#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <libdeflate.h>
#include <zlib.h>

/* The size a gzip file says it inflates to (its last member's ISIZE, modulo
 * 2^32): a first guess for the output buffer, bounded by what deflate can
 * reach (about 1032:1) and by IO_MAX_INPUT. */
static size_t inflated_hint(const char *data, size_t n, size_t limit) {
    const unsigned char *t = (const unsigned char *)data + n - 4;
    size_t isize = n >= 18 ? ((size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24) : 0;
    size_t most = n > limit / 1032 ? limit : n * 1032;
    return (isize < most ? isize : most) + 1;
}

size_t io_inflate_limit(size_t n) {
    size_t lim = n > IO_MAX_INPUT / IO_MAX_INFLATE_RATIO ? IO_MAX_INPUT : n * IO_MAX_INFLATE_RATIO;
    return lim < IO_INFLATE_FREE ? IO_INFLATE_FREE : lim;
}

/* The common case in one call per member: libdeflate inflates whole buffers
 * about three times as fast as zlib's streaming inflate, into the buffer the
 * trailer's ISIZE sized (exact for a file of one member). NULL when it cannot
 * finish there — corrupt or truncated data, trailing bytes, members that
 * outgrow the hint — and zlib then reads the input again and decides,
 * saying exactly what is wrong; *over is set instead when the data inflates
 * past the budget (the buffer held limit + 1 bytes and more was coming: zlib
 * would refuse it at the same point). */
static char *gunzip_whole(const char *data, size_t n, size_t limit, size_t *len, bool *over) {
    *over = false;
    struct libdeflate_decompressor *dc = libdeflate_alloc_decompressor();
    if (!dc) return NULL;
    size_t cap = inflated_hint(data, n, limit), used = 0, at = 0;
    char *out = xmalloc_large(cap);
    while (at < n) {
        size_t took = 0, made = 0;
        enum libdeflate_result rc =
            libdeflate_gzip_decompress_ex(dc, data + at, n - at, out + used, cap - used - 1, &took, &made);
        if (rc != LIBDEFLATE_SUCCESS || took == 0) {
            *over = rc == LIBDEFLATE_INSUFFICIENT_SPACE && cap - 1 >= limit;
            libdeflate_free_decompressor(dc);
            free(out);
            return NULL;
        }
        at += took;
        used += made;
    }
    libdeflate_free_decompressor(dc);
    out[used] = 0;
    *len = used;
    return out;
}

static void refuse_bomb(diag *d, size_t limit) {
    if (limit == IO_MAX_INPUT) diag_plain(d, "gzip input inflates to more than %zu bytes (the input limit)", limit);
    else diag_plain(d, "gzip input inflates to more than %zu bytes (%zu times its compressed size): refused as a "
                       "likely gzip bomb", limit, IO_MAX_INFLATE_RATIO);
}

char *io_gunzip(const char *data, size_t n, size_t *len, diag *d) {
    size_t limit = io_inflate_limit(n);
    bool over;
    char *fast = gunzip_whole(data, n, limit, len, &over);
    if (fast) return fast;
    if (over) {
        refuse_bomb(d, limit);
        return NULL;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        diag_plain(d, "cannot initialise zlib");
        return NULL;
    }
    /* Inflates straight into the result, grown when the hint was short, never
     * beyond the budget (+ 1 for the NUL): a gzip bomb is refused at the
     * budget, not after filling memory. */
    size_t cap = inflated_hint(data, n, limit), used = 0;
    char *out = xmalloc_large(cap);
    z.next_in = (Bytef *)data;
    size_t left = n;
    int rc = Z_OK;
    for (;;) {
        if (z.avail_in == 0 && left) {
            uInt take = left > (1u << 30) ? (1u << 30) : (uInt)left;
            z.avail_in = take;
            left -= take;
        }
        if (used + 1 >= cap) {
            size_t want = cap * 2 > limit + 2 ? limit + 2 : cap * 2;
            if (want < used + 2) want = used + 2;
            out = xrealloc(out, want);
            cap = want;
        }
        size_t room = cap - used - 1;
        z.next_out = (Bytef *)out + used;
        z.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
        uInt before = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        used += before - z.avail_out;
        if (used > limit) {
            refuse_bomb(d, limit);
            goto fail;
        }
        if (rc == Z_STREAM_END) {
            /* Another gzip member may follow (files made with cat a.gz b.gz). */
            if (z.avail_in == 0 && left == 0) break;
            if (inflateReset(&z) != Z_OK) goto corrupt;
            continue;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0 && left == 0) {
            diag_binary(d, n, "", "gzip stream is truncated");
            goto fail;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) goto corrupt;
    }
    inflateEnd(&z);
    out[used] = 0;
    *len = used;
    return out;
corrupt:
    diag_binary(d, (size_t)z.total_in, "", "corrupt gzip data (%s)", z.msg ? z.msg : "inflate failed");
fail:
    inflateEnd(&z);
    free(out);
    return NULL;
}

char *io_read_file(const char *path, size_t *len, bool *was_gzip, diag *d) {
    return io_read_file_sha256(path, len, was_gzip, NULL, d);
}

/* Below this an input is read: mapping costs more than copying it. */
enum { MAP_MIN = 1 << 20 };

const char *io_map_file_sha256(const char *path, size_t *len, bool *was_gzip, uint8_t digest[32], size_t *mapped,
                               diag *d) {
    *mapped = 0;
#ifdef MAP_PRIVATE
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    long page = sysconf(_SC_PAGESIZE);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= MAP_MIN &&
        (uint64_t)st.st_size <= IO_MAX_INPUT && page > 0 && st.st_size % page != 0) {
        size_t n = (size_t)st.st_size;
        char *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED && !((unsigned char)p[0] == 0x1f && (unsigned char)p[1] == 0x8b)) {
            close(fd);
            madvise(p, n, MADV_SEQUENTIAL);
            /* The rest of the last page reads as zeros: the NUL after the text. */
            if (digest) sha256(p, n, digest);
            if (was_gzip) *was_gzip = false;
            *len = n;
            *mapped = n;
            return p;
        }
        if (p != MAP_FAILED) munmap(p, n); /* gzip: inflated from a read copy below */
    }
    if (fd >= 0) close(fd);
#endif
    return io_read_file_sha256(path, len, was_gzip, digest, d);
}

void io_unmap(const char *buf, size_t mapped) {
#ifdef MAP_PRIVATE
    if (mapped) {
        munmap((void *)buf, mapped);
        return;
    }
#endif
    free((void *)buf);
}

char *io_read_file_sha256(const char *path, size_t *len, bool *was_gzip, uint8_t digest[32], diag *d) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_plain(d, "cannot open: %s", strerror(errno));
        return NULL;
    }
    strbuf b;
    sb_init(&b);
    /* Read straight into the result, sized by the file when it has a size. */
    struct stat st;
    size_t room = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= IO_MAX_INPUT
                      ? (size_t)st.st_size + 1 : (1 << 16);
    b.s = xmalloc_large(room + 1);
    b.cap = room + 1;
    for (;;) {
        if (b.cap < b.len + 2) XGROW(b.s, b.cap, b.len + room + 1);
        size_t got = fread(b.s + b.len, 1, b.cap - b.len - 1, f);
        b.len += got;
        b.s[b.len] = 0;
        if (got == 0) break;
        room = 1 << 16;
        if (b.len > IO_MAX_INPUT) {
            diag_plain(d, "file is larger than %zu bytes", IO_MAX_INPUT);
            fclose(f);
            sb_free(&b);
            return NULL;
        }
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        diag_plain(d, "read error");
        sb_free(&b);
        return NULL;
    }
    if (!b.s) sb_put(&b, "", 0);
    if (digest) sha256(b.s, b.len, digest);
    bool gz = b.len >= 2 && (unsigned char)b.s[0] == 0x1f && (unsigned char)b.s[1] == 0x8b;
    if (was_gzip) *was_gzip = gz;
    if (!gz) {
        *len = b.len;
        return sb_take(&b);
    }
    char *out = io_gunzip(b.s, b.len, len, d);
    sb_free(&b);
    return out;
}

/* Writes all n bytes to fd, retrying short writes; false with errno set. */
static bool write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* The path a dangling symlink chain at path ends at (caller frees); NULL when
 * the chain is too long or unreadable. */
static char *dangling_target(const char *path) {
    char *cur = xstrdup(path);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0) return cur; /* the chain ends at a missing name */
        if (!S_ISLNK(st.st_mode)) break;      /* appeared meanwhile: not dangling */
        char buf[4096];
        ssize_t k = readlink(cur, buf, sizeof buf - 1);
        if (k <= 0) break;
        buf[k] = 0;
        strbuf next;
        sb_init(&next);
        const char *slash = strrchr(cur, '/');
        if (buf[0] != '/' && slash) sb_put(&next, cur, (size_t)(slash - cur + 1));
        sb_puts(&next, buf);
        free(cur);
        cur = sb_take(&next);
    }
    free(cur);
    return NULL;
}

/* Writes a new regular file at path: a temporary file made with O_EXCL under
 * an unpredictable name in path's folder, renamed over path once complete.
 * mode: the permission bits it gets. */
static bool write_replace(const char *path, const void *data, size_t n, mode_t mode, diag *d) {
    strbuf tmp;
    sb_init(&tmp);
    const char *slash = strrchr(path, '/');
    if (slash) sb_put(&tmp, path, (size_t)(slash - path + 1));
    sb_puts(&tmp, ".scalify-XXXXXX");
    int fd = mkostemp(tmp.s, O_CLOEXEC);
    if (fd < 0) {
        diag_plain(d, "cannot write %s: %s", path, strerror(errno));
        sb_free(&tmp);
        return false;
    }
    bool ok = fchmod(fd, mode) == 0 && write_all(fd, data, n);
    int err = errno;
    if (close(fd) != 0 && ok) ok = false, err = errno;
    if (ok && rename(tmp.s, path) != 0) ok = false, err = errno;
    if (!ok) {
        diag_plain(d, "cannot write %s: %s", path, strerror(err));
        unlink(tmp.s);
    }
    sb_free(&tmp);
    return ok;
}

/* The descriptor path names when it is one of this process's open files
 * (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N); else -1. */
static int own_fd(const char *path) {
    if (!strcmp(path, "/dev/stdout")) return 1;
    if (!strcmp(path, "/dev/stderr")) return 2;
    const char *num = !strncmp(path, "/dev/fd/", 8) ? path + 8 : !strncmp(path, "/proc/self/fd/", 14) ? path + 14 : NULL;
    if (!num || *num < '0' || *num > '9') return -1;
    char *end;
    long fd = strtol(num, &end, 10);
    return *end || fd > 1 << 20 || fcntl((int)fd, F_GETFD) < 0 ? -1 : (int)fd;
}

bool io_write_atomic(const char *path, const void *data, size_t n, diag *d) {
    /* An open descriptor is written as it is (a file opened with >> keeps its
     * contents, a pipe its reader), never reopened or replaced. */
    int own = own_fd(path);
    if (own >= 0) {
        fflush(NULL);
        if (write_all(own, data, n)) return true;
        diag_plain(d, "cannot write %s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) {
            /* Through a symlink: replace the file it names, keep the link. */
            char *real = realpath(path, NULL);
            if (!real) {
                diag_plain(d, "cannot write %s: %s", path, strerror(errno));
                return false;
            }
            bool ok = write_replace(real, data, n, st.st_mode & 0777, d);
            free(real);
            return ok;
        }
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
            /* A terminal, /dev/null, /dev/stdout, a named pipe: written through
             * as a shell redirection would, never replaced by a file. */
            int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
            bool ok = fd >= 0 && write_all(fd, data, n);
            int err = errno;
            if (fd >= 0 && close(fd) != 0 && ok) ok = false, err = errno;
            if (!ok) diag_plain(d, "cannot write %s: %s", path, strerror(err));
            return ok;
        }
        diag_plain(d, "cannot write %s: %s", path,
                   S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file, character device or FIFO");
        return false;
    }
    if (errno != ENOENT) {
        diag_plain(d, "cannot write %s: %s", path, strerror(errno));
        return false;
    }
    mode_t mask = umask(0);
    umask(mask);
    char *target = dangling_target(path);
    if (!target) {
        diag_plain(d, "cannot write %s: %s", path, strerror(ELOOP));
        return false;
    }
    bool ok = write_replace(target, data, n, 0666 & ~mask, d);
    free(target);
    return ok;
}
