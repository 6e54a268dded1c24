/* The e-graph invariant checks that make asan/ubsan (-DSCALIFY_INVARIANTS)
 * and SCALIFY_DEBUG=invariants turn on: they run after lifting and after each
 * saturation, and hold on a verified pair and on a mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay ? strstr(hay, needle) : NULL; p; p = strstr(p + 1, needle)) n++;
    return n;
}

void suite_invariants(void);
void suite_invariants(void) {
    static const struct {
        const char *dist, *rel;
        int status;
    } pairs[] = {
        {"tiny-gpt2.megatron_tp.tp4", "tiny-gpt2.megatron_tp.tp4", 0},
        {"tiny-gpt2.megatron_tp.tp4.bug.bias-before-allreduce", "tiny-gpt2.megatron_tp.tp4.bug.bias-before-allreduce", 1},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        t_case("invariants-1.%zu %s", i + 1, pairs[i].dist);
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "SCALIFY_DEBUG=memo,invariants %s check --baseline samples/tiny-gpt2/tiny-gpt2.baseline.hlo "
                 "--distributed samples/tiny-gpt2/%s.dist.hlo --relations samples/tiny-gpt2/%s.relations.json "
                 "--rules rules -o /dev/null 2>&1",
                 t_scalify(), pairs[i].dist, pairs[i].rel);
        int st;
        char *out = t_run(cmd, &st);
        CHECK_MSG(st == pairs[i].status, "exit %d, want %d: %.400s", st, pairs[i].status, out ? out : "");
        CHECK_MSG(count(out, "e-graph invariants hold after lifting") == 1, "%.400s", out ? out : "");
        CHECK_MSG(!out || !strstr(out, "invariant violation"), "%.400s", out);
        free(out);
    }
}
