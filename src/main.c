/* main — argument parsing and dispatch only (STYLE 3). */
#include <stdio.h>
#include <string.h>

#include "hlo.h"
#include "inspect.h"
#include "scalify.h"

static const char usage[] =
    "usage: scalify <command> [options]\n"
    "\n"
    "commands:\n"
    "  inspect FILE [--print]   summarise an HLO module (text or protobuf, .gz too);\n"
    "                           --print writes canonical HLO text instead\n"
    "  check ...                verify a distributed graph against its baseline (not yet built)\n"
    "  report ...               render traces into a static site (not yet built)\n"
    "  rules ...                lint / validate rewrite rules (not yet built)\n"
    "  eval ...                 run an HLO module in the reference interpreter (not yet built)\n"
    "  --help, --version\n"
    "\n"
    "exit status:\n"
    "  0  verified (check) / success\n"
    "  1  mismatch or unverified (check)\n"
    "  2  usage error or bad input\n"
    "  3  internal error\n";

static int flush_diag(diag *d) {
    if (d->out.len) fputs(d->out.s, stderr);
    int errors = d->count;
    diag_free(d);
    return errors;
}

static int cmd_inspect(int argc, char **argv) {
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
        fprintf(stderr, "usage: scalify inspect FILE [--print]\n");
        return EXIT_INPUT;
    }
    diag d;
    diag_init(&d, file);
    hlo_module *m = hlo_read_file(file, &d);
    if (!m) {
        if (d.count == 0) diag_plain(&d, "could not read the module");
        flush_diag(&d);
        return EXIT_INPUT;
    }
    flush_diag(&d);
    strbuf out;
    sb_init(&out);
    if (print) hlo_print(&out, m);
    else inspect_summary(&out, m);
    fwrite(out.s, 1, out.len, stdout);
    sb_free(&out);
    graph_free(m);
    return fflush(stdout) == 0 ? EXIT_VERIFIED : EXIT_INPUT;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return EXIT_VERIFIED;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("scalify %s\n", SCALIFY_VERSION);
        return EXIT_VERIFIED;
    }
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 2, argv + 2);
    if (strcmp(cmd, "check") == 0 || strcmp(cmd, "report") == 0 || strcmp(cmd, "rules") == 0 ||
        strcmp(cmd, "eval") == 0) {
        fprintf(stderr, "scalify %s: not built yet in this version (see README.md, 'Status')\n", cmd);
        return EXIT_INPUT;
    }
    fprintf(stderr, "scalify: unknown command '%s'\n\n%s", cmd, usage);
    return EXIT_INPUT;
}
