"""The speed part of results/README.md: one renderer per benchmark file of
``results/benchmarks/*.json``, each a pure function of the loaded dict that renders what the
file holds and "-" (or a note) for what it lacks, so a file written by an older version of its
benchmark (or one still being written) never stops the README."""
from __future__ import annotations

import json
from pathlib import Path


# The issue's target for per-question overhead: wall time at most 1.1 x the LLM time.
WALL_OVER_LLM_TARGET = 1.1
CONTROLLER_TARGET_MS = 2.0  # a controller decision (valid_actions + Policy.choose)


def _get(d, *keys):
    """d[k1][k2]... or None when a level is missing or not a dict."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _fmt(v, fmt: str = "") -> str:
    """A number formatted, "-" for None or NaN, yes/no for a bool, anything else as text."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if v != v:
            return "-"
        try:
            return format(v, fmt)
        except ValueError:  # "d" given a float
            return format(v, "g")
    return str(v)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _loadavg(v) -> str | None:
    """'0.35/1.04/1.35' from [1, 5, 15]-minute load averages, None when not such a list."""
    if isinstance(v, (list, tuple)) and v and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return "/".join(f"{x:.2f}" for x in v)
    return None


def bench_header(d: dict) -> str:
    """Date, CPU, load average (start and end, wherever the benchmark recorded them) and
    command of one benchmark file, as one line."""
    m = d.get("machine") if isinstance(d.get("machine"), dict) else {}
    cpu = d.get("cpu_model") or d.get("cpu") or m.get("cpu") or m.get("cpu_model")
    cpus = d.get("cpus") or d.get("cpu_count") or m.get("cpu_count") or m.get("cpus")
    cpu_text = (cpu or "CPU not recorded") + (f" ({cpus} CPUs)" if cpus else "")

    def first(*names):
        for src in (m, d):
            for n in names:
                if _loadavg(src.get(n)):
                    return _loadavg(src.get(n))
        return None
    start = first("loadavg_start", "loadavg_before")
    end = first("loadavg_end", "loadavg_after")
    if start or end:
        load = "load average (1/5/15 min) " + ", ".join(
            f"{v} at {w}" for v, w in ((start, "start"), (end, "end")) if v)
    else:
        load = "load average not recorded"
    cmd = d.get("command")
    return (f"Measured {d.get('date') or '(date not recorded)'} on {cpu_text}; {load}; "
            + (f"command: `{cmd}`." if cmd else "command not recorded."))


def prefix_reuse_section(d: dict) -> str:
    """prefix_reuse.json: the micro table (per call kind), the seconds per evaluated token,
    and per method the calls, tokens and seconds per question with wall / LLM time against
    WALL_OVER_LLM_TARGET."""
    lines = ["### llama.cpp prefix reuse (`benchmarks/prefix_reuse.json`)\n",
             bench_header(d) + "\n"]
    st = d.get("settings") if isinstance(d.get("settings"), dict) else {}
    if st:
        lines.append(f"Generator `{_fmt(st.get('generator'))}`, dataset "
                     f"`{_fmt(st.get('dataset'))}`, {_fmt(st.get('n_questions'))} questions, "
                     f"{_fmt(st.get('llama_n_threads'))} llama.cpp thread(s); every call live "
                     "(a fresh call cache per method). Tokens: sent = the prompt, reused = "
                     "kept in llama.cpp's KV cache from its previous call, evaluated = sent - "
                     "reused.")
    lines.append("")
    kinds = _get(d, "micro", "kinds")
    if isinstance(kinds, dict) and kinds:
        lines.append(f"Micro: one question's prompts over documents D and D' "
                     f"({_fmt(_get(d, 'micro', 'docs_per_prompt'))} each), "
                     f"{_fmt(_get(d, 'micro', 'max_tokens'))} completion token(s), medians of "
                     "the repeats:\n")
        rows = [[f"`{k}`", _fmt(_get(v, "n"), "d"), _fmt(_get(v, "seconds_median"), ".3f"),
                 _fmt(_get(v, "prompt_tokens_median"), ".0f"),
                 _fmt(_get(v, "reused_median"), ".0f"), _fmt(_get(v, "evaluated_median"), ".0f")]
                for k, v in kinds.items()]
        lines += _table(["call kind", "calls", "median s", "prompt tokens sent", "reused",
                         "evaluated"], rows)
        sv = _get(d, "micro", "savings") or {}
        pair, fit = _get(sv, "seconds_saved_per_reused_token_pair"), _get(
            sv, "seconds_per_evaluated_token_fit")
        if pair is not None or fit is not None:
            ratio = _get(sv, "rewrite_same_over_other_seconds")
            lines.append(f"\nSavings: {_fmt(pair, '.4f')} s per evaluated prompt token (= per "
                         f"reused token saved; the two rewrites' medians), {_fmt(fit, '.4f')} s "
                         "(least-squares slope over every micro call)"
                         + (f"; the rewrite over the same documents takes {_fmt(ratio, '.3f')} "
                            "of the time of the one over other documents." if ratio is not None
                            else "."))
        lines.append("")
    methods = d.get("methods")
    if isinstance(methods, dict) and methods:
        lines.append(f"Per method, per question (target: wall time <= {WALL_OVER_LLM_TARGET} x "
                     "the LLM time of its calls):\n")
        rows, verdicts = [], []
        for name, m in methods.items():
            t = _get(m, "totals") or {}
            pq = _get(t, "per_question") or {}
            wall, llm = t.get("wall_seconds"), t.get("llm_seconds")
            if not (isinstance(wall, (int, float)) and isinstance(llm, (int, float))):
                wall, llm = pq.get("wall_seconds"), pq.get("llm_seconds")
            ratio = (wall / llm if isinstance(wall, (int, float)) and isinstance(llm, (int, float))
                     and llm > 0 else None)
            met = "-" if ratio is None else ("met" if ratio <= WALL_OVER_LLM_TARGET else "not met")
            if ratio is not None:
                verdicts.append(met == "met")
            rows.append([f"`{name}`", _fmt(t.get("questions"), "d"), _fmt(t.get("errors"), "d"),
                         _fmt(pq.get("live_calls"), ".1f"),
                         _fmt(pq.get("prompt_tokens_sent"), ".0f"),
                         _fmt(pq.get("prompt_tokens_evaluated"), ".0f"),
                         _fmt(t.get("reused_fraction"), ".3f"),
                         _fmt(pq.get("completion_tokens"), ".1f"),
                         _fmt(pq.get("llm_seconds"), ".2f"), _fmt(pq.get("wall_seconds"), ".2f"),
                         _fmt(ratio, ".3f"), met,
                         _fmt(t.get("estimated_seconds_saved_per_question"), ".2f")])
        lines += _table(["method", "questions", "errors", "calls / q", "prompt tokens sent / q",
                         "evaluated / q", "reused fraction", "completion / q", "LLM s / q",
                         "wall s / q", "wall / LLM", f"<= {WALL_OVER_LLM_TARGET}",
                         "est. s saved / q"], rows)
        if verdicts:
            lines.append(f"\nWall time <= {WALL_OVER_LLM_TARGET} x LLM time: met by "
                         f"{sum(verdicts)} of {len(verdicts)} methods.")
        lines.append("")
    for sk in d.get("skipped") or []:
        if isinstance(sk, dict):
            lines.append(f"- skipped `{_fmt(sk.get('method') or sk.get('name'))}`: "
                         f"{_fmt(sk.get('reason'))}")
        else:
            lines.append(f"- skipped: {sk}")
    return "\n".join(lines).rstrip() + "\n"


def index_section(d: dict) -> str:
    """index.json: per FAISS factory build time, size, memory, query latency, recall@k and the
    memory-mapped figures."""
    lines = ["### FAISS index kinds (`benchmarks/index.json`)\n", bench_header(d) + "\n"]
    k = d.get("k", 10)
    lines.append(f"Synthetic corpus of {_fmt(d.get('n'), ',')} vectors x {_fmt(d.get('dim'))} "
                 f"dimensions, {_fmt(d.get('queries'), ',')} queries batched and "
                 f"{_fmt(d.get('single_queries'))} one at a time; {_fmt(d.get('threads'))} "
                 f"FAISS thread(s), nprobe {_fmt(d.get('nprobe'))}, efSearch "
                 f"{_fmt(d.get('ef_search'))}; faiss {_fmt(d.get('faiss'))}. recall@{k}: share "
                 f"of exact (flat) search's top {k} found. MiB: 2^20 bytes; RSS: resident memory "
                 "the step added (a mapped index's touched pages are page cache).\n")
    rows = []
    for r in d.get("indexes") or []:
        if not isinstance(r, dict):
            continue
        size = r.get("index_bytes")
        rows.append([f"`{_fmt(r.get('factory'))}`", _fmt(r.get("build_seconds"), ".1f"),
                     _fmt(size / 2**20 if isinstance(size, (int, float)) else None, ".1f"),
                     _fmt(r.get("build_peak_rss_mb"), ".0f"), _fmt(r.get("search_rss_mb"), ".0f"),
                     f"{_fmt(r.get('query_ms'), '.3f')} / {_fmt(r.get('query_ms_single'), '.3f')}",
                     _fmt(r.get(f"recall@{k}"), ".3f"), _fmt(r.get("mmap_load_seconds"), ".3f"),
                     f"{_fmt(r.get('mmap_load_rss_mb'), '.1f')} / "
                     f"{_fmt(r.get('mmap_search_rss_mb'), '.0f')}",
                     f"{_fmt(r.get('mmap_query_ms'), '.3f')} / "
                     f"{_fmt(r.get('mmap_query_ms_single'), '.3f')}",
                     _fmt(r.get("mmap_same_results"))])
    if rows:
        lines += _table(["factory", "build s", "index MiB", "build peak RSS MiB",
                         "search RSS MiB", "query ms batched / single", f"recall@{k}",
                         "mmap load s", "mmap RSS MiB load / search",
                         "mmap query ms batched / single", "mmap same results"], rows)
    else:
        lines.append("No index measured in the file.")
    return "\n".join(lines).rstrip() + "\n"


def parallel_section(d: dict | None) -> str:
    """parallel.json: one row per run (configuration and round) and the verdict; a file still
    being written (no summary yet) gets its finished runs and no verdict; None: not measured."""
    lines = ["### 1 process x 2 threads against 2 processes x 1 thread "
             "(`benchmarks/parallel.json`)\n"]
    if d is None:
        lines.append("Not measured yet (`python benchmarks/bench_parallel.py` writes it).")
        return "\n".join(lines).rstrip() + "\n"
    lines.append(bench_header(d) + "\n")
    st = d.get("settings") if isinstance(d.get("settings"), dict) else {}
    if st:
        ids, methods = st.get("question_ids"), st.get("methods")
        lines.append(f"Generator `{_fmt(st.get('generator'))}`, dataset "
                     f"`{_fmt(st.get('dataset'))}`, "
                     f"{len(ids) if isinstance(ids, list) else '-'} questions x methods "
                     f"{', '.join(map(str, methods)) if isinstance(methods, list) else '-'}, "
                     f"{_fmt(st.get('rounds'))} round(s); every call live. Loop wall: first "
                     "question loop's start to the last one's end (model loading excluded).")
    lines.append("")
    runs = [r for r in d.get("runs") or [] if isinstance(r, dict)]
    if runs:
        rows = [[_fmt(r.get("round"), "d"), f"`{_fmt(r.get('config'))}`",
                 f"{_fmt(r.get('processes'), 'd')} x {_fmt(r.get('threads_each'), 'd')}",
                 _fmt(r.get("questions_x_methods"), "d"), _fmt(r.get("errors"), "d"),
                 _fmt(r.get("loop_wall_seconds"), ".1f"), _fmt(r.get("per_hour"), ".1f"),
                 _fmt(r.get("llm_seconds"), ".1f"), _fmt(r.get("spawn_to_exit_seconds"), ".1f")]
                for r in runs]
        lines += _table(["round", "config", "processes x threads", "questions x methods",
                         "errors", "loop wall s", "per hour", "LLM s", "spawn to exit s"], rows)
        lines.append("")
    else:
        lines.append("No run finished yet.\n")
    sm = d.get("summary")
    if isinstance(sm, dict) and sm.get("faster"):
        agree = sm.get("f1_agreement") if isinstance(sm.get("f1_agreement"), dict) else {}
        lines.append(f"Verdict: `{sm['faster']}` is faster; 2x1 over 1x2 speedup (loop wall "
                     f"seconds summed over rounds) {_fmt(sm.get('speedup_2x1_over_1x2'), '.3f')}"
                     + (f"; same F1 on {agree['same_f1']} of {agree['pairs']} (method, question) "
                        "pairs." if "same_f1" in agree and "pairs" in agree else "."))
    else:
        lines.append("No verdict yet: the file is partial (its summary is written when every "
                     "round has finished).")
    return "\n".join(lines).rstrip() + "\n"


def _decision_ms_by_predictor(d: dict) -> dict[str, dict[str, float]]:
    """{predictor: {states' documents: median decision ms}} from the verdict, else from the
    per-size timings of 'decision: valid_actions + choose [predictor]'."""
    by = _get(d, "verdict", "by_predictor")
    if isinstance(by, dict) and by:
        return {p: v["median_ms_by_size"] for p, v in by.items()
                if isinstance(_get(v, "median_ms_by_size"), dict)}
    out: dict[str, dict[str, float]] = {}
    sizes = d.get("sizes") if isinstance(d.get("sizes"), dict) else {}
    for size, s in sizes.items():
        for name, t in (_get(s, "timings") or {}).items():
            if name.startswith("decision:") and "[" in name and isinstance(t, dict):
                out.setdefault(name[name.index("[") + 1:].rstrip("]"), {})[size] = \
                    t.get("median_ms")
    return out


def controller_section(d: dict) -> str:
    """controller.json: median ms of a controller decision per predictor and state size, against
    the target."""
    lines = ["### Controller decision (`benchmarks/controller.json`)\n",
             bench_header(d) + "\n"]
    target = _get(d, "verdict", "target_ms")
    if not isinstance(target, (int, float)) or isinstance(target, bool):
        target = CONTROLLER_TARGET_MS
    by = _decision_ms_by_predictor(d)
    sizes = list(dict.fromkeys(s for v in by.values() for s in v))
    lines.append(f"Median milliseconds of one decision (valid_actions + Policy.choose, no LLM "
                 f"call) on states holding {', '.join(map(str, sizes)) or '-'} documents, "
                 f"against the {target:g} ms target; `library (FlatForest)` is the library's "
                 "own predict path.\n")
    if by:
        rows = []
        for p, v in by.items():
            nums = [x for x in v.values() if isinstance(x, (int, float))]
            worst = max(nums) if nums else None
            rows.append([f"`{p}`"] + [_fmt(v.get(s), ".3f") for s in sizes]
                        + [_fmt(worst, ".3f"),
                           "-" if worst is None else ("yes" if worst < target else "no")])
        lines += _table(["predictor"] + [f"{s} docs" for s in sizes]
                        + ["worst", f"under {target:g} ms"], rows)
    else:
        lines.append("No decision timings in the file.")
    return "\n".join(lines).rstrip() + "\n"


def generators_section(d: dict) -> str:
    """generators.json: prompt and decode tokens per second per backend and model."""
    lines = ["### Generators (`benchmarks/generators.json`)\n", bench_header(d) + "\n"]
    st = d.get("settings") if isinstance(d.get("settings"), dict) else {}
    if st:
        lines.append(f"{_fmt(st.get('threads'))} thread(s), up to {_fmt(st.get('new_tokens'))} "
                     f"new tokens, {_fmt(st.get('repeats'))} repeat(s).")
    lines.append("")
    rows = [[_fmt(r.get("backend")), f"`{_fmt(r.get('model'))}`",
             _fmt(r.get("prompt_tokens"), "d"), _fmt(r.get("prompt_tok_s"), ".1f"),
             _fmt(r.get("decode_tok_s"), ".1f"), _fmt(r.get("load_s"), ".1f")]
            for r in d.get("results") or [] if isinstance(r, dict)]
    if rows:
        lines += _table(["backend", "model", "prompt tokens", "prompt tok/s", "decode tok/s",
                         "load s"], rows)
        lines.append("")
    else:
        lines.append("No generator measured in the file.")
    for sk in d.get("skipped") or []:
        if isinstance(sk, dict):
            lines.append(f"- skipped {_fmt(sk.get('backend'))} `{_fmt(sk.get('model'))}`: "
                         f"{_fmt(sk.get('reason'))}")
    return "\n".join(lines).rstrip() + "\n"


def llama_builds_section(d: dict) -> str:
    """llama_builds.json: prompt / decode tokens per second per model for each llama.cpp build
    (portable and AVX-512 wheels), and how many greedy replies the builds share."""
    lines = ["### llama.cpp builds (`benchmarks/llama_builds.json`)\n",
             bench_header(d) + "\n"]
    builds = {k: v for k, v in (d.get("builds") or {}).items() if isinstance(v, dict)}
    lines.append(f"{_fmt(d.get('threads'))} thread(s), {_fmt(d.get('repeats'))} repeat(s); "
                 f"CPU has AVX-512F: {_fmt(d.get('cpu_has_avx512f'))}. Cells: prompt / decode "
                 "tokens per second.\n")
    models = list(dict.fromkeys(m for b in builds.values()
                                if isinstance(b.get("results"), dict) for m in b["results"]))
    if models:
        rows = [[f"`{m}`"] + [f"{_fmt(_get(b, 'results', m, 'prompt_tok_s'), '.1f')} / "
                              f"{_fmt(_get(b, 'results', m, 'decode_tok_s'), '.1f')}"
                              for b in builds.values()] for m in models]
        lines += _table(["model"] + list(builds), rows)
        lines.append("")
    else:
        lines.append("No build measured in the file.")
    for name, b in builds.items():
        if b.get("runs") is False:
            lines.append(f"- `{name}` did not run: {_fmt(b.get('error') or b.get('reason'))}")
    for model, a in (d.get("agreement") or {}).items():  # --agreement N: same greedy replies?
        ref = a.get("reference")
        for name, r in a.items():
            if isinstance(r, dict):
                said = (f"{_fmt(r.get('identical'))} of {_fmt(a.get('prompts'))} greedy replies "
                        f"identical to `{ref}`'s" if "identical" in r
                        else f"not compared: {_fmt(r.get('error'))}")
                lines.append(f"- `{model}`, `{name}`: {said}")
    return "\n".join(lines).rstrip() + "\n"


# File name -> renderer, in the order the Speed section shows them.
BENCH_RENDERERS = {"prefix_reuse.json": prefix_reuse_section, "index.json": index_section,
                   "parallel.json": parallel_section, "controller.json": controller_section,
                   "generators.json": generators_section,
                   "llama_builds.json": llama_builds_section}


def speed_section(bench: Path) -> str:
    """The Speed section: each known benchmark file rendered (parallel.json noted as not
    measured when absent), any other JSON file listed."""
    parts = ["## Speed\n",
             "The figures of the benchmark files in `benchmarks/`, each with its date, CPU, load "
             "averages (over 1, 5 and 15 minutes; a load near or above the number of CPUs means "
             "the seconds include waiting for a core, token counts do not depend on it) and the "
             "command that wrote it. The files hold more (per-question rows, versions).\n"]
    for name, render in BENCH_RENDERERS.items():
        path = bench / name
        if not path.exists():
            if name == "parallel.json":
                parts.append(render(None))
            continue
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            parts.append(f"- `benchmarks/{name}`: unreadable ({e})\n")
            continue
        if not isinstance(d, dict):
            parts.append(f"- `benchmarks/{name}`: not a JSON object; see the file\n")
            continue
        try:
            parts.append(render(d))
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # a format not foreseen
            parts.append(f"- `benchmarks/{name}`: figures not rendered ({type(e).__name__}: "
                         f"{e}); see the file\n")
    others = [p for p in sorted(bench.glob("*.json")) if p.name not in BENCH_RENDERERS]
    for p in others:
        parts.append(f"- `benchmarks/{p.name}` (see the file for figures, date and command)")
    return "\n".join(parts).rstrip() + "\n"
