/* libctxpatch's public API in one include, floor by floor (each header states what it owns and
 * what the caller owns). Programs link with `pkg-config --cflags --libs ctxpatch` or CMake's
 * find_package(ctxpatch) and target ctxpatch::ctxpatch. */
#ifndef CTXPATCH_CTXPATCH_H
#define CTXPATCH_CTXPATCH_H

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/version.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/verify.h"
#include "ctxpatch/patchers/patch.h"

#endif
