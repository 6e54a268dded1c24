/* home — the data root relative to the running binary (home.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "home.h"
#include "util.h"

static bool is(const char *dir, const char *rel, bool want_dir) {
    strbuf p;
    sb_init(&p);
    sb_printf(&p, "%s/%s", dir, rel);
    struct stat st;
    bool ok = stat(p.s, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    sb_free(&p);
    return ok;
}

/* A data root holds both the rules and the page template: a folder that
 * merely happens to be called rules/ is not one. */
static bool is_root(const char *dir) { return is(dir, "rules", true) && is(dir, "templates/page.html", false); }

/* Looked up once per process (threads checking pairs at once share it). */
static char *root, *rules_dir;
static pthread_once_t looked = PTHREAD_ONCE_INIT;

static void look(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0; /* exe now names the binary's folder */
    strbuf share;
    sb_init(&share);
    sb_printf(&share, "%s/../share/scalify", exe);
    if (is_root(share.s)) root = realpath(share.s, NULL);
    sb_free(&share);
    for (int up = 0; up <= 3 && !root; up++) {
        if (*exe && is_root(exe)) root = xstrdup(exe);
        slash = strrchr(exe, '/');
        if (!slash) break;
        *slash = 0;
    }
    if (root) {
        strbuf p;
        sb_init(&p);
        sb_printf(&p, "%s/rules", root);
        rules_dir = sb_take(&p);
    }
}

const char *home_root(void) {
    pthread_once(&looked, look);
    return root;
}

const char *home_rules_dir(void) {
    const char *env = getenv("SCALIFY_RULES");
    if (env && *env) return env;
    pthread_once(&looked, look);
    return rules_dir;
}
