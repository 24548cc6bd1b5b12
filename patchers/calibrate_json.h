/* Floor: patchers (private: cJSON stays out of the public headers). The JSON form of a
 * calibration table (include/ctxpatch/patchers/calibrate.h). */
#ifndef CTXPATCH_PATCHERS_CALIBRATE_JSON_H
#define CTXPATCH_PATCHERS_CALIBRATE_JSON_H

#include <cjson/cJSON.h>

#include "ctxpatch/patchers/calibrate.h"

/* JSON form of the table (what `calibrate --json` prints and `patch` stores in its metadata).
 * NULL when out of memory; the caller frees with cJSON_Delete. */
cJSON *cp_calib_table_to_json(const cp_calib_table *t);

#endif
