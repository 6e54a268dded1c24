#include "io.h"

#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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

char *io_gunzip(const char *data, size_t n, size_t *len, diag *d) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        diag_plain(d, "cannot initialise zlib");
        return NULL;
    }
    /* Inflates straight into the result, grown when the hint was short, never
     * beyond the budget (+ 1 for the NUL): a gzip bomb is refused at the
     * budget, not after filling memory. */
    size_t limit = io_inflate_limit(n);
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
            if (limit == IO_MAX_INPUT) diag_plain(d, "gzip input inflates to more than %zu bytes (the input limit)", limit);
            else diag_plain(d, "gzip input inflates to more than %zu bytes (%zu times its compressed size): refused as a "
                               "likely gzip bomb", limit, IO_MAX_INFLATE_RATIO);
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

bool io_write_atomic(const char *path, const void *data, size_t n, diag *d) {
    strbuf tmp;
    sb_init(&tmp);
    sb_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp.s, "wb");
    if (!f) {
        diag_plain(d, "cannot write %s: %s", tmp.s, strerror(errno));
        sb_free(&tmp);
        return false;
    }
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp.s, path) != 0) ok = false;
    if (!ok) {
        diag_plain(d, "cannot write %s: %s", path, strerror(errno));
        remove(tmp.s);
    }
    sb_free(&tmp);
    return ok;
}
