#include "io.h"

#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

char *io_gunzip(const char *data, size_t n, size_t *len, diag *d) {
    strbuf out;
    sb_init(&out);
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        diag_plain(d, "cannot initialise zlib");
        return NULL;
    }
    z.next_in = (Bytef *)data;
    size_t left = n;
    char chunk[1 << 16];
    int rc = Z_OK;
    for (;;) {
        if (z.avail_in == 0 && left) {
            uInt take = left > (1u << 30) ? (1u << 30) : (uInt)left;
            z.avail_in = take;
            left -= take;
        }
        z.next_out = (Bytef *)chunk;
        z.avail_out = sizeof chunk;
        rc = inflate(&z, Z_NO_FLUSH);
        sb_put(&out, chunk, sizeof chunk - z.avail_out);
        if (out.len > IO_MAX_INPUT) {
            diag_plain(d, "gzip input inflates to more than %zu bytes", IO_MAX_INPUT);
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
    *len = out.len;
    if (!out.s) sb_put(&out, "", 0);
    return sb_take(&out);
corrupt:
    diag_binary(d, (size_t)z.total_in, "", "corrupt gzip data (%s)", z.msg ? z.msg : "inflate failed");
fail:
    inflateEnd(&z);
    sb_free(&out);
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
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        sb_put(&b, chunk, got);
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
