"""Precompute chapter 9's multi-seed experiments into ``chapters/results/ch09_experiments.json``.

    python tools/ch09_experiments.py            # every part, about 7 minutes of one CPU core
    python tools/ch09_experiments.py finetune   # one part: finetune, context, vision, cross

Parts (each over seeds 0, 1, 2; the chapter shows a short live run beside the table):

* ``finetune``: MiniBERT pre-trained on masked words (400 steps, the chapter's recipe) and then
  fine-tuned on the grammaticality task, against the same model trained from scratch on the
  labelled sentences alone, at 50, 200 and 1000 labels;
* ``context``: the same MiniBERT with and without a causal mask, probed on blanks whose answer
  is on their right (subject number, verb) or on their left (pronoun);
* ``vision``: MiniViT, MiniViT without position embeddings, and a SmallCNN with the ViT's
  parameter count, on 1000 and 4000 training images;
* ``cross``: the image-text matching layer trained on top of one frozen MiniCLIP with its
  queries (words) and keys (patches) taken after or before each encoder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools._precompute import RESULTS, parser, write_json

ROOT = Path(__file__).resolve().parents[1]

import selfattn  # noqa: E402
from selfattn.data.images import (  # noqa: E402
    COLORS,
    SHAPES,
    SIZES,
    caption_vocab,
    make_shapes,
    patch_coverage,
)
from selfattn.data.text import encode_sentences, generate_sentences, word_vocab  # noqa: E402
from selfattn.models import MiniCLIP, MiniViT, clip_loss, count_parameters  # noqa: E402
from selfattn.models.cnn import SmallCNN  # noqa: E402
from selfattn.models.finetune import (  # noqa: E402
    CausalMiniBERT,
    MatchHead,
    context_probes,
    finetune_run,
    grammar_task,
    match_sources,
    pretrain_mlm,
)
from selfattn.models.transformer import MiniBERT  # noqa: E402
from selfattn.train import train_loop  # noqa: E402

OUT = RESULTS / "ch09_experiments.json"
QUICK_OUT = Path("/tmp/ch09_experiments_quick.json")
QUICK = False  # set by --quick, a smoke test: 3 steps per training, written to QUICK_OUT
PARTS = ("finetune", "context", "vision", "cross")


def _S(steps: int) -> int:
    return 3 if QUICK else steps


SEEDS = (0, 1, 2)
BUDGETS = (50, 200, 1000)
SIZES_TRAIN = (1000, 4000)


def _save(part: str, value) -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[part] = value
    write_json(OUT, data, sort_keys=True)


def _r(x: float) -> float:
    return round(float(x), 4)


def _bert(vocab, seed, causal=False):
    torch.manual_seed(seed)
    cls = CausalMiniBERT if causal else MiniBERT
    return cls(len(vocab), d_model=64, num_heads=4, num_layers=2, max_len=16, pad_id=vocab.pad_id)


def text_parts(parts) -> None:
    wv = word_vocab()
    ids, lengths = encode_sentences(generate_sentences(4000, seed=1), wv)
    pool, pool_labels, _ = grammar_task(2000, seed=11)
    test, test_labels, test_kinds = grammar_task(1000, seed=12)
    pool_ids, _ = encode_sentences(pool, wv, max_len=16)
    test_ids, _ = encode_sentences(test, wv, max_len=16)
    probe_sentences = generate_sentences(500, seed=50)
    finetune = {"budgets": list(BUDGETS), "seeds": list(SEEDS), "pretrained": [], "scratch": []}
    context = {"seeds": list(SEEDS), "bidirectional": [], "causal": []}
    for seed in SEEDS:
        t = time.time()
        bert = _bert(wv, seed)
        pretrain_mlm(bert, ids, lengths, wv, steps=_S(400), seed=seed)
        if "context" in parts:
            causal = _bert(wv, seed, causal=True)
            pretrain_mlm(causal, ids, lengths, wv, steps=_S(400), seed=seed)
            context["bidirectional"].append(
                {k: _r(v) for k, v in context_probes(bert, probe_sentences, wv).items()}
            )
            context["causal"].append(
                {k: _r(v) for k, v in context_probes(causal, probe_sentences, wv).items()}
            )
        if "finetune" in parts:
            order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
            row_pre, row_scratch = [], []
            for budget in BUDGETS:
                idx = order[:budget]
                args = (pool_ids[idx], pool_labels[idx], test_ids, test_labels, wv)
                steps = _S(150)
                row_pre.append(_r(finetune_run(bert, *args, steps=steps, seed=seed)["accuracy"]))
                row_scratch.append(
                    _r(finetune_run(None, *args, steps=steps, seed=seed)["accuracy"])
                )
            finetune["pretrained"].append(row_pre)
            finetune["scratch"].append(row_scratch)
        print(f"text seed {seed}: {time.time() - t:.0f} s", flush=True)
    if "finetune" in parts:
        finetune["note"] = "accuracy[seed][budget] on 1000 test sentences, half grammatical"
        _save("finetune", finetune)
    if "context" in parts:
        _save("context", context)


def vision_part(seeds=SEEDS, out: Path | None = None) -> None:
    """Train the three image models; with ``out``, write the raw rows there instead (one
    process per seed, merged by ``merge-vision``)."""
    train = make_shapes(4000, image_size=40, grid=4, seed=1)
    test = make_shapes(1000, image_size=40, grid=4, seed=2)
    vit_params = count_parameters(MiniViT(4, image_size=40, patch=10))
    names = ("ViT", "ViT without positions", "CNN")
    acc = {name: [] for name in names}
    params = {}
    for seed in seeds:
        t = time.time()
        rows = {name: [] for name in names}
        for size in SIZES_TRAIN:
            for name in names:
                torch.manual_seed(seed)
                if name == "CNN":
                    model = SmallCNN.matching(4, vit_params)
                else:
                    model = MiniViT(4, image_size=40, patch=10, d_model=64, num_heads=4,
                                    num_layers=2)  # fmt: skip
                    if name == "ViT without positions":
                        with torch.no_grad():
                            model.embed.pos.weight.zero_()
                        model.embed.pos.weight.requires_grad_(False)
                params[name] = sum(p.numel() for p in model.parameters() if p.requires_grad)
                g = torch.Generator().manual_seed(100 + seed)

                def batch(step, g=g, size=size):
                    idx = torch.randint(0, size, (64,), generator=g)
                    return train.images[idx], train.shapes[idx]

                train_loop(model, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                           steps=_S(400), lr=2e-3)  # fmt: skip
                with torch.no_grad():
                    pred = model(test.images).argmax(-1)
                rows[name].append(_r((pred == test.shapes).float().mean()))
        for name in names:
            acc[name].append(rows[name])
        print(f"vision seed {seed}: {time.time() - t:.0f} s {rows}", flush=True)
    if out is not None:
        out.write_text(json.dumps({"acc": acc, "params": params}))
        return
    _save(
        "vision",
        {"sizes": list(SIZES_TRAIN), "seeds": list(SEEDS), "accuracy": acc, "parameters": params,
         "note": "accuracy[model][seed][size] on 1000 test images; 400 steps of 64"},
    )  # fmt: skip


def hard_negative(k, g):
    z, c, s = k // 12, (k // 4) % 3, k % 4
    which = torch.randint(0, 3, k.shape, generator=g)
    z = torch.where(which == 0, 1 - z, z)
    c = torch.where(which == 1, (c + torch.randint(1, 3, k.shape, generator=g)) % 3, c)
    s = torch.where(which == 2, (s + torch.randint(1, 4, k.shape, generator=g)) % 4, s)
    return z * 12 + c * 4 + s


def cross_part() -> None:
    train = make_shapes(4000, image_size=40, grid=4, seed=1)
    test = make_shapes(1000, image_size=40, grid=4, seed=2)
    torch.manual_seed(0)
    vit = MiniViT(4, image_size=40, patch=10, d_model=64, num_heads=4, num_layers=2)
    g = torch.Generator().manual_seed(5)

    def vit_batch(step):
        idx = torch.randint(0, 4000, (64,), generator=g)
        return train.images[idx], train.shapes[idx]

    train_loop(vit, vit_batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]), steps=_S(400), lr=2e-3)
    cv = caption_vocab()
    captions = [f"a {z} {c} {s}" for z in SIZES for c in COLORS for s in SHAPES]
    index = {c: k for k, c in enumerate(captions)}
    cap_ids, _ = encode_sentences(captions, cv)
    train_cap = torch.tensor([index[c] for c in train.captions])
    test_cap = torch.tensor([index[c] for c in test.captions])
    by_caption = [torch.nonzero(train_cap == k).squeeze(1) for k in range(24)]
    clip = MiniCLIP(len(cv), image_size=40, patch=10, d_model=64, num_heads=4, num_layers=2,
                    embed_dim=32, max_text_len=8, pad_id=cv.pad_id)  # fmt: skip
    clip.image_embed.load_state_dict(vit.embed.state_dict())
    clip.image_encoder.load_state_dict(vit.encoder.state_dict())
    gc = torch.Generator().manual_seed(6)

    def clip_batch(step):
        idx = torch.stack([b[torch.randint(0, len(b), (1,), generator=gc)] for b in by_caption])
        return train.images[idx.squeeze(1)], cap_ids

    train_loop(clip, clip_batch, lambda m, b: clip_loss(m(*b)), steps=_S(400), lr=1e-3)
    clip.eval()
    shape_patch = patch_coverage(test.masks, 10).argmax(1)
    out = {"seeds": list(SEEDS), "variants": {}}
    for words in ("encoder", "embedding"):
        for patches in ("encoder", "embedding"):
            # every training image's tokens once: the encoders are frozen
            w_all, r_all, _ = match_sources(clip, train.images[:1], cap_ids, words=words,
                                            patches=patches)  # fmt: skip
            p_train = torch.cat([
                match_sources(clip, train.images[k : k + 500], cap_ids[:1], words=words,
                              patches=patches)[2]
                for k in range(0, 4000, 500)
            ])  # fmt: skip
            w_test = w_all[test_cap]
            p_test = match_sources(clip, test.images, cap_ids[:1], words=words,
                                   patches=patches)[2]  # fmt: skip
            res = {"match_acc": [], "on_shape": [], "per_word": [], "colour_top_hit": []}
            for seed in SEEDS:
                torch.manual_seed(seed)
                head = MatchHead(64, 4)
                gb = torch.Generator().manual_seed(200 + seed)
                gn = torch.Generator().manual_seed(300 + seed)

                def batch(step, gb=gb, gn=gn, p_train=p_train):
                    idx = torch.stack(
                        [b[torch.randint(0, len(b), (1,), generator=gb)] for b in by_caption]
                    ).squeeze(1)
                    wrong = hard_negative(torch.arange(24), gn)
                    return p_train[idx], wrong

                def loss_fn(m, b, w_all=w_all, r_all=r_all):
                    p, wrong = b
                    words_ = torch.cat([w_all, w_all[wrong]])
                    real_ = torch.cat([r_all, r_all[wrong]])
                    logits = m(words_, real_, torch.cat([p, p]))
                    target = torch.cat([torch.ones(24), torch.zeros(24)])
                    return F.binary_cross_entropy_with_logits(logits, target)

                train_loop(head, batch, loss_fn, steps=_S(300), lr=3e-3)
                with torch.no_grad():
                    neg = hard_negative(test_cap, torch.Generator().manual_seed(9))
                    pos_logit, wts = head(w_test, r_all[test_cap], p_test, return_weights=True)
                    neg_logit = head(w_all[neg], r_all[neg], p_test)
                acc = 0.5 * ((pos_logit > 0).float().mean() + (neg_logit < 0).float().mean())
                wts = wts.mean(1)  # (N, 4, 16)
                on = wts[torch.arange(len(test_cap)), :, shape_patch]  # (N, 4)
                res["match_acc"].append(_r(acc))
                res["on_shape"].append(_r(on.mean()))
                res["per_word"].append([_r(v) for v in on.mean(0)])
                res["colour_top_hit"].append(
                    _r((wts[:, 2].argmax(-1) == shape_patch).float().mean())
                )
            out["variants"][f"words {words}, patches {patches}"] = res
            print(f"cross words={words} patches={patches}: {res['on_shape']}", flush=True)
    _save("cross", out)


def main(argv: list[str] | None = None) -> None:
    global OUT, QUICK
    p = parser(__doc__, OUT)
    p.add_argument(
        "parts",
        nargs="*",
        metavar="part",
        help=f"{', '.join(PARTS)} (default: all four), vision-seed=N or merge-vision",
    )
    p.add_argument(
        "--quick", action="store_true", help=f"3 steps per training, written to {QUICK_OUT}"
    )
    args = p.parse_args(argv)
    QUICK = args.quick
    OUT = QUICK_OUT if QUICK and args.out == OUT else args.out
    parts = set(args.parts) or set(PARTS)
    selfattn.setup(seed=0)
    torch.set_num_threads(1)
    if parts & {"finetune", "context"}:
        text_parts(parts)
    if "cross" in parts:
        cross_part()
    if "vision" in parts:
        vision_part()
    for part in parts:
        if part.startswith("vision-seed="):  # one seed in its own process
            seed = int(part.split("=")[1])
            vision_part((seed,), Path(f"/tmp/ch09_vision_seed{seed}.json"))
    if "merge-vision" in parts:
        runs = [json.loads(Path(f"/tmp/ch09_vision_seed{s}.json").read_text()) for s in SEEDS]
        acc = {name: [r["acc"][name][0] for r in runs] for name in runs[0]["acc"]}
        _save(
            "vision",
            {"sizes": list(SIZES_TRAIN), "seeds": list(SEEDS), "accuracy": acc,
             "parameters": runs[0]["params"],
             "note": "accuracy[model][seed][size] on 1000 test images; 400 steps of 64"},
        )  # fmt: skip


if __name__ == "__main__":
    main()
