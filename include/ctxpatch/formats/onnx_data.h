/* Floor: formats. An ONNX model's external data file placed beside another graph (what `patch
 * IN.onnx OUT/x.onnx` needs beside OUT): only the byte ranges the graph's tensors use are read
 * and written (cp_onnx_data_ranges, onnx_graph.h), at their offsets, the rest of the file left a
 * hole of the same size; so a sparse 12 GB file holding one 256-byte tensor costs 256 bytes, and
 * the graph digest (onnx_digest.h) of the copy is the original's. */
#ifndef CTXPATCH_FORMATS_ONNX_DATA_H
#define CTXPATCH_FORMATS_ONNX_DATA_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/formats/onnx_graph.h"

/* Data file m->data_files[k] written to `dst` atomically (through base/io.h's writer). An
 * existing `dst` of the same size whose used ranges hold the same bytes is kept (*written false);
 * one that differs there is CP_EEXIST unless `replace`. *written (may be NULL) says whether dst
 * was written. */
int cp_onnx_data_place(bool *written, const cp_onnx_model *m, size_t k, const char *dst, bool replace);

#endif
