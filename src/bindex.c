/* bindex — batch indexes, read and merged across shards (bindex.h). */
#include "bindex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "util.h"

bool bindex_write_json(const char *path, json_t *j, diag *d) {
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (!s) return false;
    strbuf b;
    sb_init(&b);
    sb_puts(&b, s);
    sb_putc(&b, '\n');
    free(s);
    bool ok = io_write_atomic(path, b.s, b.len, d);
    sb_free(&b);
    return ok;
}

bool bindex_is_index(const char *path) {
    /* a trace names itself in its first key (check writes "scalify_trace"
     * first): no need to parse a large trace twice */
    char head[128] = "";
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t got = fread(head, 1, sizeof head - 1, f);
        head[got] = 0;
        fclose(f);
    }
    if (strstr(head, "\"scalify_trace\"")) return false;
    json_t *j = json_load_file(path, 0, NULL);
    bool is = json_is_array(json_object_get(j, "pairs")) && !json_object_get(j, "scalify_trace");
    json_decref(j);
    return is;
}

static int by_position(const void *a, const void *b) {
    const bindex_entry *x = a, *y = b;
    return x->position < y->position ? -1 : x->position > y->position;
}

/* The folder part of path ("." when none), owned by the caller. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    strbuf b;
    sb_init(&b);
    if (!slash) sb_puts(&b, ".");
    else if (slash == path) sb_puts(&b, "/");
    else sb_put(&b, path, (size_t)(slash - path));
    return sb_take(&b);
}

bool bindex_load(bindex *ix, const char *const *files, size_t nfiles, diag *d) {
    memset(ix, 0, sizeof *ix);
    size_t cap = 0, count = 0, manifest_pairs = 0, plain = 0, base = 0;
    unsigned char *seen = NULL; /* shards met so far, by index */
    bool ok = true;
    for (size_t f = 0; f < nfiles && ok; f++) {
        json_error_t err;
        json_t *j = json_load_file(files[f], 0, &err);
        json_t *pairs = json_object_get(j, "pairs");
        if (!json_is_array(pairs)) {
            diag_plain(d, "%s: %s", files[f], j ? "not a batch index (no \"pairs\" array)" : err.text);
            json_decref(j);
            ok = false;
            break;
        }
        json_t *sj = json_object_get(j, "shard");
        if (sj) {
            json_int_t k = json_integer_value(json_object_get(sj, "index"));
            json_int_t n = json_integer_value(json_object_get(sj, "count"));
            json_int_t m = json_integer_value(json_object_get(sj, "manifest_pairs"));
            if (n < 1 || k < 0 || k >= n || m < 0 || (count && ((size_t)n != count || (size_t)m != manifest_pairs))) {
                diag_plain(d, "%s: shard %lld/%lld of %lld pairs does not belong with the other shards given",
                           files[f], (long long)k, (long long)n, (long long)m);
                ok = false;
            } else {
                if (!count) count = (size_t)n, manifest_pairs = (size_t)m, seen = xcalloc(count, 1);
                if (seen[k]++) diag_plain(d, "%s: shard %lld/%lld given twice", files[f], (long long)k, (long long)n), ok = false;
            }
        } else plain++;
        if (plain && count) {
            diag_plain(d, "%s: a shard index and a whole batch's index cannot be merged", files[f]);
            ok = false;
        }
        char *dir = dir_of(files[f]);
        for (size_t i = 0; ok && i < json_array_size(pairs); i++) {
            json_t *e = json_array_get(pairs, i);
            const char *name = json_string_value(json_object_get(e, "name"));
            json_t *pj = json_object_get(e, "position");
            const char *tr = json_string_value(json_object_get(e, "trace"));
            if (!name || (sj && (!json_is_integer(pj) || json_integer_value(pj) < 0 ||
                                 (size_t)json_integer_value(pj) >= manifest_pairs ||
                                 (size_t)json_integer_value(pj) % count != (size_t)json_integer_value(
                                                                               json_object_get(sj, "index"))))) {
                diag_plain(d, "%s: pair %zu has no name or a position outside its shard", files[f], i);
                ok = false;
                break;
            }
            for (size_t k = 0; k < ix->n; k++)
                if (!strcmp(json_string_value(json_object_get(ix->e[k].entry, "name")), name)) {
                    diag_plain(d, "%s: pair \"%s\" is in another index given too", files[f], name);
                    ok = false;
                }
            if (!ok) break;
            XGROW(ix->e, cap, ix->n + 1);
            bindex_entry *x = &ix->e[ix->n++];
            x->entry = json_deep_copy(e);
            json_object_del(x->entry, "position");
            x->position = sj ? (size_t)json_integer_value(pj) : base + i;
            x->trace = NULL;
            if (tr) {
                strbuf p;
                sb_init(&p);
                if (tr[0] == '/' || !strcmp(dir, ".")) sb_puts(&p, tr);
                else sb_printf(&p, "%s/%s", dir, tr);
                x->trace = sb_take(&p);
            }
        }
        base += json_array_size(pairs);
        free(dir);
        json_decref(j);
    }
    for (size_t k = 0; ok && k < count; k++)
        if (!seen[k]) {
            diag_plain(d, "shard %zu/%zu is missing: its pairs would be left out (to render part of a split, give "
                          "the traces themselves)", k, count);
            ok = false;
        }
    free(seen);
    if (!ok) {
        bindex_free(ix);
        return false;
    }
    if (ix->n > 1) qsort(ix->e, ix->n, sizeof *ix->e, by_position);
    return true;
}

bool bindex_write(const bindex *ix, const char *path, diag *d) {
    char *dir = dir_of(path);
    char *rdir = realpath(dir, NULL);
    free(dir);
    if (!rdir) {
        diag_plain(d, "%s: its folder does not exist", path);
        return false;
    }
    size_t rl = strlen(rdir);
    json_t *pairs = json_array();
    for (size_t i = 0; i < ix->n; i++) {
        json_t *e = json_deep_copy(ix->e[i].entry);
        if (ix->e[i].trace) {
            char *rt = realpath(ix->e[i].trace, NULL);
            const char *t = rt ? rt : ix->e[i].trace;
            if (rt && !strncmp(rt, rdir, rl) && rt[rl] == '/') t = rt + rl + 1;
            json_object_set_new(e, "trace", json_string(t));
            free(rt);
        }
        json_array_append_new(pairs, e);
    }
    json_t *j = json_object();
    json_object_set_new(j, "pairs", pairs);
    bool ok = bindex_write_json(path, j, d);
    json_decref(j);
    free(rdir);
    return ok;
}

void bindex_free(bindex *ix) {
    for (size_t i = 0; i < ix->n; i++) {
        json_decref(ix->e[i].entry);
        free(ix->e[i].trace);
    }
    free(ix->e);
    memset(ix, 0, sizeof *ix);
}
