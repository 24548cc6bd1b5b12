/* Floor: export (private). A weight's matrix transposed on its way into the ONNX writer (MatMul
 * takes [in, out], checkpoints store [out, in]): the elements of w [rows, cols] written to the open
 * tensor as [cols, rows], without a transposed copy of the whole matrix. */
#ifndef CTXPATCH_EXPORT_ONNX_TRANSPOSE_H
#define CTXPATCH_EXPORT_ONNX_TRANSPOSE_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/formats/onnx.h"

/* Writes the transpose of w [rows, cols] (elements of `given`, F32, F16 or BF16: what the open
 * tensor of w_out was begun with as cp_onnx_tensor_begin_from's `src`) to that tensor with
 * cp_onnx_tensor_write, or straight into the writer's staging buffer (cp_onnx_tensor_room) where
 * it offers one and the CPU has AVX2. `name` is for messages. 0 or a negative cp_err. */
int cp_og_write_transposed(cp_onnx_writer *w_out, const void *w, cp_dtype given, int rows, int cols, const char *name);

/* Tests: false keeps to the portable path (as on a CPU without AVX2); true (the default) lets the
 * CPU choose. */
void cp_og_transpose_allow_avx2(bool allow);

#endif
