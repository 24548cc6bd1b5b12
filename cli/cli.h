/* Shared helpers for the command-line program. Only the CLI prints errors and picks exit codes. */
#ifndef CTXPATCH_CLI_H
#define CTXPATCH_CLI_H

#include <stdbool.h>

#include "ctxpatch/error.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

typedef struct {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

/* Prints "ctxpatch: error CODE_NAME: message" for a library failure and returns CLI_FAIL. */
int cli_report(int rc);
/* Prints "ctxpatch CMD: message" plus a hint to --help and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool cli_is_help(const char *arg);
/* Parses a non-negative integer option value; returns false (and prints) on junk. */
bool cli_parse_u64(const char *cmd, const char *opt, const char *text, unsigned long long *out);

int cmd_inspect(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_forward(int argc, char **argv);

#endif
