/* The residual layouts of a layer (include/ctxpatch/model/layer_layout.h): the one copy of the
 * order in which the engines and the ONNX builders norm, attend, add and feed forward. */
#include "ctxpatch/model/layer_layout.h"

#include <assert.h>

int cp_layer_run(const cp_layer_ops *ops, void *ctx, cp_residual layout, bool cross) {
  int rc;
  if (layout == CP_RESIDUAL_POST_NORM) { /* modeling_olmo2.py Olmo2DecoderLayer.forward: the modules read x */
    assert(ops->ffn);
    if ((rc = ops->attn(ctx, false, CP_SLOT_T, CP_SLOT_X)) ||
        (rc = ops->norm(ctx, CP_LAYER_NORM_POST_ATTN, CP_SLOT_T, CP_SLOT_T)) ||
        (rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T)) || (rc = ops->ffn(ctx, CP_SLOT_T, CP_SLOT_X)) ||
        (rc = ops->norm(ctx, CP_LAYER_NORM_POST_FFN, CP_SLOT_T, CP_SLOT_T)))
      return rc;
    return ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T);
  }
  if ((rc = ops->norm(ctx, CP_LAYER_NORM_ATTN, CP_SLOT_H, CP_SLOT_X)) ||
      (rc = ops->attn(ctx, false, CP_SLOT_T, CP_SLOT_H)))
    return rc;
  switch (layout) {
    case CP_RESIDUAL_PARALLEL: /* both modules read the layer's input */
      if ((rc = ops->norm(ctx, CP_LAYER_NORM_FFN, CP_SLOT_H, CP_SLOT_X)) ||
          (rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T)))
        return rc;
      return ops->ffn_add(ctx, CP_SLOT_X, CP_SLOT_H);
    case CP_RESIDUAL_FROM_NORM:
      if ((rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_H, CP_SLOT_T)) ||
          (rc = ops->norm(ctx, CP_LAYER_NORM_FFN, CP_SLOT_H, CP_SLOT_X)) || (rc = ops->copy(ctx, CP_SLOT_X, CP_SLOT_H)))
        return rc;
      return ops->ffn_add(ctx, CP_SLOT_X, CP_SLOT_H);
    case CP_RESIDUAL_SANDWICH:
      assert(ops->ffn);
      if ((rc = ops->norm(ctx, CP_LAYER_NORM_POST_ATTN, CP_SLOT_T, CP_SLOT_T)) ||
          (rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T)) ||
          (rc = ops->norm(ctx, CP_LAYER_NORM_FFN, CP_SLOT_H, CP_SLOT_X)) ||
          (rc = ops->ffn(ctx, CP_SLOT_T, CP_SLOT_H)) ||
          (rc = ops->norm(ctx, CP_LAYER_NORM_POST_FFN, CP_SLOT_T, CP_SLOT_T)))
        return rc;
      return ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T);
    case CP_RESIDUAL_SCALED: /* GraniteDecoderLayer.forward: residual + out * residual_multiplier */
      assert(ops->ffn && ops->scale);
      if ((rc = ops->scale(ctx, CP_SLOT_T)) || (rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T)) ||
          (rc = ops->norm(ctx, CP_LAYER_NORM_FFN, CP_SLOT_H, CP_SLOT_X)) ||
          (rc = ops->ffn(ctx, CP_SLOT_T, CP_SLOT_H)) || (rc = ops->scale(ctx, CP_SLOT_T)))
        return rc;
      return ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T);
    case CP_RESIDUAL_PRE_NORM:
    case CP_RESIDUAL_POST_NORM: break;
  }
  if ((rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T))) return rc;
  if (cross &&
      ((rc = ops->norm(ctx, CP_LAYER_NORM_CROSS, CP_SLOT_H, CP_SLOT_X)) ||
       (rc = ops->attn(ctx, true, CP_SLOT_T, CP_SLOT_H)) || (rc = ops->add(ctx, CP_SLOT_X, CP_SLOT_X, CP_SLOT_T))))
    return rc;
  if ((rc = ops->norm(ctx, CP_LAYER_NORM_FFN, CP_SLOT_H, CP_SLOT_X))) return rc;
  return ops->ffn_add(ctx, CP_SLOT_X, CP_SLOT_H);
}
