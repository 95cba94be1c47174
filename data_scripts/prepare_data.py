#!/usr/bin/env python
"""Normalize an official multi-hop QA dev file into DynaKRAG-lite's JSONL schema.

    python data_scripts/prepare_data.py --dataset hotpotqa --out DIR [--raw FILE] [--limit N]

With ``--raw FILE`` a local official file is converted (no network). Without it the official
dev file is downloaded where a network exists (zip archives are unpacked in memory); if the
download fails, the script says where to get the file by hand and exits with status 2.
Writes ``DIR/<dataset>.jsonl`` atomically via :func:`dynakrag_lite.data.write_questions`.

``DYNAKRAG_DATA_MIRROR`` (:data:`MIRROR_ENV`) replaces the official download locations with a
mirror: a base URL (``http(s)://``, ``file://``) or a local folder that holds each official dev
file itself, unpacked, under its official name (:attr:`Source.filename`:
``hotpot_dev_distractor_v1.json``, ``dev.json``, ``musique_ans_v1.0_dev.jsonl``). The script
then fetches ``<mirror>/<name>`` and nothing else (a failing mirror is an error, not a silent
fall back to the internet), and prints the URL it fetched. For a machine or a Colab runtime
that cannot reach the official hosts, and for ``colab_live_check.py``, which serves such a
file from 127.0.0.1.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynakrag_lite.data.sources import DATASET_FILES, write_questions  # noqa: E402
from dynakrag_lite.data.schema import DataError  # noqa: E402
from dynakrag_lite.data.raw_formats import read_raw  # noqa: E402


@dataclass(frozen=True)
class Source:
    url: str                 # direct download URL of the official distribution
    member: str | None       # file inside the zip archive (matched by its basename), or None
    suffix: str              # ".json" (a list of records) or ".jsonl"
    homepage: str            # where the README with the download links lives

    @property
    def filename(self) -> str:
        """The official dev file's own name (what a mirror serves)."""
        return self.member or urllib.parse.urlsplit(self.url).path.rsplit("/", 1)[-1]


# Official dev-set distributions (as linked from each benchmark's README).
SOURCES: dict[str, Source] = {
    "hotpotqa": Source(
        "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json", None, ".json",
        "https://hotpotqa.github.io"),
    "2wikimultihopqa": Source(
        "https://www.dropbox.com/s/ms2m13252h6xubs/data_ids_april7.zip?dl=1", "dev.json",
        ".json", "https://github.com/Alab-NII/2wikimultihop"),
    "musique": Source(
        "https://drive.usercontent.google.com/download?id=1tGdADlNjWFaHLeZZGShh2IRcpO6Lv24h"
        "&export=download&confirm=t", "musique_ans_v1.0_dev.jsonl", ".jsonl",
        "https://github.com/StonyBrookNLP/musique"),
}


MIRROR_ENV = "DYNAKRAG_DATA_MIRROR"


def mirror_url(dataset: str, mirror: str) -> str:
    """``<mirror>/<official file name>`` for a mirror given as a URL or a local folder."""
    base = mirror.strip()
    if len(urllib.parse.urlsplit(base).scheme) < 2:  # no scheme, or a drive letter: a folder
        base = Path(base).expanduser().resolve().as_uri()
    return f"{base.rstrip('/')}/{urllib.parse.quote(SOURCES[dataset].filename)}"


def fetch_url(dataset: str, mirror: str | None = None) -> tuple[str, str]:
    """The URL the dev file is fetched from, and the mirror ``mirror`` (default:
    ``$DYNAKRAG_DATA_MIRROR``) names, "" for the official location."""
    mirror = os.environ.get(MIRROR_ENV, "").strip() if mirror is None else mirror.strip()
    return (mirror_url(dataset, mirror) if mirror else SOURCES[dataset].url), mirror


def download(dataset: str, dest_dir: Path, timeout: float = 60.0,
             mirror: str | None = None) -> Path:
    """Fetch the official dev file into dest_dir, from the official location or, when a
    mirror is set (:func:`fetch_url`), from the mirror only; raise OSError with a clear
    message on failure."""
    src = SOURCES[dataset]
    url, mirror = fetch_url(dataset, mirror)
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "dynakrag-lite"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = resp.read()
        if mirror or src.member is None:  # a mirror holds the file itself, unpacked
            data = payload
        else:
            with zipfile.ZipFile(io.BytesIO(payload)) as zf:
                names = [n for n in zf.namelist()
                         if n.rsplit("/", 1)[-1] == src.member and "__MACOSX" not in n]
                if not names:
                    raise OSError(f"{src.member} not found in the downloaded archive")
                data = zf.read(names[0])
    except (OSError, zipfile.BadZipFile) as e:
        if mirror:
            raise OSError(f"could not fetch the {dataset} dev file from the mirror {url} "
                          f"(${MIRROR_ENV}={mirror}): {e}") from None
        raise OSError(
            f"could not download the {dataset} dev file ({e}).\n"
            f"Download it by hand from {src.homepage} (official file: "
            f"{src.filename}; unzip the archive if needed) and run:\n"
            f"  python data_scripts/prepare_data.py --dataset {dataset} --raw <FILE> --out <DIR>"
        ) from None
    out = dest_dir / f"{dataset}_dev{src.suffix}"
    out.write_bytes(data)
    print(f"{dataset}: fetched {url}" + (f" (mirror: ${MIRROR_ENV})" if mirror else ""))
    return out


def prepare(dataset: str, out_dir: Path, raw: Path | None = None,
            limit: int | None = None) -> Path:
    """Normalize ``raw`` (or the downloaded dev file) into ``out_dir/<dataset>.jsonl``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = raw if raw is not None else download(dataset, Path(tmp))
        try:
            report = read_raw(path)
            if report.dataset != dataset:
                raise DataError(path, None, None, f"records look like {report.dataset}, not "
                                f"{dataset}")
        except DataError as e:
            if raw is not None:
                raise
            # The downloaded copy is a temporary file: name where it came from instead.
            raise DataError(fetch_url(dataset)[0], e.line, e.field, e.problem) from None
    questions = report.questions[:limit] if limit else report.questions
    target = write_questions(questions, out_dir / DATASET_FILES[dataset])
    note = (f", skipped {report.n_unanswerable} unanswerable" if report.n_unanswerable else "")
    print(f"{dataset}: {report.n_records} records read{note}; wrote {len(questions)} "
          f"questions to {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, choices=sorted(SOURCES))
    ap.add_argument("--out", required=True, type=Path, help="folder for <dataset>.jsonl")
    ap.add_argument("--raw", type=Path, help="a local official file (skips the download)")
    ap.add_argument("--limit", type=int, help="keep only the first N questions")
    args = ap.parse_args(argv)
    try:
        prepare(args.dataset, args.out, args.raw, args.limit)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except DataError as e:
        print(f"error: bad input: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
