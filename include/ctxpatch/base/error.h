/* Floor: base. The ctxpatch error model (libgit2 style).
 *
 * Every library function returns 0 on success or a negative cp_err code, and on failure
 * sets a one-line, thread-local message naming the file and the offending place
 * ("model.safetensors: header offset 112: duplicate tensor name 'w'"). Callers propagate
 * the code unchanged; only the CLI turns it into an exit status.
 *
 * Every distinct refusal has its own code so tests can assert the exact reason. Codes are
 * stable: append new ones at the end of their group, never renumber.
 */
#ifndef CTXPATCH_ERROR_H
#define CTXPATCH_ERROR_H

#include <stdarg.h>

#define CP_ERROR_LIST(X)                                                              \
  /* generic */                                                                        \
  X(CP_OK, 0, "ok")                                                                    \
  X(CP_EIO, -1, "input/output error")                                                  \
  X(CP_ENOMEM, -2, "out of memory")                                                    \
  X(CP_EARG, -3, "invalid argument")                                                   \
  X(CP_ENOTFOUND, -4, "not found")                                                     \
  X(CP_EEXIST, -5, "already exists")                                                   \
  X(CP_EUNSUPPORTED, -6, "unsupported")                                                \
  X(CP_EOVERFLOW, -7, "size overflow")                                                 \
  X(CP_EFORMAT, -8, "unrecognised file format")                                        \
  X(CP_EFILETYPE, -9, "not a regular file (FIFO, device, socket, folder or symlink)") \
  X(CP_EOVERLAP, -10, "output is, contains or is inside the input")                 \
  /* safetensors (-100) */                                                             \
  X(CP_EST_TOO_SMALL, -100, "safetensors: file shorter than 8 bytes")                  \
  X(CP_EST_HEADER_TOO_LARGE, -101, "safetensors: header length over 100000000")        \
  X(CP_EST_HEADER_PAST_EOF, -102, "safetensors: header extends past end of file")      \
  X(CP_EST_HEADER_UTF8, -103, "safetensors: header is not valid UTF-8")                \
  X(CP_EST_HEADER_NOT_OBJECT, -104, "safetensors: header does not start with '{'")     \
  X(CP_EST_HEADER_JSON, -105, "safetensors: header is not valid JSON")                 \
  X(CP_EST_DUPLICATE_NAME, -106, "safetensors: duplicate tensor name")                 \
  X(CP_EST_METADATA, -107, "safetensors: __metadata__ value is not a string")          \
  X(CP_EST_DTYPE, -108, "safetensors: unsupported dtype")                              \
  X(CP_EST_SHAPE, -109, "safetensors: invalid shape")                                  \
  X(CP_EST_SHAPE_OVERFLOW, -110, "safetensors: shape x dtype size overflows")          \
  X(CP_EST_OFFSETS, -111, "safetensors: invalid data_offsets")                         \
  X(CP_EST_OFFSETS_SIZE, -112, "safetensors: data_offsets disagree with shape")        \
  X(CP_EST_HOLE, -113, "safetensors: hole between tensors")                            \
  X(CP_EST_OVERLAP, -114, "safetensors: overlapping tensors")                          \
  X(CP_EST_TRAILING, -115, "safetensors: bytes after the last tensor")                 \
  X(CP_EST_TRUNCATED, -116, "safetensors: tensor data past end of file")               \
  X(CP_EST_ENTRY, -117, "safetensors: malformed tensor entry")                         \
  X(CP_EST_INDEX, -118, "safetensors: malformed shard index")                          \
  /* GGUF (-150) */                                                                     \
  X(CP_EGGUF_MAGIC, -150, "gguf: not a GGUF file (bad magic)")                         \
  X(CP_EGGUF_VERSION, -151, "gguf: unsupported version")                               \
  X(CP_EGGUF_TRUNCATED, -152, "gguf: header field past end of file")                   \
  X(CP_EGGUF_LIMIT, -153, "gguf: count or length past what the file can hold")         \
  X(CP_EGGUF_TYPE, -154, "gguf: unknown or misused value type")                        \
  X(CP_EGGUF_DUPLICATE, -155, "gguf: duplicate key or tensor name")                    \
  X(CP_EGGUF_ALIGNMENT, -156, "gguf: invalid general.alignment")                       \
  X(CP_EGGUF_TENSOR, -157, "gguf: invalid tensor info (name, dims, shape or type)")    \
  X(CP_EGGUF_OFFSET, -158, "gguf: tensor data misaligned, overlapping or past the data section") \
  X(CP_EGGUF_QUANT, -159, "gguf: tensor type cannot be dequantised")                   \
  X(CP_EGGUF_KEY, -160, "gguf: metadata key missing or of the wrong type")             \
  X(CP_EGGUF_NAME, -161, "gguf: invalid key or string (empty, NUL, not UTF-8)")        \
  /* PyTorch zip and pickle (-200) */                                                  \
  X(CP_EPT_LEGACY, -200, "pytorch: legacy non-zip checkpoint")                         \
  X(CP_EPT_ZIP, -201, "pytorch: not a readable zip archive")                           \
  X(CP_EPT_NO_PICKLE, -202, "pytorch: no data.pkl in archive")                         \
  X(CP_EPT_RECORD, -203, "pytorch: storage record missing or malformed")               \
  X(CP_EPT_STORAGE_SIZE, -204, "pytorch: storage larger than its record")              \
  X(CP_EPT_TENSOR_BOUNDS, -205, "pytorch: tensor view outside its storage")            \
  X(CP_EPT_BYTEORDER, -206, "pytorch: big-endian checkpoint")                          \
  X(CP_EPT_STRUCTURE, -207, "pytorch: pickle is not a tensor state dict")              \
  X(CP_EPT_ENTRY_NAME, -208, "pytorch: unsafe or duplicate zip entry name")           \
  X(CP_EPKL_TRUNCATED, -220, "pickle: truncated")                                      \
  X(CP_EPKL_OPCODE, -221, "pickle: unsupported opcode")                                \
  X(CP_EPKL_GLOBAL, -222, "pickle: global not on the allowlist")                       \
  X(CP_EPKL_STACK, -223, "pickle: stack underflow or overflow")                        \
  X(CP_EPKL_MEMO, -224, "pickle: bad memo reference")                                  \
  X(CP_EPKL_TYPE, -225, "pickle: wrong argument type")                                 \
  X(CP_EPKL_SETITEM, -226, "pickle: SETITEM(S) on a non-dict")                         \
  X(CP_EPKL_PROTOCOL, -227, "pickle: unsupported protocol")                            \
  X(CP_EPKL_LIMIT, -228, "pickle: size limit exceeded")                                \
  X(CP_EPKL_NO_STOP, -229, "pickle: missing STOP")                                     \
  /* ONNX: reader, recovery, in-place rewrite, graph export (-250) */                   \
  X(CP_EONNX_WIRE, -250, "onnx: malformed protobuf bytes")                              \
  X(CP_EONNX_GRAPH, -251, "onnx: invalid graph (names, cycles, shapes, attributes, nesting)") \
  X(CP_EONNX_TENSOR, -252, "onnx: invalid tensor (data type, dims, or data that disagrees with them)") \
  X(CP_EONNX_DTYPE, -253, "onnx: tensor type or storage ctxpatch does not read or write") \
  X(CP_EONNX_EXTERNAL, -254, "onnx: external data malformed, out of range or at an unsafe location") \
  X(CP_EONNX_METADATA, -255, "onnx: metadata malformed or disagreeing with the graph")  \
  X(CP_EONNX_RECOVER, -256, "onnx: no model description can be recovered from the graph") \
  X(CP_EONNX_SITE, -257, "onnx: rewrite: no attention site, or none the rule can be written into") \
  X(CP_EONNX_EXPORT, -258, "onnx: the model or rule has no form in ctxpatch's graph export") \
  /* HF config and checkpoint folders (-300) */                                        \
  X(CP_ECFG_JSON, -300, "config: invalid JSON")                                        \
  X(CP_ECFG_DUPLICATE_KEY, -301, "config: duplicate key")                              \
  X(CP_ECFG_DEPTH, -302, "config: nesting deeper than 128")                            \
  X(CP_ECFG_FAMILY, -303, "config: unknown architecture family")                       \
  X(CP_ECFG_FIELD, -304, "config: missing or invalid field")                           \
  X(CP_ECFG_POSITION, -305, "config: unsupported positional scheme")                   \
  X(CP_ECKPT_EMPTY, -310, "checkpoint: no weights found")                              \
  X(CP_ECKPT_AMBIGUOUS, -311, "checkpoint: more than one weight format in folder")     \
  X(CP_ECKPT_DUPLICATE, -312, "checkpoint: tensor name in more than one shard")        \
  X(CP_ECKPT_INDEX, -313, "checkpoint: shard index disagrees with shards")                 \
  /* attention rules (-400) */                                                         \
  X(CP_ERULE_JSON, -400, "rule: invalid JSON")                                         \
  X(CP_ERULE_KEY, -401, "rule: unknown key")                                           \
  X(CP_ERULE_VALUE, -402, "rule: invalid value")                                       \
  X(CP_ERULE_MODEL, -403, "rule: does not fit the model")                              \
  /* model description and engines (-500) */                                           \
  X(CP_EMODEL_TENSOR, -500, "model: tensor missing or of the wrong shape")             \
  X(CP_EMODEL_INPUT, -501, "model: invalid input ids")                                \
  X(CP_ECUDA, -502, "cuda: no device, or a CUDA runtime call failed")                \
  X(CP_EMODEL_NONFINITE, -503, "model: non-finite value (NaN or Inf) in a forward pass") \
  /* verify stage (-700) */                                                            \
  X(CP_EVERIFY_PROBE, -700, "verify: unknown probe")                                   \
  X(CP_EVERIFY_LENGTH, -701, "verify: length cannot hold the probe")                   \
  X(CP_EVERIFY_THRESHOLD, -702, "verify: threshold cannot be judged")                                 \
  X(CP_EVERIFY_RUNTIME, -703, "verify: the runtime could not run the artifact")                  \
  X(CP_EVERIFY_WORK, -704, "verify: the planned work is over the work budget")                  \
  /* patchers (-800) */                                                                \
  X(CP_EPATCH_FAMILY, -800, "patch: method does not fit the model family")             \
  X(CP_EPATCH_FIDELITY, -801, "patch: the artifact cannot carry the patch as required") \
  /* tokenizers (-600) */                                                              \
  X(CP_ETOK_JSON, -600, "tokenizer: invalid tokenizer.json")                           \
  X(CP_ETOK_MODEL, -601, "tokenizer: invalid tokenizer model")                         \
  X(CP_ETOK_MISSING, -602, "tokenizer: no tokenizer in folder")                        \
  X(CP_ETOK_UNSUPPORTED, -603, "tokenizer: unsupported tokenizer component")           \
  X(CP_ETOK_ID, -604, "tokenizer: token id out of range")                              \
  X(CP_ETOK_TEXT, -605, "tokenizer: text is not valid UTF-8")                          \
  X(CP_ETOK_LIMIT, -606, "tokenizer: a bound on regex work or text growth was reached")

typedef enum {
#define CP_ERR_ENUM(name, value, text) name = value,
  CP_ERROR_LIST(CP_ERR_ENUM)
#undef CP_ERR_ENUM
} cp_err;

/* Short stable identifier of a code, e.g. "CP_EST_DUPLICATE_NAME"; "CP_E?" if unknown. */
const char *cp_err_name(int code);
/* Generic description of a code. */
const char *cp_err_text(int code);

/* Sets the thread's last error and returns `code` so callers can `return cp_error_set(...)`.
 * The message is one line; newlines are replaced. */
int cp_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cp_error_setv(int code, const char *fmt, va_list ap);
/* Message of the last error on this thread ("" if none). */
const char *cp_error_message(void);
int cp_error_code(void);
void cp_error_clear(void);

#endif
