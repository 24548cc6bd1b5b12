/* Floor: formats. PyTorch zip checkpoints (torch.save since 1.6: pytorch_model.bin, *.pt, *.pth).
 *
 * Byte layout
 * -----------
 * A plain zip archive (PKWARE APPNOTE; zip64 once past 4 GiB). torch writes every entry
 * stored (method 0) and pads each local header's extra field so record data starts on a
 * 64-byte boundary. All entries share one top-level folder, the "prefix" (the file stem when
 * torch wrote it, "archive" for in-memory saves; any single name is accepted):
 *
 *   <prefix>/data.pkl          pickle (protocol 2 by default) of the saved object
 *   <prefix>/data/<key>        raw little-endian bytes of storage <key> ("0", "1", ...)
 *   <prefix>/byteorder         "little" or "big" (optional; torch >= 2.0 writes it)
 *   <prefix>/version, .format_version, .storage_alignment, .data/serialization_id   ignored
 *
 * data.pkl refers to storages by persistent id (BINPERSID) with the tuple
 *   ('storage', <storage class global, e.g. torch.FloatStorage>, key, location, numel)
 * where numel counts elements of the class's dtype (bytes for torch.storage.UntypedStorage),
 * and builds tensors with torch._utils._rebuild_tensor_v2(storage, storage_offset, size,
 * stride, requires_grad, backward_hooks[, metadata]), Parameters with
 * torch._utils._rebuild_parameter(tensor, requires_grad, backward_hooks), state dicts with
 * collections.OrderedDict. Offsets, sizes and strides are in elements.
 *
 * Each zip entry is a 30-byte local header "PK\3\4" (name length at +26, extra length at +28)
 * followed by the name, the extra field and the data; the central directory ("PK\1\2", 46
 * bytes + name + extra + comment per entry) and the end record ("PK\5\6", optionally preceded
 * by the zip64 locator "PK\6\7") give each entry's local header offset. libzip 1.7 does not
 * expose data offsets, so this reader parses the central directory itself (bounded) and
 * cross-checks every entry it uses against libzip's zip_stat (name, sizes, method).
 *
 * The legacy pre-1.6 format (a stream of pickles starting with the magic number
 * 0x1950a86a20f9469cfc6c, or a tar archive) is refused: its loader needs arbitrary pickle
 * semantics.
 *
 * Reading
 * -------
 * data.pkl is run by an allowlist-only interpreter (formats/pickle.h) that follows torch 1.13's
 * torch.load(weights_only=True): nothing outside that allowlist is ever resolved, and nothing
 * is ever called. Every tensor view is checked to lie inside its storage and every storage
 * inside its record.
 *
 * The result is the saved dict flattened to named tensors: nested dict keys are joined with
 * '.' ("model.encoder.weight"); int keys and list/tuple positions are written in decimal
 * ("state.0.momentum_buffer", "layers.1"). Non-tensor leaves (ints, floats, strings, None, ...)
 * are skipped and counted. The top-level object must be a dict.
 *
 * Limits (each refusal has its code): data.pkl up to 256 MiB (CP_EPKL_LIMIT); the pickle caps
 * in formats/pickle.h (objects, stack, MARKs, memo); names nested at most 64 deep and 4096
 * bytes long (CP_EPT_STRUCTURE); at most 2^21 dict/list items walked while flattening, which
 * bounds memo-shared containers (CP_EPKL_LIMIT).
 *
 * Ownership: the cp_pt_file owns everything it returns (tensor views, names, data pointers),
 * valid until cp_pt_free(). A tensor's `data` points into a read-only mmap of the file when
 * its record is stored uncompressed and the view is contiguous (a contiguous view with a
 * storage offset is mapped too); otherwise `data` is NULL and cp_pt_read() produces the
 * contiguous row-major bytes. Mapped data is only as aligned as the file places it (torch
 * aligns records to 64 bytes). A cp_pt_file is not thread-safe: cp_pt_read() fills a cache.
 */
#ifndef CTXPATCH_PYTORCH_H
#define CTXPATCH_PYTORCH_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

typedef struct cp_pt_file cp_pt_file;

/* Opens and validates a checkpoint. Errors: CP_EPT_LEGACY (message says how to re-save),
 * CP_EPT_ZIP, CP_EPT_NO_PICKLE, CP_EPT_ENTRY_NAME, CP_EPT_RECORD, CP_EPT_STORAGE_SIZE,
 * CP_EPT_TENSOR_BOUNDS, CP_EPT_BYTEORDER, CP_EPT_STRUCTURE, CP_EPKL_*, CP_EUNSUPPORTED
 * (complex/quantized storages, sparse or meta tensors, > CP_MAX_DIMS dims), CP_EIO, CP_ENOMEM. */
int cp_pt_open(cp_pt_file **out, const char *path);
/* NULL is a no-op. */
void cp_pt_free(cp_pt_file *f);

/* Number of tensors, in the order the pickle's dicts list them (depth first). */
size_t cp_pt_count(const cp_pt_file *f);
/* Tensor i (i < count), borrowed. */
const cp_tensor *cp_pt_tensor(const cp_pt_file *f, size_t i);
/* Index of the tensor named `name`, or -1. */
int64_t cp_pt_find(const cp_pt_file *f, const char *name);
/* Non-tensor leaves (ints, floats, strings, None, ...) that flattening skipped. */
size_t cp_pt_skipped_count(const cp_pt_file *f);
/* The archive's top-level folder name (borrowed). */
const char *cp_pt_prefix(const cp_pt_file *f);

/* Copies `len` bytes of tensor i's contiguous row-major little-endian bytes starting at byte
 * `offset` into buf. Works for every tensor (mapped ones are a memcpy); gathers strided views
 * and decompresses compressed records (one record cached at a time). CP_EARG when
 * offset + len > nbytes; CP_EPT_RECORD when a compressed record fails to inflate. */
int cp_pt_read(cp_pt_file *f, size_t i, uint64_t offset, void *buf, size_t len);

/* File offset of a mapped tensor's first byte (so a streaming caller can madvise(DONTNEED)
 * ranges it has consumed), or -1 when tensor i is not mapped (data == NULL). */
int64_t cp_pt_tensor_file_offset(const cp_pt_file *f, size_t i);
/* The descriptor of the file mapped (borrowed; open until cp_pt_free), for copy_file_range. */
int cp_pt_fd(const cp_pt_file *f);

#endif
