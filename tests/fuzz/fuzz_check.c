/* libFuzzer target for the checker itself (make fuzz): the input is a
 * distributed program's HLO text, checked against the tiny sample's baseline
 * with its Megatron relations, the rules and execution on. Whatever the
 * program — malformed shapes, wrong attributes, nonsense collectives — the
 * verdict is one of the four, never a crash; sanitizers catch the rest.
 * Run from the repository root (the sample and rules/ paths are relative). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/scalify-fuzz-check-%d.hlo", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    check_opts o = {.name = "fuzz",
                    .baseline = "samples/tiny/tiny.baseline.hlo",
                    .distributed = path,
                    .relations = "samples/tiny/tiny.megatron_tp.tp4.relations.json",
                    .rules_dir = "rules",
                    .witness = true,
                    .jobs = 1};
    diag d;
    diag_init(&d, "fuzz");
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &d);
    if (v != VERDICT_VERIFIED && v != VERDICT_MISMATCH && v != VERDICT_UNVERIFIED && v != VERDICT_ERROR) abort();
    if (v != VERDICT_ERROR && !trace) abort();
    json_decref(trace);
    diag_free(&d);
    return 0;
}
