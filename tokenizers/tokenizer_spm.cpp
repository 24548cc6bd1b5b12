// C shim over Debian's libsentencepiece: SentencePiece .model files (ModelProto) are parsed and
// encoded by the reference library itself. No C++ exception crosses into C.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "tokenizers/spm.h"

struct tk_spm {
  sentencepiece::SentencePieceProcessor sp;
};

static void set_err(char *err, size_t errlen, const std::string &msg) {
  if (!errlen) return;
  size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if (err[i] == '\n' || err[i] == '\r') err[i] = ' ';
}

extern "C" int tk_spm_load(tk_spm **out, const char *data, size_t len, char *err, size_t errlen) {
  *out = nullptr;
  try {
    tk_spm *s = new tk_spm;
    auto st = s->sp.LoadFromSerializedProto(std::string(data, len));
    if (!st.ok()) {
      set_err(err, errlen, st.ToString());
      delete s;
      return -1;
    }
    if (s->sp.GetPieceSize() <= 0) {
      set_err(err, errlen, "model has no pieces");
      delete s;
      return -1;
    }
    *out = s;
    return 0;
  } catch (const std::exception &e) {
    set_err(err, errlen, e.what());
    return -1;
  }
}

extern "C" void tk_spm_free(tk_spm *s) { delete s; }

extern "C" int tk_spm_encode(const tk_spm *s, int **ids, size_t *n, const char *text, size_t len, char *err,
                             size_t errlen) {
  *ids = nullptr, *n = 0;
  try {
    std::vector<int> v;
    auto st = s->sp.Encode(std::string(text, len), &v);
    if (!st.ok()) {
      set_err(err, errlen, st.ToString());
      return -1;
    }
    int *p = static_cast<int *>(std::malloc((v.size() + 1) * sizeof(int)));
    if (!p) {
      set_err(err, errlen, "out of memory");
      return -1;
    }
    if (!v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(int));
    *ids = p, *n = v.size();
    return 0;
  } catch (const std::exception &e) {
    set_err(err, errlen, e.what());
    return -1;
  }
}

extern "C" int tk_spm_decode(const tk_spm *s, char **text, size_t *len, const int *ids, size_t n, char *err,
                             size_t errlen) {
  *text = nullptr, *len = 0;
  try {
    std::string out;
    auto st = s->sp.Decode(std::vector<int>(ids, ids + n), &out);
    if (!st.ok()) {
      set_err(err, errlen, st.ToString());
      return -1;
    }
    char *p = static_cast<char *>(std::malloc(out.size() + 1));
    if (!p) {
      set_err(err, errlen, "out of memory");
      return -1;
    }
    std::memcpy(p, out.data(), out.size());
    p[out.size()] = '\0';
    *text = p, *len = out.size();
    return 0;
  } catch (const std::exception &e) {
    set_err(err, errlen, e.what());
    return -1;
  }
}

extern "C" int tk_spm_size(const tk_spm *s) { return s->sp.GetPieceSize(); }
extern "C" int tk_spm_bos(const tk_spm *s) { return s->sp.bos_id(); }
extern "C" int tk_spm_eos(const tk_spm *s) { return s->sp.eos_id(); }

extern "C" int tk_spm_piece_id(const tk_spm *s, const char *piece) {
  try {
    int id = s->sp.PieceToId(piece);
    // PieceToId answers unk_id for unknown pieces: only an exact round trip is a hit.
    if (id < 0 || id >= s->sp.GetPieceSize() || s->sp.IdToPiece(id) != piece) return -1;
    return id;
  } catch (const std::exception &) {
    return -1;
  }
}

extern "C" const char *tk_spm_piece(const tk_spm *s, int id) { return s->sp.IdToPiece(id).c_str(); }

extern "C" bool tk_spm_is_control(const tk_spm *s, int id) {
  return s->sp.IsControl(id) || s->sp.IsUnknown(id);
}

extern "C" float tk_spm_score(const tk_spm *s, int id) { return s->sp.GetScore(id); }

extern "C" int tk_spm_type(const tk_spm *s, int id) {
  if (s->sp.IsUnknown(id)) return 2;
  if (s->sp.IsControl(id)) return 3;
  if (s->sp.IsUnused(id)) return 5;
  if (s->sp.IsByte(id)) return 6;
  return 1; // the library has no IsUserDefined: user-defined pieces are reported as normal
}
