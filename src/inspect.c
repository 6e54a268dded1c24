#include "inspect.h"

#include <stdlib.h>
#include <string.h>

#include "hlo.h"

const char *inspect_channel_mode(const hlo_instr *in) {
    bool channel = instr_int(in, A_CHANNEL_ID, 0) != 0;
    bool global = instr_int(in, A_USE_GLOBAL_DEVICE_IDS, 0) != 0;
    if (!channel) return "cross-replica";
    /* Ops without a use_global_device_ids field: a channel means partitions. */
    switch (in->op) {
    case OP_ALL_TO_ALL: case OP_RAGGED_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE:
    case OP_COLLECTIVE_PERMUTE_START: case OP_COLLECTIVE_BROADCAST:
        return "cross-partition";
    default:
        return global ? "flattened-id" : "cross-replica-and-partition";
    }
}

typedef struct opcount {
    const char *name;
    uint64_t n;
} opcount;

static int by_count(const void *x, const void *y) {
    const opcount *a = x, *b = y;
    if (a->n != b->n) return a->n > b->n ? -1 : 1;
    return strcmp(a->name, b->name);
}

static void print_attr(strbuf *out, const hlo_module *m, const hlo_comp *c, const hlo_instr *in, int key) {
    const hlo_attr *a = instr_attr(in, key);
    if (!a) return;
    sb_printf(out, " %s=", attr_key_name(key));
    hlo_print_attr_value(out, m, c, in, a);
}

void inspect_summary(strbuf *out, const hlo_module *m) {
    const hlo_comp *entry = graph_entry(m);
    sb_printf(out, "module        %s\n", m->name);
    sb_printf(out, "format        %s\n", m->format ? m->format : "?");
    sb_printf(out, "computations  %u\n", m->ncomps);
    sb_printf(out, "instructions  %llu\n", (unsigned long long)graph_instr_count(m));
    sb_printf(out, "entry         %s (%u instructions)\n", entry->name, entry->ninstrs);
    sb_printf(out, "devices       %lld\n", (long long)graph_num_devices(m));
    for (uint32_t i = 0; i < m->nattrs; i++)
        if (strcmp(m->attrs[i].raw_key, "num_partitions") == 0 || strcmp(m->attrs[i].raw_key, "replica_count") == 0)
            sb_printf(out, "%-13s %s\n", m->attrs[i].raw_key, m->attrs[i].v.str);

    sb_printf(out, "\nparameters (%u)\n", entry->nparams);
    for (uint32_t k = 0; k < entry->nparams; k++) {
        const hlo_instr *p = &entry->instrs[entry->params[k]];
        sb_printf(out, "  %u %s ", k, p->name);
        shape_print(out, &p->shape);
        print_attr(out, m, entry, p, A_SHARDING);
        sb_putc(out, '\n');
    }

    opcount *counts = xcalloc(OP_COUNT + 64, sizeof *counts);
    size_t nc = 0;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            const char *name = m->comps[c].instrs[i].opname;
            size_t j = 0;
            while (j < nc && counts[j].name != name && strcmp(counts[j].name, name) != 0) j++;
            if (j == nc) {
                if (nc % 64 == 0 && nc >= OP_COUNT) counts = xrealloc(counts, (nc + 64) * sizeof *counts);
                counts[nc++] = (opcount){name, 0};
            }
            counts[j].n++;
        }
    qsort(counts, nc, sizeof *counts, by_count);
    sb_printf(out, "\nopcodes (%zu distinct)\n", nc);
    for (size_t j = 0; j < nc; j++) sb_printf(out, "  %-28s %llu\n", counts[j].name, (unsigned long long)counts[j].n);
    free(counts);

    uint64_t ncoll = 0;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) ncoll += hlo_op_is_collective(m->comps[c].instrs[i].op);
    sb_printf(out, "\ncollectives (%llu)\n", (unsigned long long)ncoll);
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            const hlo_instr *in = &m->comps[c].instrs[i];
            if (!hlo_op_is_collective(in->op)) continue;
            sb_printf(out, "  %s = %s", in->name, in->opname);
            sb_printf(out, " mode=%s", inspect_channel_mode(in));
            int red = instr_reducer(m, in);
            if (red) sb_printf(out, " reduction=%s", reducer_name(red));
            print_attr(out, m, &m->comps[c], in, A_DIMENSIONS);
            print_attr(out, m, &m->comps[c], in, A_REPLICA_GROUPS);
            print_attr(out, m, &m->comps[c], in, A_SOURCE_TARGET_PAIRS);
            print_attr(out, m, &m->comps[c], in, A_CHANNEL_ID);
            sb_putc(out, '\n');
        }
}
