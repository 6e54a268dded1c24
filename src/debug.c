/* debug — SCALIFY_DEBUG parsed once (debug.h). */
#include "debug.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    unsigned on;
    char base[256], term[256];
    int depth;
} dbg = {.depth = 5};

static pthread_once_t parsed = PTHREAD_ONCE_INIT;

static void parse(void) {
    static const struct {
        const char *word;
        dbg_switch s;
    } words[] = {{"lift", DBG_LIFT}, {"views", DBG_VIEWS}, {"memo", DBG_MEMO}, {"witness", DBG_WITNESS},
                 {"invariants", DBG_INVARIANTS}};
    const char *v = getenv("SCALIFY_DEBUG");
    while (v && *v) {
        size_t n = strcspn(v, ",");
        const char *eq = memchr(v, '=', n);
        size_t key = eq ? (size_t)(eq - v) : n, val = eq ? n - key - 1 : 0;
        bool known = false;
        if (!eq) {
            for (size_t k = 0; k < sizeof words / sizeof *words; k++)
                if (strlen(words[k].word) == n && !memcmp(v, words[k].word, n)) dbg.on |= words[k].s, known = true;
        } else if ((key == 4 && !memcmp(v, "base", 4)) || (key == 4 && !memcmp(v, "term", 4))) {
            char *to = v[0] == 'b' ? dbg.base : dbg.term;
            known = val < sizeof dbg.base;
            if (known) memcpy(to, eq + 1, val), to[val] = 0;
        } else if (key == 5 && !memcmp(v, "depth", 5)) {
            char *end;
            long d = strtol(eq + 1, &end, 10);
            known = end == eq + 1 + val && val && d >= 0 && d <= 64;
            if (known) dbg.depth = (int)d;
        }
        if (!known && n)
            fprintf(stderr, "scalify: SCALIFY_DEBUG: ignoring '%.*s' (known: lift, views, memo, witness, invariants, "
                            "base=NAME, term=NAME, depth=N up to 64)\n", (int)n, v);
        v += n + (v[n] == ',');
    }
}

bool dbg_on(dbg_switch s) {
    pthread_once(&parsed, parse);
    return (dbg.on & s) != 0;
}

const char *dbg_base_name(void) {
    pthread_once(&parsed, parse);
    return dbg.base[0] ? dbg.base : NULL;
}

const char *dbg_term_name(void) {
    pthread_once(&parsed, parse);
    return dbg.term[0] ? dbg.term : NULL;
}

int dbg_depth(void) {
    pthread_once(&parsed, parse);
    return dbg.depth;
}
