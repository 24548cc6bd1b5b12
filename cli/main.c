/* ctxpatch: git-style front end. Each subcommand lives in its own cmd_*.c file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/base/version.h"
#include "ctxpatch/export/onnx_export.h"
#include "ctxpatch/import/onnx_import.h"

static const cli_command commands[] = {
    {"inspect", "describe a checkpoint or ONNX graph: format, family, positional scheme, tensors", cmd_inspect},
    {"convert", "convert a checkpoint (safetensors, PyTorch zip, GGUF, ONNX) to safetensors, ONNX, GGUF", cmd_convert},
    {"forward", "run the engine (CPU, or --device cuda): logits, attention statistics, greedy decoding", cmd_forward},
    {"patch", "bake a length-extrapolation patch, certified before it is written (HF folder, ONNX, GGUF)", cmd_patch},
    {"verify", "run long retrieval probes, baseline side by side; certificate and HTML report", cmd_verify},
    {"tokenize", "encode text to token ids (or decode ids) with a model's tokenizer", cmd_tokenize},
    {"calibrate", "find the softmax temperature per length (Algorithm 1, Props. 1-2, log baseline)", cmd_calibrate},
    {"check", "decide whether a patched artifact may ship: files, certificate, metadata, --rerun", cmd_check},
    {"batch", "patch a model family from a recipe: job pool, resumable, claimed jobs, --shard, --status", cmd_batch},
};

int cli_report(int rc) {
  const char *msg = cp_error_message();
  fprintf(stderr, "ctxpatch: error %s: %s\n", cp_err_name(rc), *msg ? msg : cp_err_text(rc));
  return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  char msg[1024], safe[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cp_quote_text(safe, sizeof safe, msg, strlen(msg), 0); /* arguments and recipe entries: printable */
  fprintf(stderr, "ctxpatch %s: %s (see 'ctxpatch %s --help')\n", cmd, safe, cmd);
  return CLI_USAGE;
}

bool cli_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

bool cli_parse_u64(const char *cmd, const char *opt, const char *text, unsigned long long *out) {
  char *end = NULL;
  errno = 0;
  if (!text || !*text || *text == '-') goto bad;
  *out = strtoull(text, &end, 10);
  if (errno || *end) goto bad;
  return true;
bad:
  cli_usage_error(cmd, "%s expects a non-negative integer, got '%s'", opt, text ? text : "");
  return false;
}

static void usage(FILE *out) {
  fprintf(out, "usage: ctxpatch <command> [options]\n\n"
               "Converts, patches and verifies transformer checkpoints for long contexts.\n\n"
               "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'ctxpatch <command> --help' describes a command. Exit status 0 only on success.\n");
}

int main(int argc, char **argv) {
  cp_onnx_set_own_check(cp_onnx_own_check); /* own ONNX exports are checked against the graph ctxpatch writes */
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (cli_is_help(argv[1])) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ctxpatch %s\nbuild: %s\n", cp_version(), cp_build_options());
    return CLI_OK;
  }
  cp_input_track(true); /* every file a command reads is an input no output may replace */
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(argv[1], commands[i].name))
      return cli_no_repeated_options(argc - 1, argv + 1) ? commands[i].run(argc - 1, argv + 1)
                                                         : CLI_USAGE;
  cli_printf(stderr, "ctxpatch: unknown command '%s' (see 'ctxpatch --help')\n", argv[1]);
  return CLI_USAGE;
}
