#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "util.h"

int t_passed, t_failed;
static char current[256] = "?";

void t_case(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(current, sizeof current, fmt, ap);
    va_end(ap);
}

bool t_check(bool ok, const char *expr, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        t_passed++;
        return true;
    }
    t_failed++;
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s:%d: %s%s%s%s\n", current, file, line, expr, detail[0] ? " (" : "", detail,
           detail[0] ? ")" : "");
    fflush(stdout);
    return false;
}

bool t_write_replaced(const char *src, const char *from, const char *to, const char *tail, const char *path) {
    const char *hit = strstr(src, from);
    if (!hit) return false;
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fwrite(src, 1, (size_t)(hit - src), f);
    fputs(to, f);
    fputs(hit + strlen(from), f);
    if (tail) fputs(tail, f);
    fclose(f);
    return true;
}

char *t_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = xrealloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *t_run(const char *cmd, int *status) {
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) {
        *status = -1;
        return strdup("");
    }
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, p)) > 0) {
        n += got;
        if (n == cap) buf = xrealloc(buf, (cap *= 2) + 1);
    }
    buf[n] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return buf;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char **t_list(const char *dir, const char *suffix) {
    size_t n = 0, cap = 16;
    char **v = xmalloc(cap * sizeof *v);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        size_t sl = strlen(suffix);
        while ((e = readdir(d)) != NULL) {
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.' || l < sl || strcmp(e->d_name + l - sl, suffix) != 0) continue;
            if (n + 2 > cap) v = xrealloc(v, (cap *= 2) * sizeof *v);
            size_t pl = strlen(dir) + l + 2;
            v[n] = xmalloc(pl);
            snprintf(v[n], pl, "%s/%s", dir, e->d_name);
            n++;
        }
        closedir(d);
    }
    qsort(v, n, sizeof *v, cmp_str);
    v[n] = NULL;
    return v;
}

void t_free_list(char **v) {
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
}

const char *t_scalify(void) {
    const char *s = getenv("SCALIFY");
    return s && *s ? s : "build/scalify";
}

#define SUITE(name) void suite_##name(void);
#include "suites.h"
#undef SUITE

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    /* each suite's wall time beside its result: make test must stay under
     * ten minutes on two cores, and this says where the time goes */
#define SUITE(name)                                                                                 \
    if (!only || strcmp(only, #name) == 0) {                                                        \
        int before = t_failed;                                                                      \
        struct timespec t0, t1;                                                                     \
        clock_gettime(CLOCK_MONOTONIC, &t0);                                                        \
        suite_##name();                                                                             \
        clock_gettime(CLOCK_MONOTONIC, &t1);                                                        \
        printf("suite %-14s %-6s %6.1f s\n", #name, t_failed > before ? "FAILED" : "ok",             \
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);           \
        fflush(stdout);                                                                             \
    }
#include "suites.h"
#undef SUITE
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}
