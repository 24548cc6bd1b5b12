/* Private to formats/onnx_*.c: the mapping between ctxpatch dtypes and ONNX TensorProto data
 * types, shared by the writer and the reader. */
#ifndef CTXPATCH_FORMATS_ONNX_PROTO_H
#define CTXPATCH_FORMATS_ONNX_PROTO_H

#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

/* TensorProto.DataType of d; 0 (UNDEFINED) when ONNX has none. */
int32_t cp_onnx_elem_type(cp_dtype d);
/* The dtype of an ONNX data type: 0, or CP_EONNX_DTYPE (message not set). */
int cp_onnx_dtype_from_elem(cp_dtype *out, int32_t elem);

#endif
