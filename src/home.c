/* home — the data root relative to the running binary (home.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "home.h"
#include "util.h"

static bool holds(const char *dir, const char *probe, int want_dir, strbuf *p) {
    sb_reset(p);
    sb_printf(p, "%s/%s", dir, probe);
    struct stat st;
    return stat(p->s, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

char *home_find(const char *probe, int want_dir) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0; /* exe now names the binary's folder */
    strbuf p, share;
    sb_init(&p);
    sb_init(&share);
    sb_printf(&share, "%s/../share/scalify", exe);
    char *hit = NULL;
    for (int up = 0; up <= 3 && !hit; up++) {
        if (holds(exe, probe, want_dir, &p)) hit = xstrdup(*exe ? exe : "/");
        slash = strrchr(exe, '/');
        if (!slash) break;
        *slash = 0;
    }
    if (!hit && holds(share.s, probe, want_dir, &p)) {
        char *real = realpath(share.s, NULL);
        hit = real ? real : xstrdup(share.s);
    }
    sb_free(&p);
    sb_free(&share);
    return hit;
}

const char *home_rules_dir(void) {
    static char *dir;
    const char *env = getenv("SCALIFY_RULES");
    if (env && *env) return env;
    if (dir) return dir;
    char *root = home_find("rules", 1);
    if (!root) return NULL;
    strbuf p;
    sb_init(&p);
    sb_printf(&p, "%s/rules", root);
    free(root);
    dir = sb_take(&p);
    return dir;
}
