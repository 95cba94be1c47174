"""Measure the compressors on a benchmark's TRAINING split (never the evaluation split), and
build that benchmark's sentence selector for the extractive compressor.

    python -m dynakrag_lab.studies.selector --dataset hotpotqa \
        --generator qwen2.5-coder-0.5b --llm-questions 15 --k-docs 6 \
        --out results/diagnostics/compression.json \
        --selector-out results/selectors/hotpotqa-sentence-selector.joblib

``--train-limit N`` keeps only the first N training questions (in the order of the CLI's
``--split train``), so that ``evaluate --split train --offset N`` runs on questions neither
the selector nor (when the policy was trained on fewer) the policy has read.

Other benchmarks (``--n-eval`` must be the experiments' split; the small files need smaller
parts, e.g. 2WikiMultiHopQA ``--n-eval 150 --n-fit 180 --n-dev 50``, MuSiQue ``--n-fit 60
--n-dev 20``); without ``--selector-out`` the selector goes to
``results/selectors/<dataset>-sentence-selector.joblib``.

The training split is the one the CLI uses (build_setup, --n-eval, --split-seed 0). It is
shuffled (seed 13) and cut into three disjoint parts: ``fit`` (train the sentence selector),
``dev`` (choose logistic regression vs gradient boosting), ``measure`` (every number below).
Each question's documents are its top ``--k-docs`` retrieved paragraphs (a final state of that
size). Measured:

* label rule vs HotpotQA's sentence-level supporting facts (where the provenance file has
  them): how well "gold paragraph sentence with the answer or >= 0.5 of the question's content
  words" matches the annotation;
* extractive selector on ``measure``: answer-string survival (answer in the documents -> in
  the evidence lines), gold-paragraph coverage, source document positions;
* LLM compressor (``--generator``) on the first ``--llm-questions`` of ``measure``: parsed
  snippets, validity rate and drop reasons, quote-ratio histogram, survival before and after
  validation, source positions, fallback rate; and answer F1 from the documents, from the raw
  LLM snippets (the old behaviour), from the validated compression (documents on fallback)
  and from the extractive evidence.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from dynakrag_lite import prompts
from dynakrag_lite.compression import (ExtractiveCompressor, SentenceSelector,
                                       build_compression, render_evidence, sentence_features,
                                       validate_snippets)
from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.data.sources import data_dir
from dynakrag_lite.generators.spec import make_generator
from dynakrag_lite.metrics import f1_score
from dynakrag_lite.pipeline import build_setup
from dynakrag_lite.state import RetrievedDoc
from dynakrag_lite.text import paragraph_sentences
from dynakrag_lab.studies.selector import (LABEL_Q_OVERLAP, answer_in,
                                           label_sentences, make_model, register_selector,
                                           snippet_stats, training_rows)


def provenance_facts(dataset_file: Path) -> dict[str, list]:
    p = dataset_file.with_name(dataset_file.stem + ".provenance.jsonl")
    out = {}
    if p.exists():
        for line in open(p, encoding="utf-8"):
            r = json.loads(line)
            if r.get("supporting_facts"):
                out[r["id"]] = r["supporting_facts"]
    return out


def label_agreement(questions, facts) -> dict:
    """Label rule vs annotated supporting sentences, over gold paragraphs' sentences."""
    tp = fp = fn = tn = 0
    n_q = 0
    for q in questions:
        sf = facts.get(q.id)
        if not sf:
            continue
        n_q += 1
        gold_sents = {(t, i) for t, i in sf}
        docs = [RetrievedDoc(str(j), p.title, p.text, 0.0, "x", 0)
                for j, p in enumerate(q.paragraphs) if p.is_supporting]
        rows = sentence_features(q.question, docs)
        y = label_sentences(q.question, q.answers, docs, q.supporting_titles, rows)
        for di, si, lab in zip(rows.doc_index, rows.sent_index, y):
            truth = (docs[di].title, si) in gold_sents
            tp += lab and truth
            fp += lab and not truth
            fn += (not lab) and truth
            tn += (not lab) and not truth
    return {"questions": n_q, "precision": round(tp / max(1, tp + fp), 3),
            "recall": round(tp / max(1, tp + fn), 3), "tp": int(tp), "fp": int(fp),
            "fn": int(fn), "tn": int(tn)}


def label_rule() -> str:
    return (f"gold paragraph sentence with an answer string or >= {LABEL_Q_OVERLAP} of the "
            "question's content words")


def docs_for(retriever, questions, k):
    hits = retriever.search_many([q.question for q in questions], k)
    return [[RetrievedDoc(h.doc.id, h.doc.title, h.doc.text, h.score, "retrieve_more", 0)
             for h in hs] for hs in hits]


def average_precision(y, p):
    from sklearn.metrics import average_precision_score
    return float(average_precision_score(y, p)) if y.sum() else float("nan")


def reuse_problem(prev: dict, split: dict, selector_meta: dict, fit_ids: list[str]
                  ) -> str | None:
    """Why the selector numbers of ``prev`` (an earlier --out) cannot be copied for the selector
    whose meta is ``selector_meta`` on this ``split``; None when they can. A file written for
    an earlier split, or for an earlier selector, would otherwise be carried over silently."""
    if selector_meta.get("train_ids") != fit_ids:
        return "the selector was fitted on another fit part than this split's"
    if prev.get("split") != split:
        return f"the earlier report describes another split ({prev.get('split')} vs {split})"
    stale = [k for k in ("n_questions", "n_sentences", "n_positive")
             if (prev.get("selector") or {}).get(k) != selector_meta.get(k)]
    if stale:
        return f"the earlier report describes another selector (differing: {stale})"
    return None


def split_parts(train_split: list, n_fit: int, n_dev: int, train_limit: int | None = None
                ) -> tuple[list, list, list, list]:
    """(train, fit, dev, measure): the first ``train_limit`` questions of the training split
    (all when None), shuffled with seed 13 and cut into three disjoint parts."""
    train = list(train_split)[:train_limit]
    random.Random(13).shuffle(train)
    if n_fit + n_dev >= len(train):
        raise SystemExit(f"--n-fit {n_fit} + --n-dev {n_dev} leave no measure questions: the "
                         f"training questions taken number {len(train)}")
    return train, train[:n_fit], train[n_fit:n_fit + n_dev], train[n_fit + n_dev:]


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.selector")
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--generator", default="qwen2.5-coder-0.5b")
    ap.add_argument("--llm-questions", type=int, default=15)
    ap.add_argument("--k-docs", type=int, default=6)
    ap.add_argument("--n-fit", type=int, default=400)
    ap.add_argument("--n-dev", type=int, default=100)
    ap.add_argument("--max-snippets", type=int, default=8)
    ap.add_argument("--n-eval", type=int, default=100,
                    help="questions held out for evaluation (the experiments' --n-eval): the "
                         "selector is fitted on the rest only")
    ap.add_argument("--train-limit", type=int, default=None,
                    help="use only the first N training questions (the CLI's --split train "
                         "order), e.g. 330 to keep --split train --offset 330 never read")
    ap.add_argument("--out", default=None,
                    help="default: results/diagnostics/compression.json for hotpotqa, "
                         "results/diagnostics/<dataset>-compression.json otherwise")
    ap.add_argument("--selector-out", default=None,
                    help="default: results/selectors/<dataset>-sentence-selector.joblib")
    ap.add_argument("--reuse-selector", action="store_true",
                    help="load --selector-out (trained by an earlier run of this script on the "
                         "same fit part) instead of training; its numbers are kept from --out")
    ap.add_argument("--f1-extra", type=int, default=0,
                    help="also compare answer F1 from extractive evidence vs documents on the "
                         "next N measure questions (answer calls only)")
    args = ap.parse_args()
    args.out = args.out or ("results/diagnostics/compression.json" if args.dataset == "hotpotqa"
                            else f"results/diagnostics/{args.dataset}-compression.json")
    args.selector_out = args.selector_out or \
        f"results/selectors/{args.dataset}-sentence-selector.joblib"
    t0 = time.perf_counter()
    setup = build_setup(args.dataset, generator=None, show_progress=False, n_eval=args.n_eval)
    env = setup.env
    retr = env.retriever
    train, fit, dev, measure = split_parts(setup.train, args.n_fit, args.n_dev,
                                           args.train_limit)
    out: dict = {"command": "python " + " ".join(sys.argv), "dataset": setup.dataset,
                 "split": {"train_questions": len(train), "fit": len(fit), "dev": len(dev),
                           "measure": len(measure), "eval_split_untouched": len(setup.eval)},
                 "k_docs": args.k_docs, "max_snippets": args.max_snippets}
    if args.train_limit is not None:  # absent otherwise: earlier reports stay reusable
        out["split"]["train_limit"] = args.train_limit
    if args.reuse_selector:
        prev = json.loads(Path(args.out).read_text())
        sel = SentenceSelector.load(args.selector_out)
        problem = reuse_problem(prev, out["split"], sel.meta, [q.id for q in fit])
        if problem:
            raise SystemExit(f"--reuse-selector: {problem}; run without --reuse-selector")
        for k in ("label_rule_vs_supporting_facts", "selector_choice_dev_average_precision",
                  "selector"):
            out[k] = prev[k]
    else:
        sel = fit_selector(args, out, setup, retr, train, fit, dev)
    print("selector ready", round(time.perf_counter() - t0), flush=True)
    measure_all(args, out, setup, env, retr, sel, measure)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("llm",)}, indent=1,
                     default=str)[:4000])
    if "llm" in out:
        print(json.dumps({k: v for k, v in out["llm"].items() if k != "examples"}, indent=1))
    return 0


def fit_selector(args, out, setup, retr, train, fit, dev):
    facts = provenance_facts(Path(data_dir()) / f"{setup.dataset}.jsonl")
    out["label_rule_vs_supporting_facts"] = label_agreement(train, facts)

    # -- the sentence selector: fit on `fit`, choose the model on `dev` --------------------
    Xf, yf, _, _ = training_rows(fit, retr, k_docs=9)
    Xd, yd, _, _ = training_rows(dev, retr, k_docs=9)
    choice = {}
    for kind in ("logreg", "gbt"):
        m = make_model(kind, 13).fit(Xf, yf)
        choice[kind] = round(average_precision(yd, m.predict_proba(Xd)[:, 1]), 4)
    best = max(choice, key=choice.get)
    out["selector_choice_dev_average_precision"] = choice
    # the same fit as train_sentence_selector(fit, retr, k_docs=9, model=best), reusing rows
    sel = SentenceSelector(make_model(best, 13).fit(Xf, yf), meta={
        "model": best, "seed": 13, "k_docs": 9, "use_embeddings": True,
        "embedder": retr.embedder_name, "documents": "top-9 retrieved",
        "label_rule": label_rule(), "n_questions": len(fit), "n_sentences": int(len(yf)),
        "n_positive": int(yf.sum()), "train_ids": [q.id for q in fit],
        "dataset": setup.dataset, "split_seed": 0, "n_eval": args.n_eval,
        "command": out["command"],
        "dev_average_precision": choice[best]})
    Path(args.selector_out).parent.mkdir(parents=True, exist_ok=True)
    sel.save(args.selector_out)
    register_selector(args.selector_out)  # its sha256 into the folder's MANIFEST.sha256
    out["selector"] = {"path": args.selector_out, "model": best,
                       **{k: sel.meta[k] for k in ("n_questions", "n_sentences", "n_positive",
                                                   "label_rule", "embedder")}}
    if best == "logreg":
        coefs = sel.model[-1].coef_[0]
        out["selector"]["logreg_coefficients"] = {
            f: round(float(c), 3) for f, c in sorted(zip(sel.features, coefs),
                                                     key=lambda x: -abs(x[1]))}
    return sel


def measure_all(args, out, setup, env, retr, sel, measure):

    # -- extractive on `measure` -----------------------------------------------------------
    comp_x = ExtractiveCompressor(sel, retr.encode)
    mdocs = docs_for(retr, measure, args.k_docs)
    xs = {"questions": len(measure), "answer_in_docs": 0, "answer_in_snippets": 0,
          "gold_docs_in_state": 0, "gold_docs_with_snippet": 0, "fallback_to_docs": 0,
          "snippets": 0, "source_positions": Counter(), "all_sentences": 0}
    x_cache = {}
    for q, docs in zip(measure, mdocs):
        c = comp_x.compress(q.question, docs, args.max_snippets)
        x_cache[q.id] = c
        st = snippet_stats(docs, c, q.answers)
        xs["answer_in_docs"] += st["answer_in_docs"]
        xs["answer_in_snippets"] += st["answer_in_snippets"]
        xs["fallback_to_docs"] += c.fallback_to_docs
        xs["snippets"] += len(c.valid_snippets)
        xs["all_sentences"] += sum(len(paragraph_sentences(d.text)) for d in docs)
        gold = {normalize_title(t) for t in q.supporting_titles}
        gidx = {i for i, d in enumerate(docs) if normalize_title(d.title) in gold}
        xs["gold_docs_in_state"] += len(gidx)
        xs["gold_docs_with_snippet"] += len(gidx & {s.doc_index for s in c.valid_snippets})
        xs["source_positions"].update(s.doc_index + 1 for s in c.valid_snippets)
    xs["survival_rate"] = round(xs["answer_in_snippets"] / max(1, xs["answer_in_docs"]), 4)
    xs["gold_doc_coverage"] = round(xs["gold_docs_with_snippet"]
                                    / max(1, xs["gold_docs_in_state"]), 4)
    xs["kept_share_of_sentences"] = round(xs["snippets"] / max(1, xs["all_sentences"]), 4)
    xs["source_positions"] = dict(sorted(xs["source_positions"].items()))
    out["extractive"] = xs

    # -- LLM compressor on the first llm-questions of `measure` ----------------------------
    if args.generator and args.llm_questions:
        gen = make_generator(args.generator)
        cfg = env.config
        ls = {"questions": 0, "parsed": 0, "valid": 0, "dropped": Counter(),
              "answer_in_docs": 0, "answer_in_raw_snippets": 0, "answer_in_valid_evidence": 0,
              "answer_in_extractive": 0, "answer_reaches_reader_validated": 0,
              "fallback_to_docs": 0, "source_positions": Counter(),
              "quote_ratios": [], "template_word_snippet": 0}
        f1 = {"docs": [], "raw_llm_snippets": [], "validated_llm": [], "extractive": []}
        examples = []
        llm_seconds = 0.0
        for q, docs in list(zip(measure, mdocs))[:args.llm_questions]:
            g = gen.generate(prompts.compress_messages(q.question, docs, False,
                                                       args.max_snippets, cfg.doc_chars),
                             max_tokens=prompts.COMPRESS_MAX_TOKENS)
            llm_seconds += g.seconds
            parsed = prompts.parse_snippets(g.text, args.max_snippets)
            c = build_compression(parsed, g.text, g, docs)
            _, _, ratios = validate_snippets(parsed, docs)
            ls["quote_ratios"] += [round(r, 3) for r in ratios]
            st = snippet_stats(docs, c, q.answers)
            ls["questions"] += 1
            ls["parsed"] += st["parsed"]
            ls["valid"] += st["valid"]
            ls["dropped"].update(st["dropped"])
            ls["template_word_snippet"] += sum("snippet" in p.lower() for p in parsed)
            ls["answer_in_docs"] += st["answer_in_docs"]
            ls["answer_in_valid_evidence"] += st["answer_in_snippets"]
            ls["answer_reaches_reader_validated"] += st["answer_reaches_reader"]
            ls["answer_in_raw_snippets"] += st["answer_in_docs"] and any(
                answer_in(a, " ".join(parsed)) for a in q.answers)
            xc = x_cache[q.id]
            ls["answer_in_extractive"] += st["answer_in_docs"] and any(
                answer_in(a, " ".join(render_evidence(xc.valid_snippets))) for a in q.answers)
            ls["fallback_to_docs"] += c.fallback_to_docs
            ls["source_positions"].update(s.doc_index + 1 for s in c.valid_snippets)

            def ans(msgs):
                nonlocal llm_seconds
                r = gen.generate(msgs, max_tokens=prompts.ANSWER_MAX_TOKENS)
                llm_seconds += r.seconds
                return prompts.parse_answer(r.text)

            a_docs = ans(prompts.answer_messages(q.question, docs, cfg.doc_chars))
            a_raw = ans(prompts.answer_from_snippets_messages(q.question, "\n".join(parsed))) \
                if parsed else a_docs
            a_val = a_docs if c.fallback_to_docs else ans(
                prompts.answer_from_snippets_messages(q.question, "\n".join(c.snippets)))
            a_x = a_docs if xc.fallback_to_docs else ans(
                prompts.answer_from_snippets_messages(q.question, "\n".join(xc.snippets)))
            for key, a in (("docs", a_docs), ("raw_llm_snippets", a_raw),
                           ("validated_llm", a_val), ("extractive", a_x)):
                f1[key].append(max(f1_score(a, gold) for gold in q.answers))
            print("llm question", ls["questions"], round(llm_seconds), flush=True)
            if len(examples) < 4:
                examples.append({"question": q.question, "answers": list(q.answers),
                                 "raw": g.text[:600], "kept": list(c.snippets),
                                 "dropped": [list(d) for d in c.dropped],
                                 "fallback": c.fallback_reason,
                                 "predictions": {"docs": a_docs, "raw": a_raw,
                                                 "validated": a_val, "extractive": a_x}})
        hist = Counter(min(9, int(r * 10)) / 10 for r in ls["quote_ratios"])
        ls["quote_ratio_histogram"] = {f"{k:.1f}": v for k, v in sorted(hist.items())}
        del ls["quote_ratios"]
        ls["validity_rate"] = round(ls["valid"] / max(1, ls["parsed"]), 4)
        ls["survival_raw"] = round(ls["answer_in_raw_snippets"] / max(1, ls["answer_in_docs"]), 4)
        ls["survival_validated"] = round(ls["answer_in_valid_evidence"]
                                         / max(1, ls["answer_in_docs"]), 4)
        ls["reach_validated_with_fallback"] = round(
            ls["answer_reaches_reader_validated"] / max(1, ls["answer_in_docs"]), 4)
        ls["survival_extractive_same_questions"] = round(
            ls["answer_in_extractive"] / max(1, ls["answer_in_docs"]), 4)
        ls["dropped"] = dict(ls["dropped"])
        ls["source_positions"] = dict(sorted(ls["source_positions"].items()))
        ls["answer_f1"] = {k: round(float(np.mean(v)), 4) for k, v in f1.items()}
        ls["answer_f1_n"] = len(f1["docs"])
        ls["generator"] = args.generator
        ls["llm_seconds"] = round(llm_seconds, 1)  # calls served from the cache count 0
        ls["examples"] = examples
        out["llm"] = ls
    if args.generator and args.f1_extra:
        gen = make_generator(args.generator)
        lo = args.llm_questions
        pairs = list(zip(measure, mdocs))[lo:lo + args.f1_extra]
        f1d, f1x, secs = [], [], 0.0
        for q, docs in pairs:
            xc = x_cache[q.id]
            for msgs, acc in ((prompts.answer_messages(q.question, docs, env.config.doc_chars),
                               f1d),
                              (prompts.answer_from_snippets_messages(q.question,
                                                                     "\n".join(xc.snippets)),
                               f1x)):
                r = gen.generate(msgs, max_tokens=prompts.ANSWER_MAX_TOKENS)
                secs += r.seconds
                acc.append(max(f1_score(prompts.parse_answer(r.text), g) for g in q.answers))
        out["extractive_vs_docs_f1_extra"] = {
            "questions": f"measure[{lo}:{lo + len(pairs)}]", "n": len(pairs),
            "docs": round(float(np.mean(f1d)), 4), "extractive": round(float(np.mean(f1x)), 4),
            "llm_seconds": round(secs, 1)}  # calls served from the cache count 0


if __name__ == "__main__":
    raise SystemExit(main())
