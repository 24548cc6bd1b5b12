#!/usr/bin/env python3
"""Trains one probe model on the synthetic retrieval mix at a training length of 256 tokens and
writes it in Hugging Face layout under examples/probe-models/<name>/.

    scripts/py lab/train.py --model rope-probe [--steps N] [--device cpu|cuda]

The defaults are the recipe of the bundled models (batch 16, AdamW lr 2e-3 with warmup + cosine,
DEFAULT_STEPS below, one CPU thread: two models train side by side on a 2-core machine, ~15-17
minutes each there). CPU by default; a GPU when one is present (or --device cuda). Fixed
seeds: the data stream and the initialisation are functions of --seed alone; a CPU run and a
GPU run give different floating-point rounding, so their weights differ slightly.

    scripts/py lab/train.py --model alibi-probe --v2

--v2 is the recipe of the v2 models (issue 18; examples/probe-models/v2/): the v2 tokenizer
(v2/tokenizer.json, bpe.py --natural), natural text in the mix (data.py `text`: TinyStories
[0, 800)), a length curriculum (few lines first), V2 below; output v2/<name>/. Any option given
explicitly overrides the recipe's value.
"""
import argparse
import collections
import json
import math
import os
import random
import time

import torch

from ctxpatch_ref import bpe, data, nets, stio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PM = os.path.join(REPO, "examples", "probe-models")   # the probe models' folder (v1; v2/ below it)

TRAIN_LEN = 256
MIN_PROMPT = 32                  # prompt lengths uniform in [MIN_PROMPT, TRAIN_LEN - 10]
MIX = (0.6, 0.3, 0.1)            # passkey, lines, copy
TOKENIZER = os.path.join(PM, "tokenizer.json")
D, LAYERS, HEADS, DFF = 64, 3, 4, 256
# v2 recipe: passkey, lines, copy, text fractions; size d,layers,heads,d_ff; curriculum fraction
V2 = {"mix": "0.3,0.4,0.05,0.25", "size": "64,3,4,256", "curriculum": 0.3, "steps": 6000,
      "tokenizer": os.path.join(PM, "v2", "tokenizer.json")}
CURRICULUM_START = 96            # the prompts' upper bound at step 0 of a curriculum (tokens)
# the config fields of each layout that --size sets (BLOOM's MLP is 4 * d, no field)
SIZE_FIELDS = {"d": ("hidden_size", "d_model"), "layers": ("num_hidden_layers", "n_layer", "num_layers",
                                                          "num_decoder_layers"),
               "heads": ("num_attention_heads", "num_key_value_heads", "n_head", "num_heads"),
               "dff": ("intermediate_size", "d_ff")}


def configs(V):
    """HF config.json of each probe (field names as HF writes them)."""
    common_dec = [("bos_token_id", 2), ("eos_token_id", 1), ("pad_token_id", 0)]
    rope = collections.OrderedDict([
        ("architectures", ["LlamaForCausalLM"]), ("attention_bias", False)] + common_dec + [
        ("hidden_act", "silu"), ("hidden_size", D), ("initializer_range", 0.02),
        ("intermediate_size", DFF), ("max_position_embeddings", TRAIN_LEN), ("model_type", "llama"),
        ("num_attention_heads", HEADS), ("num_hidden_layers", LAYERS), ("num_key_value_heads", HEADS),
        ("rms_norm_eps", 1e-6), ("rope_scaling", None), ("rope_theta", 10000.0),
        ("tie_word_embeddings", False), ("torch_dtype", "float32"), ("use_cache", True),
        ("vocab_size", V)])
    fire = collections.OrderedDict([
        ("architectures", ["CtxpatchFireForCausalLM"]), ("attention_bias", False)] + common_dec + [
        ("fire_c_init", 1.0), ("fire_mlp_width", 32), ("fire_shared", False),
        ("fire_threshold", float(TRAIN_LEN)),
        ("hidden_act", "silu"), ("hidden_size", D), ("initializer_range", 0.02),
        ("intermediate_size", DFF), ("max_position_embeddings", TRAIN_LEN), ("model_type", "ctxpatch_fire"),
        ("num_attention_heads", HEADS), ("num_hidden_layers", LAYERS), ("num_key_value_heads", HEADS),
        ("rms_norm_eps", 1e-6), ("tie_word_embeddings", False), ("torch_dtype", "float32"),
        ("use_cache", True), ("vocab_size", V)])
    alibi = collections.OrderedDict([
        ("apply_residual_connection_post_layernorm", False), ("architectures", ["BloomForCausalLM"]),
        ("attention_dropout", 0.0)] + common_dec + [
        ("hidden_dropout", 0.0), ("hidden_size", D), ("initializer_range", 0.02),
        ("layer_norm_epsilon", 1e-5), ("model_type", "bloom"), ("n_head", HEADS), ("n_layer", LAYERS),
        ("pretraining_tp", 1), ("seq_length", TRAIN_LEN), ("slow_but_exact", False),
        ("tie_word_embeddings", True), ("torch_dtype", "float32"), ("use_cache", True),
        ("vocab_size", V)])
    t5 = collections.OrderedDict([
        ("architectures", ["T5ForConditionalGeneration"]), ("d_ff", DFF), ("d_kv", D // HEADS),
        ("d_model", D), ("decoder_start_token_id", 0), ("dropout_rate", 0.0), ("eos_token_id", 1),
        ("feed_forward_proj", "relu"), ("initializer_factor", 1.0), ("is_encoder_decoder", True),
        ("layer_norm_epsilon", 1e-6), ("model_type", "t5"), ("n_positions", TRAIN_LEN),
        ("num_decoder_layers", LAYERS), ("num_heads", HEADS), ("num_layers", LAYERS),
        ("pad_token_id", 0), ("relative_attention_max_distance", 128),
        ("relative_attention_num_buckets", 32), ("tie_word_embeddings", False),
        ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V)])
    return {"rope-probe": rope, "fire-probe": fire, "alibi-probe": alibi, "t5-probe": t5}


def resize(cfg, size):
    """cfg with the model size d,layers,heads,d_ff of --size (T5's d_kv follows d / heads)."""
    d, layers, heads, dff = (int(x) for x in size.split(","))
    if d % heads:
        raise SystemExit("train.py: --size %s: d is not a multiple of heads" % size)
    val = {"d": d, "layers": layers, "heads": heads, "dff": dff}
    for k, fields in SIZE_FIELDS.items():
        for f in fields:
            if f in cfg:
                cfg[f] = val[k]
    if "d_kv" in cfg:
        cfg["d_kv"] = d // heads
    return cfg


def prompt_hi(step, steps, curriculum, max_len=TRAIN_LEN):
    """Upper bound of the prompt lengths at this step: ramps from CURRICULUM_START to
    max_len - 10 over the first `curriculum` fraction of the steps (lines: few lines first)."""
    top = max_len - 10
    if not curriculum:
        return top
    f = min(1.0, (step + 1) / max(1.0, curriculum * steps))
    return min(top, CURRICULUM_START + int(round((top - CURRICULUM_START) * f)))


def build(name, cfg, seed, fire_learn_L=False):
    if name == "t5-probe":
        return nets.T5Net(cfg, seed)
    if name == "alibi-probe":
        return nets.BloomNet(cfg, seed)
    return nets.LlamaNet(cfg, seed, "rope" if name == "rope-probe" else "fire", learn_L_multiplier=fire_learn_L)


def fire_options(cfg, a):
    """The FIRE options into the fire-probe config: hidden layers (fire_mlp_layers 2, the paper's,
    written only when not 1) and c's initial value (c is learned; fire.c stores the value used).
    init_L is fire_threshold = the training length."""
    if a.fire_paper:
        a.fire_layers, a.fire_learn_threshold = 2, True
    items = list(cfg.items())
    at = [k for k, _ in items].index("fire_mlp_width")
    if a.fire_layers != 1:
        items.insert(at, ("fire_mlp_layers", a.fire_layers))
    cfg = collections.OrderedDict(items)
    if a.fire_c_init is not None:
        cfg["fire_c_init"] = float(a.fire_c_init)
    return cfg


def fire_flags(a):
    """The FIRE options as command-line flags (for the logged command and replay)."""
    if a.model != "fire-probe":
        return ""
    return ((" --fire-layers %d" % a.fire_layers if a.fire_layers != 1 else "")
            + (" --fire-learn-threshold" if a.fire_learn_threshold else "")
            + (" --fire-c-init %g" % a.fire_c_init if a.fire_c_init is not None else ""))


def lines_flag(a):
    """--lines-min / --lookup-weight as flags, only when not the default (recorded commands stay as
    they were)."""
    return ((" --lines-min %d" % a.lines_min if a.lines_min != 1 else "")
            + (" --lookup-weight %g" % a.lookup_weight if a.lookup_weight else ""))


def make_batch(rng, tok, n, is_t5, dev, max_len=TRAIN_LEN, mix=None, min_prompt=None, text=None, hi=None,
               lines_min=1, lookup_weight=None):
    """Decoder-only: ids [n, max_len] = prompt + answer + eos, right-padded; targets with -100 at
    padding; answer tokens carry weight 4 in the loss (a `text` window: plain LM, weight 1, no
    eos). T5: encoder ids/mask, decoder in/out. hi: the prompts' upper bound (curriculum);
    lines_min: the fewest lines of a lines sample. lookup_weight: a lines answer's first digit (where
    the lookup is decided; teacher forcing gives the rest from it) weighs this many times the other
    answer tokens, and T5 returns the weights as a fifth tensor."""
    samples, firsts = [], []
    for _ in range(n):
        target = rng.randint(min_prompt or MIN_PROMPT, hi or max_len - 10)
        s = data.sample(rng, target, tok.encode, mix or MIX, text=text, lines_min=lines_min)
        if s["kind"] == "text":
            samples.append((s["ids"][:1], s["ids"][1:]))     # every token after the first is a target
            firsts.append(None)
            continue
        p, a = tok.encode(s["prompt"]), tok.encode(s["answer"]) + [tok.eos_id]
        if not is_t5 and len(p) + len(a) > max_len:
            p = p[len(p) + len(a) - max_len:]
        if lookup_weight and s["kind"] == "lines":
            first = next(k for k, t in enumerate(a) if tok.decode([t]).isdigit())
            firsts.append(first)
        else:
            firsts.append(None)
        samples.append((p[-max_len:], a))
    # pad to the longest sample of the batch (short samples make cheap steps)
    if is_t5:
        max_len = max(len(p) for p, _ in samples)
        Ta = max(len(a) for _, a in samples) + 1
        enc = torch.zeros(n, max_len, dtype=torch.long)
        din = torch.zeros(n, Ta, dtype=torch.long)
        dout = torch.full((n, Ta), -100, dtype=torch.long)
        for b, (p, a) in enumerate(samples):
            enc[b, :len(p)] = torch.tensor(p)
            din[b, 1:len(a)] = torch.tensor(a[:-1])     # decoder_start 0, then the answer
            dout[b, :len(a)] = torch.tensor(a)
        if not lookup_weight:
            return enc.to(dev), (enc != 0).to(dev), din.to(dev), dout.to(dev)
        dw = (dout != -100).float()
        for b, f in enumerate(firsts):
            if f is not None:
                dw[b, f] = lookup_weight
        return enc.to(dev), (enc != 0).to(dev), din.to(dev), dout.to(dev), dw.to(dev)
    max_len = max(len(p) + len(a) for p, a in samples)
    ids = torch.zeros(n, max_len, dtype=torch.long)
    tgt = torch.full((n, max_len), -100, dtype=torch.long)
    wt = torch.zeros(n, max_len)
    for b, (p, a) in enumerate(samples):
        seq = p + a
        ids[b, :len(seq)] = torch.tensor(seq)
        tgt[b, :len(seq) - 1] = torch.tensor(seq[1:])
        wt[b, :len(seq) - 1] = 1.0
        if len(p) > 1:          # a text window (len(p) == 1) has no answer to weigh
            wt[b, len(p) - 1:len(seq) - 1] = 4.0
        if firsts[b] is not None:
            wt[b, len(p) - 1 + firsts[b]] = 4.0 * lookup_weight
    return ids.to(dev), tgt.to(dev), wt.to(dev)


def loss_of(net, batch, is_t5):
    if is_t5:
        enc, km, din, dout = batch[:4]
        logits = net.decode(net.encode(enc, km), km, din)
        if len(batch) == 4:
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), dout.reshape(-1))
        l = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), dout.reshape(-1),
                                              reduction="none", ignore_index=-100)
        return (l * batch[4].reshape(-1)).sum() / batch[4].sum()
    ids, tgt, wt = batch
    logits = net.forward(ids)
    l = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                          reduction="none", ignore_index=-100)
    return (l * wt.reshape(-1)).sum() / wt.sum()


def save(name, net, cfg, out, meta, tokenizer=TOKENIZER):
    os.makedirs(out, exist_ok=True)
    sd = collections.OrderedDict(sorted(net.state_dict().items()))
    if cfg.get("tie_word_embeddings") and "lm_head.weight" in sd:
        del sd["lm_head.weight"]
    stio.write_atomic(os.path.join(out, "model.safetensors"),
                      stio.safetensors_bytes(sd, {"format": "pt"}))
    if name == "alibi-probe":
        stio.write_atomic(os.path.join(out, "pytorch_model.bin"), stio.torch_zip_bytes(sd))
    stio.write_atomic(os.path.join(out, "config.json"), stio.json_bytes(cfg))
    gen = collections.OrderedDict([("bos_token_id", 2), ("eos_token_id", 1), ("pad_token_id", 0),
                                   ("do_sample", False), ("max_new_tokens", 10)])
    if cfg.get("is_encoder_decoder"):
        gen = collections.OrderedDict([("decoder_start_token_id", 0), ("eos_token_id", 1),
                                       ("pad_token_id", 0), ("do_sample", False), ("max_new_tokens", 10)])
    stio.write_atomic(os.path.join(out, "generation_config.json"), stio.json_bytes(gen))
    with open(tokenizer, "rb") as f:
        stio.write_atomic(os.path.join(out, "tokenizer.json"), f.read())
    tc = collections.OrderedDict([("tokenizer_class", "PreTrainedTokenizerFast"), ("bos_token", "<s>"),
                                  ("eos_token", "</s>"), ("pad_token", "<pad>"),
                                  ("model_max_length", TRAIN_LEN), ("add_bos_token", False)])
    stio.write_atomic(os.path.join(out, "tokenizer_config.json"), stio.json_bytes(tc))
    stio.write_atomic(os.path.join(out, "train_log.json"), stio.json_bytes(meta))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=["t5-probe", "alibi-probe", "rope-probe", "fire-probe"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop after this many steps of the --steps schedule (replays a --time-limit run)")
    ap.add_argument("--mix", default=None, help="passkey,lines,copy[,text] fractions (default %s)"
                    % ",".join(map(str, MIX)))
    ap.add_argument("--min-prompt", type=int, default=MIN_PROMPT)
    ap.add_argument("--v2", action="store_true", help="the v2 recipe (V2 above); output v2/<name>/")
    ap.add_argument("--size", default=None, help="d,layers,heads,d_ff (default %d,%d,%d,%d)" % (D, LAYERS, HEADS, DFF))
    ap.add_argument("--curriculum", type=float, default=None,
                    help="fraction of the steps over which the prompts' upper bound ramps from %d to %d"
                    % (CURRICULUM_START, TRAIN_LEN - 10))
    ap.add_argument("--lines-min", type=int, default=1,
                    help="the fewest lines of a lines sample (1: as many as the drawn length holds, so "
                         "short prompts hold one line and need no lookup)")
    ap.add_argument("--lookup-weight", type=float, default=None,
                    help="weight of a lines answer's first digit, in units of the other answer tokens' "
                         "(default: the same)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json (default %s)" % TOKENIZER)
    ap.add_argument("--resume", default=None,
                    help="start from the weights of this saved probe folder (fresh optimizer and schedule)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="stop early (and save) after this many seconds; the steps done are recorded")
    ap.add_argument("--fire-layers", type=int, choices=[1, 2], default=1,
                    help="fire-probe: hidden layers of the FIRE MLP (2: the paper's)")
    ap.add_argument("--fire-learn-threshold", action="store_true",
                    help="fire-probe: learn L = |L_multiplier * init_L|, init_L = the training length")
    ap.add_argument("--fire-c-init", type=float, default=None, help="fire-probe: initial c (learned)")
    ap.add_argument("--fire-paper", action="store_true",
                    help="fire-probe: the paper's FIRE (--fire-layers 2 --fire-learn-threshold)")
    a = ap.parse_args()
    rec = V2 if a.v2 else {"mix": ",".join(map(str, MIX)), "size": None, "curriculum": 0.0,
                           "steps": DEFAULT_STEPS[a.model], "tokenizer": TOKENIZER}
    for k in ("mix", "size", "curriculum", "steps", "tokenizer"):
        if getattr(a, k) is None:
            setattr(a, k, rec[k])
    torch.set_num_threads(a.threads)
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    steps = a.steps
    mix = tuple(float(x) for x in a.mix.split(","))
    if len(mix) not in (3, 4) or abs(sum(mix) - 1.0) > 1e-6:
        raise SystemExit("train.py: --mix %s: 3 or 4 fractions summing to 1" % a.mix)
    torch.manual_seed(a.seed)
    if not os.path.exists(a.tokenizer):
        raise SystemExit("run bpe.py --out %s first" % a.tokenizer)
    tok = bpe.Tokenizer(a.tokenizer)
    text = None
    if len(mix) == 4 and mix[3] > 0:
        if a.model == "t5-probe":
            raise SystemExit("train.py: the text task is for the decoder probes (t5-probe: 3 fractions)")
        text = data.Text(tok.encode, tok.bos_id)
    cfg = configs(len(tok.vocab))[a.model]
    if a.model == "fire-probe":
        cfg = fire_options(cfg, a)
    if a.size:
        cfg = resize(cfg, a.size)
    net = build(a.model, cfg, a.seed, a.model == "fire-probe" and a.fire_learn_threshold)
    prior = None
    if a.resume:
        _, sd = stio.read_safetensors(os.path.join(a.resume, "model.safetensors"))
        net.load(sd)
        with open(os.path.join(a.resume, "train_log.json")) as f:
            prior = json.load(f)
        rng_seed = a.seed + 1 + prior.get("steps_total", prior["steps"])   # fresh data stream
    net = net.to(dev)
    is_t5 = a.model == "t5-probe"
    decay = [q for k, q in sorted(net.p.items()) if q.dim() >= 2]
    nodecay = [q for k, q in sorted(net.p.items()) if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": nodecay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    sched = lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    rng = random.Random(rng_seed if a.resume else a.seed)
    t0 = time.time()
    ema = None
    log = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = a.lr * sched(step)
        batch = make_batch(rng, tok, a.batch, is_t5, dev, mix=mix, min_prompt=a.min_prompt, text=text,
                           hi=prompt_hi(step, steps, a.curriculum), lines_min=a.lines_min,
                           lookup_weight=a.lookup_weight)
        loss = loss_of(net, batch, is_t5)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.params(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        stop = (a.time_limit is not None and time.time() - t0 > a.time_limit) or \
            (a.stop_after is not None and step + 1 >= a.stop_after)
        if step % 100 == 0 or step == steps - 1 or stop:
            msg = "step %d loss %.4f ema %.4f %.1fs" % (step, loss.item(), ema, time.time() - t0)
            print(msg, flush=True)
            log.append(msg)
        if stop:
            break
    done = step + 1
    for k, q in net.p.items():
        if k.endswith("fire.c"):
            q.data.clamp_(min=1e-3)      # store the value the forward uses
    wall = time.time() - t0
    out = a.out or os.path.join(PM, "v2" if a.v2 else "", a.model)
    # the options a v1 command never had (so v1's recorded commands stay as they were); an
    # explicit --out is recorded too, so the replay does not write over the v1 folder
    v2opts = "" if not (a.v2 or a.size or a.curriculum or a.tokenizer != TOKENIZER or a.out) else \
        " --size %s --curriculum %g --tokenizer %s --out %s" % (
            a.size or "%d,%d,%d,%d" % (D, LAYERS, HEADS, DFF), a.curriculum,
            os.path.relpath(a.tokenizer, REPO), os.path.relpath(out, REPO))
    meta = collections.OrderedDict([
        ("model", a.model), ("steps", done), ("steps_planned", steps), ("batch", a.batch), ("lr", a.lr), ("seed", a.seed),
        ("device", dev if dev == "cpu" else torch.cuda.get_device_name(0)),
        ("torch", torch.__version__), ("wall_s", round(wall, 1)), ("params", net.n_params()),
        ("train_len", TRAIN_LEN), ("final_loss_ema", round(ema, 4)), ("log", log),
        ("command", "scripts/py lab/train.py --model %s --steps %d --batch %d --lr %g --seed %d" % (
            a.model, steps, a.batch, a.lr, a.seed)
            + " --mix %s --min-prompt %d" % (a.mix, a.min_prompt) + lines_flag(a) + v2opts + fire_flags(a)
            + (" --time-limit %g" % a.time_limit if a.time_limit else "")
            + (" --resume %s" % a.resume if a.resume else ""))])
    # the exact replay of this run, whatever stopped it
    meta["replay"] = "scripts/py lab/train.py --model %s --steps %d --stop-after %d --batch %d --lr %g --seed %d --mix %s --min-prompt %d%s --threads %d%s%s" % (
        a.model, steps, done, a.batch, a.lr, a.seed, a.mix, a.min_prompt, lines_flag(a), a.threads, v2opts,
        " --resume %s" % os.path.relpath(os.path.abspath(a.resume), REPO) if a.resume else "") + fire_flags(a)
    meta["steps_total"] = done + (prior.get("steps_total", prior["steps"]) if prior else 0)
    meta["wall_s_total"] = round(wall + (prior.get("wall_s_total", prior["wall_s"]) if prior else 0), 1)
    if prior:
        meta["previous"] = prior
    save(a.model, net, cfg, out, meta, a.tokenizer)
    print("saved %s (%d params, %.0fs)" % (out, net.n_params(), wall))


DEFAULT_STEPS = {"t5-probe": 5000, "alibi-probe": 5000, "rope-probe": 5000, "fire-probe": 4000}

if __name__ == "__main__":
    main()
