"""FAISS index kinds on a synthetic corpus: build time, size on disk, memory, query latency and
recall@10 against exact (flat) search, through the library's own index code
(:func:`dynakrag_lite.ann.build_index`, ``write_index_atomic``, ``read_index``).

    python benchmarks/bench_index.py                 # 1,000,000 x 384: Flat, IVF4096,PQ48, HNSW32
    python benchmarks/bench_index.py --n 20000 --factories "IVF64,PQ16;HNSW32" \\
        --out /tmp/index.json                        # a smoke run: seconds

Factory strings contain commas, so ``--factories`` separates them with ``;``. Flat is always
built first: it is the ground truth of recall@10.

Corpus. ``--n`` unit vectors of ``--dim`` (384, all-MiniLM-L6-v2's) with topic structure, so
that IVF's coarse clustering has something to find and recall is not trivially 0 or 1:
``--clusters`` topic centres, each with ``--subclusters`` sub-topic centres; a vector is its
topic centre plus sub-topic and individual Gaussian noise, normalized; a ``--noise-frac`` share
are plain Gaussian vectors (outliers). Queries are drawn like the clustered vectors (same
centres, fresh noise) and are not in the corpus. Everything is seeded (``--seed``) and
generated chunk by chunk into ``.npy`` files in a work folder (``--workdir``, default a
temporary folder, removed at the end unless ``--keep``): 1M x 384 float32 is 1.5 GB.

Measurements. Each index is built in a fresh process, and loaded and searched in two more
(plain read, then memory-mapped), so a peak or resident-memory figure belongs to that step
alone (``spawn``: no memory inherited from this process):

* ``build_seconds``: train (seeded sample, see ``train_rows``) + add, reading the vectors
  file in chunks; ``write_seconds``: saving it; ``index_bytes``: the file's size.
* ``build_peak_rss_mb``: the build process's peak RSS (VmHWM, reset just before building)
  minus its RSS then.
* ``load_rss_mb`` / ``mmap_load_rss_mb``: RSS added by loading the index (plain / mapped);
  ``search_rss_mb`` / ``mmap_search_rss_mb``: RSS added once the queries ran (a mapped index's
  touched pages count: they are page cache the kernel can drop).
* ``query_ms``: one batch of ``--queries`` queries, wall time per query; ``query_ms_single``:
  the first ``--single-queries`` queries one call each (as ``DenseRetriever.search`` does);
  both with ``--threads`` FAISS threads (default 1). Builds use ``--build-threads``.
* ``recall@10``: mean share of flat's top 10 found in the index's top 10 (``--k``);
  ``mmap_same_results``: the mapped index returned the same ids as the plain one.

Writes results/benchmarks/index.json (``--out``) with date, CPU model, faiss version, N, dim,
threads, and prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere, without installing
        sys.path.insert(0, str(p))

from benchlib import cpu_model, portable, utc_date, versions  # noqa: E402

GEN_CHUNK = 65_536  # rows generated per step (and per seed), whatever --n


# -- synthetic corpus ----------------------------------------------------------------------
def _centres(args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Topic centres (clusters x dim), sub-topic offsets (clusters x subclusters x dim) and the
    noise shaping matrix (dim x dim): Gaussian noise times it has a power spectrum falling as
    rank^(-2 * decay) along random orthogonal axes, with E|noise|^2 unchanged (decay 0:
    isotropic). Sentence embeddings vary along few directions more than along the rest;
    isotropic noise in 384 dimensions is the worst case for product quantization."""
    rng = np.random.default_rng([args.seed, 0])
    topics = rng.standard_normal((args.clusters, args.dim)).astype("float32")
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    q, _ = np.linalg.qr(rng.standard_normal((args.dim, args.dim)))
    spectrum = (np.arange(args.dim) + 1.0) ** -args.decay
    spectrum /= np.sqrt(np.mean(spectrum ** 2))
    shape = (spectrum[:, None] * q.T / np.sqrt(args.dim)).astype("float32")
    subs = rng.standard_normal((args.clusters * args.subclusters, args.dim)).astype("float32")
    subs = (subs @ shape * args.sub_sigma).reshape(args.clusters, args.subclusters, args.dim)
    return topics, subs, shape


def _draw(rng: np.random.Generator, m: int, centres: tuple, args,
          noise_frac: float) -> np.ndarray:
    topics, subs, shape = centres
    t = rng.integers(0, len(topics), m)
    s = rng.integers(0, subs.shape[1], m)
    x = topics[t] + subs[t, s]
    x += (rng.standard_normal((m, args.dim), dtype="float32") @ shape) * args.point_sigma
    if noise_frac > 0:  # outliers: no topic at all
        out = rng.random(m) < noise_frac
        x[out] = rng.standard_normal((int(out.sum()), args.dim), dtype="float32")
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype("float32", copy=False)


def write_vectors(path: Path, n: int, args, stream: int, noise_frac: float) -> None:
    """n vectors into a float32 .npy file, GEN_CHUNK rows at a time (seeded per chunk, so the
    corpus does not depend on memory or chunking)."""
    centres = _centres(args)
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": (n, args.dim)})
        for i, start in enumerate(range(0, n, GEN_CHUNK)):
            rng = np.random.default_rng([args.seed, stream, i])
            fh.write(_draw(rng, min(GEN_CHUNK, n - start), centres, args,
                           noise_frac).tobytes())


# -- workers (each in a fresh process) -----------------------------------------------------
def _rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> None:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0). A spawned
    process starts with the peak of the process it was forked from (getrusage's ru_maxrss
    even survives exec), which would hide a smaller build behind the parent's size."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def build_worker(vec_path: str, factory: str | None, index_path: str, opts: dict) -> dict:
    import faiss
    from dynakrag_lite.ann import build_index, write_index_atomic
    faiss.omp_set_num_threads(opts["build_threads"])
    vecs = np.load(vec_path, mmap_mode="r")  # read back in chunks by build_index
    _reset_peak()
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    index = build_index(vecs, factory, train_size=opts["train_size"], seed=opts["seed"],
                        nprobe=opts["nprobe"], ef_search=opts["ef_search"])
    build_s = time.perf_counter() - t0
    peak = _peak_rss_mb() - rss0
    t0 = time.perf_counter()
    size, _ = write_index_atomic(index, index_path)
    return {"build_seconds": round(build_s, 2),
            "write_seconds": round(time.perf_counter() - t0, 2),
            "index_bytes": size, "build_peak_rss_mb": round(peak, 1),
            "index_type": type(faiss.downcast_index(index)).__name__}


def search_worker(index_path: str, query_path: str, ids_path: str, mmap: bool,
                  opts: dict) -> dict:
    import faiss
    from dynakrag_lite.ann import read_index, set_search_params
    faiss.omp_set_num_threads(opts["threads"])
    queries = np.load(query_path)
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    index, mapped = read_index(index_path, mmap=mmap)
    load_s = time.perf_counter() - t0
    if opts["factory"] is not None:
        set_search_params(index, opts["nprobe"], opts["ef_search"])
    rss_load = _rss_mb() - rss0
    t0 = time.perf_counter()
    _, ids = index.search(queries, opts["k"])
    batch_s = time.perf_counter() - t0
    single = queries[: opts["single_queries"]]
    t0 = time.perf_counter()
    for i in range(len(single)):
        index.search(single[i:i + 1], opts["k"])
    single_s = time.perf_counter() - t0
    np.save(ids_path, ids)
    return {"load_seconds": round(load_s, 3), "mapped": mapped,
            "load_rss_mb": round(rss_load, 1), "search_rss_mb": round(_rss_mb() - rss0, 1),
            "query_ms": round(batch_s / len(queries) * 1000, 4),
            "query_ms_single": round(single_s / max(1, len(single)) * 1000, 4)}


def _in_fresh_process(fn, *args):
    ctx = mp.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(fn, args)


# -- report --------------------------------------------------------------------------------
def recall_at(ids: np.ndarray, truth: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k]) - {-1}) / k
                          for a, b in zip(ids, truth)]))


def markdown(rows: list[dict], k: int) -> str:
    head = ("| index | build s | size MB | build peak RSS MB | load RSS MB (plain / mmap) "
            f"| query ms (batch / single) | recall@{k} |")
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        lines.append(
            f"| {r['factory']} | {r['build_seconds']:.1f} | {r['index_bytes'] / 2**20:.1f} "
            f"| {r['build_peak_rss_mb']:.0f} | {r['load_rss_mb']:.0f} / "
            f"{r['mmap_load_rss_mb']:.0f}{'' if r['mmapped'] else ' (not mapped)'} "
            f"| {r['query_ms']:.3f} / {r['query_ms_single']:.3f} | {r[f'recall@{k}']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="corpus vectors")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--factories", default="IVF4096,PQ48;HNSW32",
                    help="';'-separated FAISS index-factory strings (Flat is always added)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--single-queries", type=int, default=100,
                    help="queries also timed one search call each")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="FAISS threads for search")
    ap.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--train-size", type=int, default=None,
                    help="training sample (default: the library's train_rows rule)")
    ap.add_argument("--clusters", type=int, default=None, help="topics (default n/1000, >=8)")
    ap.add_argument("--subclusters", type=int, default=10, help="sub-topics per topic")
    ap.add_argument("--sub-sigma", type=float, default=0.6)
    ap.add_argument("--point-sigma", type=float, default=0.5)
    ap.add_argument("--decay", type=float, default=0.5,
                    help="noise spectrum decay (0: isotropic)")
    ap.add_argument("--noise-frac", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="folder for vectors and indexes")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", default=str(ROOT / "results" / "benchmarks" / "index.json"))
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.clusters is None:
        args.clusters = max(8, args.n // 1000)
    factories = [f.strip() for f in args.factories.split(";") if f.strip()]
    factories = [None] + [f for f in factories if f.lower() != "flat"]

    import faiss
    from dynakrag_lite.ann import make_index
    for f in factories:  # a typo fails now, not after generating and building
        make_index(args.dim, f)

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_index."))
    work.mkdir(parents=True, exist_ok=True)
    need = args.n * args.dim * 4 * (2 + len(factories))  # vectors + flat + a margin per kind
    free = shutil.disk_usage(work).free
    if free < need:
        print(f"{work}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB needed "
              "(--workdir elsewhere)", file=sys.stderr)
        return 2
    opts = {"build_threads": args.build_threads, "threads": args.threads, "k": args.k,
            "nprobe": args.nprobe, "ef_search": args.ef_search, "train_size": args.train_size,
            "seed": args.seed, "single_queries": args.single_queries}
    rows: list[dict] = []
    try:
        base, queries = work / "base.npy", work / "queries.npy"
        t0 = time.perf_counter()
        write_vectors(base, args.n, args, stream=1, noise_frac=args.noise_frac)
        write_vectors(queries, args.queries, args, stream=2, noise_frac=0.0)
        print(f"generated {args.n:,} x {args.dim} vectors in {time.perf_counter() - t0:.1f} s "
              f"({work})", flush=True)
        truth = None
        for i, f in enumerate(factories):
            name = f or "Flat"
            idx_path = work / f"index{i}.faiss"
            row: dict = {"factory": name}
            row.update(_in_fresh_process(build_worker, str(base), f, str(idx_path), opts))
            ids_plain, ids_mmap = work / f"ids{i}.npy", work / f"ids{i}.mmap.npy"
            o = {**opts, "factory": f}
            plain = _in_fresh_process(search_worker, str(idx_path), str(queries),
                                      str(ids_plain), False, o)
            mapped = _in_fresh_process(search_worker, str(idx_path), str(queries),
                                       str(ids_mmap), True, o)
            row.update({key: v for key, v in plain.items() if key != "mapped"})
            row.update({"mmapped": mapped["mapped"],
                        "mmap_load_seconds": mapped["load_seconds"],
                        "mmap_load_rss_mb": mapped["load_rss_mb"],
                        "mmap_search_rss_mb": mapped["search_rss_mb"],
                        "mmap_query_ms": mapped["query_ms"],
                        "mmap_query_ms_single": mapped["query_ms_single"]})
            ids = np.load(ids_plain)
            if truth is None:
                truth = ids
            row[f"recall@{args.k}"] = round(recall_at(ids, truth, args.k), 4)
            row["mmap_same_results"] = bool(np.array_equal(ids, np.load(ids_mmap)))
            rows.append(row)
            print(json.dumps(row), flush=True)
            idx_path.unlink(missing_ok=True)  # disk: the next kind needs the room
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    out = {"date": utc_date(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
           **versions(("faiss", "numpy")), "n": args.n, "dim": args.dim,
           "queries": args.queries, "single_queries": args.single_queries, "k": args.k,
           "threads": args.threads, "build_threads": args.build_threads, "nprobe": args.nprobe,
           "ef_search": args.ef_search, "train_size": args.train_size, "seed": args.seed,
           "data": {"clusters": args.clusters, "subclusters": args.subclusters,
                    "sub_sigma": args.sub_sigma, "point_sigma": args.point_sigma,
                    "decay": args.decay, "noise_frac": args.noise_frac},
           "command": "python benchmarks/bench_index.py " + " ".join(
               a if " " not in a and ";" not in a else json.dumps(a) for a in argv),
           "indexes": rows}
    dest = Path(args.out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(portable(out), indent=2) + "\n")
    print()
    print(f"{args.n:,} x {args.dim} vectors, {args.queries} queries, {args.threads} search "
          f"thread(s), faiss {faiss.__version__}, {cpu_model()}")
    print()
    print(markdown(rows, args.k))
    print(f"\nwrote {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
