/* External data by the ranges tensors use (issue 33 item 8): a ~300-byte graph whose one
 * 256-byte initializer lies at 5 GiB in a sparse 12 GiB data file. The graph digest
 * (formats/onnx_digest.h) and the placement of the data file beside another graph
 * (formats/onnx_data.h, what `patch IN.onnx OUT/x.onnx` does) each touch a few pages: counted by
 * the kernel (page faults of this process: mapped bytes read; /proc/self/io rchar: bytes read
 * by read()), not by the clock: under 500 faults and 1 MiB each. The previous whole-file digest
 * took 7,018 and 74,698 faults (12 GiB hashed, 4 minutes here), its copy 3.1M faults, 12 GiB of
 * rchar and 12 GiB of disk, the "same bytes?" check of a second placement 24 GiB of rchar.
 * The digest is the recipe's (built here with base SHA-256 from the graph bytes and the tensor's
 * 256 bytes); the placed copy has the same size, holds the tensor's bytes at its offset,
 * allocates under 1 MiB of disk and gives the copied graph the same digest; placing it again
 * keeps it, a changed byte in the range is CP_EEXIST without replace. A stored digest of the
 * earlier whole-file form is honoured where the unused bytes are padding (a 64-byte file, 16
 * used), and never computed over the sparse file. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx_data.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "onnx.pb-c.h"
#include "test.h"

static char tmpdir[] = "/tmp/ctxpatch-test-onnx-ranges-XXXXXX";

static const char *tpath(const char *name) {
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
  return p[k];
}

/* A model y = Identity(w), w float [numel] external at `offset` of d.bin; meta (may be NULL) as
 * ctxpatch.graph_sha256. *n gets the size. */
static uint8_t *make_model(size_t *n, uint64_t offset, int64_t numel, const char *meta) {
  char off[32], len[32];
  snprintf(off, sizeof off, "%llu", (unsigned long long)offset);
  snprintf(len, sizeof len, "%llu", (unsigned long long)numel * 4);
  Onnx__StringStringEntryProto e[3] = {ONNX__STRING_STRING_ENTRY_PROTO__INIT, ONNX__STRING_STRING_ENTRY_PROTO__INIT,
                                       ONNX__STRING_STRING_ENTRY_PROTO__INIT};
  Onnx__StringStringEntryProto *ep[3] = {&e[0], &e[1], &e[2]};
  e[0].key = "location", e[0].value = "d.bin", e[1].key = "offset", e[1].value = off;
  e[2].key = "length", e[2].value = len;
  int64_t dims[1] = {numel};
  Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT, *tp = &t;
  t.name = "w", t.has_data_type = 1, t.data_type = 1, t.dims = dims, t.n_dims = 1;
  t.has_data_location = 1, t.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  t.external_data = ep, t.n_external_data = 3;
  static char *in[] = {"w"}, *out[] = {"y"};
  Onnx__NodeProto nd = ONNX__NODE_PROTO__INIT, *np = &nd;
  nd.name = "id", nd.op_type = "Identity", nd.input = in, nd.n_input = 1, nd.output = out, nd.n_output = 1;
  Onnx__ValueInfoProto vy = ONNX__VALUE_INFO_PROTO__INIT, *vyp = &vy;
  vy.name = "y";
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g", g.node = &np, g.n_node = 1, g.initializer = &tp, g.n_initializer = 1, g.output = &vyp, g.n_output = 1;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  os.has_version = 1, os.version = 17;
  Onnx__StringStringEntryProto me = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *mep = &me;
  me.key = CP_ONNX_GRAPH_DIGEST_KEY, me.value = (char *)meta;
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.graph = &g, m.opset_import = &osp, m.n_opset_import = 1;
  if (meta) m.metadata_props = &mep, m.n_metadata_props = 1;
  *n = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *b = malloc(*n);
  protobuf_c_message_pack(&m.base, b);
  return b;
}

/* The recipe: SHA-256 of the graph bytes (no ctxpatch entries), 0, "d.bin", 0, hex of `data_hex`. */
static void recipe(char hex[65], const uint8_t *model, size_t n, const char data_hex[65]) {
  cp_sha256 *h = NULL;
  if (cp_sha256_new(&h) < 0) abort();
  cp_sha256_update(h, model, n);
  cp_sha256_update(h, "\0d.bin\0", 7);
  cp_sha256_update(h, data_hex, 64);
  cp_sha256_peek(h, hex);
  cp_sha256_free(h);
}

typedef struct {
  long faults;
  long long rchar;
} work;

static work now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  work w = {u.ru_minflt + u.ru_majflt, -1};
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "rchar: ", 7)) w.rchar = atoll(line + 7);
  if (f) fclose(f);
  return w;
}

/* Work since `a`: at most 500 page faults and 1 MiB read(). */
static void check_small(work a, const char *what) {
  work b = now();
  printf("%s: %ld page faults, %lld bytes read\n", what, b.faults - a.faults, b.rchar - a.rchar);
  CHECK_MSG(b.faults - a.faults < 500, "%s: %ld page faults (a whole-file pass over 12 GiB)", what,
            b.faults - a.faults);
  CHECK_MSG(a.rchar < 0 || b.rchar - a.rchar < (1 << 20), "%s: %lld bytes read", what, b.rchar - a.rchar);
}

static void write_bytes(const char *path, const void *p, size_t n) {
  CHECK_RC(0, cp_write_file_atomic(NULL, path, p, n));
}

static void test_sparse(void) {
  const uint64_t at = (uint64_t)5 << 30, size = (uint64_t)12 << 30;
  float w[64];
  for (int k = 0; k < 64; k++) w[k] = (float)k + 0.5f;
  int fd = open(tpath("d.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) test_skip("no sparse 12 GiB file here");
  CHECK(pwrite(fd, w, sizeof w, (off_t)at) == (ssize_t)sizeof w);
  close(fd);
  size_t n;
  uint8_t *b = make_model(&n, at, 64, NULL);
  write_bytes(tpath("model.onnx"), b, n);
  char want[65], dh[65], hex[65];
  cp_sha256_hex(dh, w, sizeof w);
  recipe(want, b, n, dh);

  cp_onnx_model *m = NULL;
  work a = now();
  CHECK_RC(0, cp_onnx_file_digest(hex, &m, tpath("model.onnx")));
  check_small(a, "digest");
  CHECK_MSG(m && !strcmp(hex, want), "digest %s, recipe %s", hex, want);

  /* Placed beside a graph in out/. */
  CHECK(mkdir(tpath("out"), 0755) == 0);
  bool written = false;
  a = now();
  CHECK_RC(0, cp_onnx_data_place(&written, m, 0, tpath("out/d.bin"), false));
  check_small(a, "place");
  CHECK(written);
  struct stat st;
  CHECK(stat(tpath("out/d.bin"), &st) == 0 && (uint64_t)st.st_size == size);
  CHECK_MSG((uint64_t)st.st_blocks * 512 < (1 << 20), "the copy allocates %llu bytes of disk",
            (unsigned long long)st.st_blocks * 512);
  float back[64] = {0};
  fd = open(tpath("out/d.bin"), O_RDONLY);
  CHECK(fd >= 0 && pread(fd, back, sizeof back, (off_t)at) == (ssize_t)sizeof back && !memcmp(back, w, sizeof w));
  if (fd >= 0) close(fd);
  write_bytes(tpath("out/model.onnx"), b, n);
  cp_onnx_model *m2 = NULL;
  char hex2[65];
  CHECK_RC(0, cp_onnx_file_digest(hex2, &m2, tpath("out/model.onnx")));
  CHECK(!strcmp(hex2, want));
  cp_onnx_model_free(m2);
  a = now();
  CHECK_RC(0, cp_onnx_data_place(&written, m, 0, tpath("out/d.bin"), false));
  check_small(a, "place again");
  CHECK(!written);
  /* A byte of the range changed in the copy: refused without replace, rewritten with it. */
  fd = open(tpath("out/d.bin"), O_WRONLY);
  CHECK(fd >= 0 && pwrite(fd, "x", 1, (off_t)at + 7) == 1);
  if (fd >= 0) close(fd);
  CHECK_RC(CP_EEXIST, cp_onnx_data_place(&written, m, 0, tpath("out/d.bin"), false));
  CHECK_RC(0, cp_onnx_data_place(&written, m, 0, tpath("out/d.bin"), true));
  CHECK(written);
  cp_onnx_model_free(m), m = NULL;

  /* A stored value that is not the digest (say, an attacker's, hoping for a whole-file pass):
   * the digest stays the ranges' one, still a few pages of work. */
  free(b);
  b = make_model(&n, at, 64, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  write_bytes(tpath("model.onnx"), b, n);
  a = now();
  CHECK_RC(0, cp_onnx_file_digest(hex, &m, tpath("model.onnx")));
  check_small(a, "digest with a foreign stored value");
  cp_onnx_model_free(m);
  free(b);
  unlink(tpath("out/d.bin")), unlink(tpath("out/model.onnx")), rmdir(tpath("out"));
  unlink(tpath("d.bin")), unlink(tpath("model.onnx"));
}

/* The whole-file form of an earlier version, stored in a graph whose file holds padding. */
static void test_legacy(void) {
  uint8_t data[64];
  for (int k = 0; k < 64; k++) data[k] = (uint8_t)(k * 7 + 1);
  write_bytes(tpath("d.bin"), data, sizeof data);
  size_t n;
  uint8_t *plain = make_model(&n, 16, 4, NULL); /* floats at [16, 32) */
  char whole[65], ranges[65], dh[65], old[65], hex[65];
  cp_sha256_hex(dh, data, sizeof data);
  recipe(old, plain, n, dh);
  cp_sha256_hex(dh, data + 16, 16);
  recipe(ranges, plain, n, dh);
  free(plain);
  uint8_t *b = make_model(&n, 16, 4, old);
  write_bytes(tpath("model.onnx"), b, n);
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_file_digest(whole, &m, tpath("model.onnx")));
  CHECK_MSG(!strcmp(whole, old), "an earlier version's stored digest %s, computed %s", old, whole);
  cp_onnx_model_free(m), m = NULL;
  free(b);
  b = make_model(&n, 16, 4, ranges);
  write_bytes(tpath("model.onnx"), b, n);
  CHECK_RC(0, cp_onnx_file_digest(hex, &m, tpath("model.onnx")));
  CHECK(!strcmp(hex, ranges) && strcmp(ranges, old));
  cp_onnx_model_free(m);
  free(b);
  unlink(tpath("d.bin")), unlink(tpath("model.onnx"));
}

int main(void) {
  if (!mkdtemp(tmpdir)) test_skip("no temporary folder");
  test_sparse();
  test_legacy();
  rmdir(tmpdir);
  return test_finish();
}
