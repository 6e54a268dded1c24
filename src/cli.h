/* cli — one entry point per subcommand. Each cli_<name>.c parses that command's
 * options, calls the modules that do the work, prints diagnostics to stderr and
 * returns an exit_code (scalify.h). main.c only dispatches to these. */
#ifndef SCALIFY_CLI_H
#define SCALIFY_CLI_H

#include "diag.h"

/* Each command's full usage text; main.c prints it for `scalify CMD --help`. */
extern const char cli_inspect_usage[], cli_check_usage[], cli_report_usage[], cli_eval_usage[],
    cli_rules_usage[];

int cli_inspect(int argc, char **argv);
int cli_check(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_rules(int argc, char **argv);

/* Prints the diag's messages to stderr and frees it; returns its error count. */
int cli_flush_diag(diag *d);
/* Reads a module in any supported form, printing every diagnostic (warnings
 * too); NULL when it cannot be read. */
struct hlo_module *cli_read_module(const char *file);

#endif
