/* SHA-256 of buffers, streams and files through OpenSSL, as lowercase hex (declared in
 * include/ctxpatch/base/io.h). */
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void to_hex(char out[65], const unsigned char *digest) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  out[64] = '\0';
}

struct cp_sha256 {
  EVP_MD_CTX *ctx;
};

int cp_sha256_new(cp_sha256 **out) {
  *out = NULL;
  cp_sha256 *h = calloc(1, sizeof *h);
  if (!h || !(h->ctx = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) {
    cp_sha256_free(h);
    return cp_error_set(CP_ENOMEM, "cannot start SHA-256");
  }
  *out = h;
  return 0;
}

void cp_sha256_update(cp_sha256 *h, const void *data, size_t len) { EVP_DigestUpdate(h->ctx, data, len); }

void cp_sha256_peek(const cp_sha256 *h, char out_hex[65]) {
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_MD_CTX *copy = EVP_MD_CTX_new();
  if (!copy || !EVP_MD_CTX_copy_ex(copy, h->ctx) || !EVP_DigestFinal_ex(copy, digest, &n)) memset(digest, 0, 32);
  EVP_MD_CTX_free(copy);
  to_hex(out_hex, digest);
}

void cp_sha256_free(cp_sha256 *h) {
  if (!h) return;
  EVP_MD_CTX_free(h->ctx);
  free(h);
}

void cp_sha256_hex(char out_hex[65], const void *data, size_t len) {
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_Digest(data, len, digest, &n, EVP_sha256(), NULL);
  to_hex(out_hex, digest);
}

int cp_sha256_file(char out_hex[65], const char *path) {
  FILE *fp = NULL;
  int orc = cp_fopen_input(&fp, path);
  if (orc < 0) return orc;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int rc = 0;
  unsigned char *buf = malloc(1 << 20);
  if (!buf || !ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
    rc = cp_error_set(CP_ENOMEM, "%s: cannot start SHA-256", path);
    goto done;
  }
  size_t n;
  while ((n = fread(buf, 1, 1 << 20, fp)) > 0) EVP_DigestUpdate(ctx, buf, n);
  if (ferror(fp)) {
    rc = cp_error_set(CP_EIO, "%s: read error", path);
    goto done;
  }
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, digest, &len);
  to_hex(out_hex, digest);
done:
  free(buf);
  EVP_MD_CTX_free(ctx);
  fclose(fp);
  return rc;
}
