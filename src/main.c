/* main — dispatch to the subcommands (STYLE 3); each lives in cli_<name>.c.
 * It also owns the two process-wide rules about exit codes: an abort (a failed
 * internal invariant) ends with 3, not with a signal, and any output to stdout
 * that did not reach its destination (a full disk, a closed pipe) turns the
 * command's exit code into 2 at least: an output that was lost never exits 0. */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "home.h"
#include "rules.h"
#include "scalify.h"
#include "template.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage; /* full text, for `scalify CMD --help` */
    const char *help;  /* the summary line(s) of `scalify --help` */
} commands[] = {
    {"inspect", cli_inspect, cli_inspect_usage, "inspect FILE [--print]   summarise an HLO module (text or protobuf, .gz too);\n"
                             "                           --print writes canonical HLO text instead"},
    {"check", cli_check, cli_check_usage,
     "check --baseline B --distributed D [--relations R | --auto-relations] [--witness] [-o T]\n"
     "  check --manifest M --out-dir DIR   verify distributed graphs against their baselines"},
    {"report", cli_report, cli_report_usage,
     "report TRACE|INDEX... -o DIR [--single-file FILE] [--markdown FILE] [--compare OLD]\n"
     "                           render traces as an HTML site (and a Markdown summary)"},
    {"rules", cli_rules, cli_rules_usage, "rules check [DIR]         parse and lint every DIR/*.rules (default: check's rules)\n"
                         "  rules validate [DIR]      run every rewrite rule's examples in the interpreter"},
    {"eval", cli_eval, cli_eval_usage, "eval FILE [--devices N] [--seed S] [--inputs F] [--outputs F]\n"
                       "                           run a module on N simulated devices (reference interpreter)"},
};

static void usage(FILE *f) {
    fputs("usage: scalify <command> [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %s\n", commands[i].help);
    fputs("  --help, -h                this text (CMD --help: that command's options)\n"
          "  --version, -V             the version, the rules' folder and digest, the data folder\n"
          "\n"
          "exit status:\n"
          "  0  verified (check) / success\n"
          "  1  mismatch or unverified (check)\n"
          "  2  usage error, bad input, or an output that could not be written\n"
          "  3  internal error\n",
          f);
}

/* The version, then what `check` would use when given no --rules: the rules
 * folder and the digest its traces record (tool.rules_digest), and the folder
 * the report's templates and assets are read from. */
static void print_version(void) {
    printf("scalify %s\n", SCALIFY_VERSION);
    const char *dir = home_rules_dir();
    uint8_t h[32];
    size_t n = rs_dir_digest(dir, h);
    printf("rules: %s (%zu file%s) sha256:", dir ? dir : "none found", n, n == 1 ? "" : "s");
    for (int i = 0; i < 32; i++) printf("%02x", h[i]);
    const char *env = getenv("SCALIFY_HOME");
    printf("\ndata: %s\n", home_root() || (env && *env) ? tpl_root() : "none found");
}

/* An abort() is an internal error: say so and exit 3, as documented. Only
 * async-signal-safe calls here. */
static void on_abort(int sig) {
    (void)sig;
    static const char msg[] = "scalify: internal error (aborted)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(EXIT_INTERNAL);
}

/* Flushes and closes stdout; an output that did not get written makes rc at
 * least EXIT_INPUT. A stdout that was closed from the start and never written
 * to is not an error. */
static int finish_stdout(int rc) {
    bool ok = fflush(stdout) == 0 && !ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && ok && errno != EBADF) ok = false, err = errno;
    if (ok) return rc;
    fprintf(stderr, "scalify: cannot write standard output: %s\n", strerror(err));
    return rc > EXIT_INPUT ? rc : EXIT_INPUT;
}

static int run(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return EXIT_VERIFIED;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        print_version();
        return EXIT_VERIFIED;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(cmd, commands[i].name) != 0) continue;
        for (int k = 2; k < argc; k++)
            if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0) {
                fputs(commands[i].usage, stdout);
                return EXIT_VERIFIED;
            }
        return commands[i].run(argc - 2, argv + 2);
    }
    fprintf(stderr, "scalify: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return EXIT_INPUT;
}

int main(int argc, char **argv) {
    signal(SIGABRT, on_abort);
    return finish_stdout(run(argc, argv));
}
