/* Private to verify/report_*.c: the parts of a certificate (docs/certificate.md) the report is
 * drawn from, checked and copied out of the cJSON tree. */
#ifndef CTXPATCH_VERIFY_REPORT_DATA_H
#define CTXPATCH_VERIFY_REPORT_DATA_H

#include <stdbool.h>

#include <cjson/cJSON.h>

typedef struct {
  bool present;
  double *acc;  /* [n_lengths] accuracy over depths (NaN = null) */
  double *cell; /* [n_lengths * n_depths] correct_by_depth / samples (or / prompts_by_depth) */
  double *ran;  /* [n_lengths * n_depths] the prompts behind each cell: samples, or prompts_by_depth */
} side_probe;

typedef struct {
  bool present;
  int n;
  double *len, *pmax, *entropy; /* [n] */
} side_attention;

typedef struct {
  int n_probes, n_lengths, n_depths;
  const char **probe_names; /* [n_probes], borrowed from the cJSON */
  double *lengths;          /* [n_lengths] */
  double *depths;           /* [n_depths] */
  double samples;
  bool has_baseline;
  side_probe *side[2];      /* [n_probes] each; [1] only with a baseline */
  side_attention att[2];
} report_data;

/* "patched", "baseline": the certificate's results keys, indexed by side. */
extern const char *const REPORT_SIDE_NAME[2];

/* Checks the parts the page is drawn from (probes and results.patched required; the rest
 * optional but typed) and fills *d (zeroed by the caller; free with report_data_free, also
 * after a failure). Probe names are borrowed from `certificate`. */
int report_data_parse(report_data *d, const cJSON *certificate);
void report_data_free(report_data *d);

#endif
