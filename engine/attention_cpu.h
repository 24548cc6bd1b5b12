/* Streaming attention kernel of the CPU engine (internal to engine/).
 *
 * Runs one cp_attn_call (ctxpatch/engine/attn_call.h, tables built). Work items are (head, tile
 * of rows); each walks only the key blocks that some row of its tile can see
 * (cp_plan_visible_ranges), keeping an online softmax (running max m, l = sum e^(s-m),
 * t = sum e^(s-m) (s-m)), so memory is O(rows + keys) and the row entropy is log l - t/l
 * exactly, without a second pass. */
#ifndef CTXPATCH_ENGINE_ATTENTION_CPU_H
#define CTXPATCH_ENGINE_ATTENTION_CPU_H

#include "ctxpatch/engine/attn_call.h"
#include "engine/pool.h"

/* Runs the call on the pool; c->tab must come from cp_attn_tables_build. Returns 0 or
 * CP_ENOMEM (scratch allocation). With row_pmax set, row_ent must be set too. */
int cp_cpu_attention(cp_pool *pool, const cp_attn_call *c);

#endif
