/* ctxpatch patch IN.onnx OUT.onnx: whether IN and OUT ask for the in-place rewrite
 * (ctxpatch/patchers/patch_onnx.h does it), and its one-line report of what changed. docs/onnx.md
 * "Patching a third-party graph in place". */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "ctxpatch/base/io.h"

/* The model file of IN: IN itself (a .onnx file), or IN/model.onnx, or IN/onnx/model.onnx. */
static bool model_file(char out[CLI_PATH_MAX], const char *in) {
  struct stat st;
  if (stat(in, &st) != 0) return false;
  if (S_ISREG(st.st_mode))
    return cp_path_has_suffix(in, ".onnx") && snprintf(out, CLI_PATH_MAX, "%s", in) < CLI_PATH_MAX;
  if (!S_ISDIR(st.st_mode)) return false;
  if (snprintf(out, CLI_PATH_MAX, "%s/model.onnx", in) < CLI_PATH_MAX && cp_path_is_file(out)) return true;
  return snprintf(out, CLI_PATH_MAX, "%s/onnx/model.onnx", in) < CLI_PATH_MAX && cp_path_is_file(out);
}

bool cli_patch_rewrite_model(char model[CLI_PATH_MAX], const char *in, const char *out) {
  return cp_path_has_suffix(out, ".onnx") && model_file(model, in);
}

void cli_patch_rewrite_print(const cp_onnx_rewrite_report *rep) {
  printf("rewrote %zu attention sites (%zu Softmax, %zu contrib): %zu nodes added, %zu changed, %zu initializers "
         "added, %zu changed; everything else kept byte for byte\n",
         rep->n_softmax + rep->n_contrib, rep->n_softmax, rep->n_contrib, rep->n_nodes_added, rep->n_nodes_changed,
         rep->n_initializers_added, rep->n_initializers_changed);
}
