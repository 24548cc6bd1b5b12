/* Floor: formats. The graph digest of an ONNX model file (metadata_props ctxpatch.graph_sha256):
 * what `patch IN.onnx OUT.onnx` stores so that `check OUT.onnx` can tell whether anything the
 * graph computes with changed after it was written (docs/onnx.md "The graph digest" has the
 * recipe for other tools).
 *
 * The digest is SHA-256 (64 lowercase hex digits) over, in this order:
 *   1. the model file's bytes with every top-level metadata_props field (ModelProto field 14,
 *      a length-delimited StringStringEntryProto) whose key (the entry's field 1; the last one
 *      when repeated) begins with "ctxpatch." left out whole (tag, length and entry), every other
 *      byte kept in file order: nodes, initializers, opsets, other producers' metadata, unknown
 *      fields, as they lie on disk (no re-serialisation);
 *   2. for each distinct external data location that the full reader maps (include/ctxpatch/
 *      formats/onnx_graph.h: every tensor of the main graph and its subgraphs, initializers and
 *      tensor attributes, whose data_location is EXTERNAL), in ascending byte order of the
 *      location string: a 0x00 byte, the location's bytes, a 0x00 byte, and the 64 lowercase hex
 *      digits of the SHA-256 of the bytes of that file the tensors use: the union of their
 *      [offset, offset + length) ranges, in ascending offset, each byte once (the graph bytes
 *      of step 1 fix where those ranges lie). Where the tensors cover the whole file this is the
 *      SHA-256 of the file, as earlier versions (0.1.0 before issue 33)
 *      defined it for every file.
 * Every bound of the reader applies (a model file of at most 2 GiB; external files confined to
 * the model's folder); only the bytes tensors use are read, from the reader's read-only mapping,
 * so a sparse 12 GB data file holding one 256-byte tensor costs 256 bytes. */
#ifndef CTXPATCH_FORMATS_ONNX_DIGEST_H
#define CTXPATCH_FORMATS_ONNX_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/onnx_edit.h"
#include "ctxpatch/formats/onnx_graph.h"

#define CP_ONNX_GRAPH_DIGEST_KEY "ctxpatch.graph_sha256"
#define CP_ONNX_OWN_META_PREFIX "ctxpatch."         /* the entries the digest leaves out */
#define CP_ONNX_DIGEST_PAD_MAX ((uint64_t)64 << 10) /* unused bytes per range the whole-file form allows */

/* The digest of the model file bytes buf[0, len), which m was read from
 * (cp_onnx_model_open_bytes), its external data as m mapped it. */
int cp_onnx_graph_digest(char hex[65], const cp_onnx_model *m, const uint8_t *buf, size_t len);

/* The model file at `path` read once, opened by the full reader (*m, the caller's:
 * cp_onnx_model_free; NULL on error) and its digest computed over those very bytes. When the
 * model's stored CP_ONNX_GRAPH_DIGEST_KEY is not that digest but equals the earlier whole-file
 * form (step 2 over whole files: a graph rewritten by an earlier version whose data files hold
 * bytes no tensor uses), hex gets that form; it is computed only when the unused bytes of every
 * data file are at most CP_ONNX_DIGEST_PAD_MAX per range used plus one (alignment padding), so
 * the work stays bounded by what the graph uses. */
int cp_onnx_file_digest(char hex[65], cp_onnx_model **m, const char *path);

/* The edited model written to `path` atomically with metadata_props CP_ONNX_GRAPH_DIGEST_KEY set
 * to the digest of the bytes written: serialised once with a placeholder of 64 zeros, read back
 * from memory by the full reader (its external data files must already lie beside `path`), the
 * digest computed, and the placeholder overwritten with it in place (its entry is left out of the
 * digest, so the digest holds for the file as written). hex (may be NULL) gets the digest. */
int cp_onnx_edit_write_digested(char hex[65], cp_onnx_edit *e, const char *path);

#endif
