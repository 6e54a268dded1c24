/* scalify — program-wide constants: the version and the exit codes (STYLE 5).
 * The exit codes are mirrored in `scalify --help` and README.md; keep all three
 * in step. */
#ifndef SCALIFY_SCALIFY_H
#define SCALIFY_SCALIFY_H

#define SCALIFY_VERSION "0.1.0"

enum exit_code {
    EXIT_VERIFIED = 0,   /* check: verified; other commands: success */
    EXIT_MISMATCH = 1,   /* check: mismatch or unverified */
    EXIT_INPUT = 2,      /* usage error or bad input */
    EXIT_INTERNAL = 3,   /* internal error (a bug in scalify) */
};

#endif
