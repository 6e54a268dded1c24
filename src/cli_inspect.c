/* scalify inspect FILE [--print] */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "hlo.h"
#include "inspect.h"
#include "scalify.h"

int cli_flush_diag(diag *d) {
    if (d->out.len) fputs(d->out.s, stderr);
    int errors = d->count;
    diag_free(d);
    return errors;
}

hlo_module *cli_read_module(const char *file) {
    diag d;
    diag_init(&d, file);
    hlo_module *m = hlo_read_file(file, &d);
    if (!m && d.count == 0) diag_plain(&d, "could not read the module");
    cli_flush_diag(&d);
    return m;
}

const char cli_inspect_usage[] =
    "usage: scalify inspect FILE [--print]\n"
    "  reads one module (HLO text or protobuf, gzipped or not) and prints its name, format,\n"
    "  computations, instruction and device counts, entry parameters with shapes and shardings,\n"
    "  an opcode histogram and every collective with its replica groups.\n"
    "  --print  write the module as canonical HLO text instead\n";

int cli_inspect(int argc, char **argv) {
    const char *file = NULL;
    bool print = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--print") == 0) print = true;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "scalify inspect: unknown option %s\n", argv[i]);
            return EXIT_INPUT;
        } else if (file) {
            fprintf(stderr, "scalify inspect: one FILE only\n");
            return EXIT_INPUT;
        } else file = argv[i];
    }
    if (!file) {
        fputs(cli_inspect_usage, stderr);
        return EXIT_INPUT;
    }
    hlo_module *m = cli_read_module(file);
    if (!m) return EXIT_INPUT;
    strbuf out;
    sb_init(&out);
    if (print) hlo_print(&out, m);
    else inspect_summary(&out, m);
    fwrite(out.s, 1, out.len, stdout);
    sb_free(&out);
    graph_free(m);
    return fflush(stdout) == 0 ? EXIT_VERIFIED : EXIT_INPUT;
}
