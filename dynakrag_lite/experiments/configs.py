"""Experiments named in files: ``results/configs/<name>.toml`` over ``results/configs/base.toml``.

Settings are named as the CLI's options (``n_eval`` is ``--n-eval``; ``true`` sets a flag,
``false`` leaves the CLI's default); ``[train]``, ``[variants.SUFFIX]`` and ``[runs.NAME]`` hold
a policy's, a variant policy's and a run's. Later wins: the base's top level, the config's, the
caller's overrides, the base's ``[runs.NAME]``, the config's. ``{name}`` is filled from the other
settings, ``{run}`` and ``{reader}``. Paths are relative to the project."""
from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("dynakrag", "uniform", "oracle")  # the runs that take a policy and a compressor
OWN_KEYS = ("base", "out_root", "policy_generator", "policy_suffix", "run", "reader")
TABLES = ("train", "variants", "runs")
HEAD = ("data", "data_dir", "n_eval", "split", "offset")  # a command: HEAD, run's, rest, TAIL
TAIL = ("policy", "compressor", "selector", "generator", "limit", "out")


class ConfigError(ValueError):
    """A config that cannot be read or used; the message names the file and the key."""


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {getattr(e, 'strerror', None) or f'not valid TOML: {e}'}"
                          ) from None
    for key in TABLES:  # any other table is refused as an unknown setting (to_flags)
        sub = table.get(key, {})
        if not isinstance(sub, dict) or key != "train" and not all(
                isinstance(v, dict) for v in sub.values()):
            raise ConfigError(f"{path}: {key}: a table ([{key}{'.NAME' * (key != 'train')}])")
    return table


@dataclass
class Config:
    """A config file and the files it is laid over (``layers``: (file, table), base first)."""
    path: Path
    layers: list[tuple[str, dict]]

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        layers: list[tuple[str, dict]] = []
        p = Path(path)
        while True:
            if any(p.resolve() == Path(f).resolve() for f, _ in layers):
                raise ConfigError(f"{p}: laid over itself (base = ...)")
            table = _read(p)
            layers.insert(0, (str(p), table))
            if "base" not in table:
                return cls(Path(path), layers)
            if not isinstance(table["base"], str):
                raise ConfigError(f"{p}: base = {table['base']!r}: the name of a config file")
            p = p.parent / table["base"]

    @property
    def runs(self) -> list[str]:
        """The runs this config names (base.toml: every run it defines)."""
        return list(self.layers[-1][1].get("runs", {}))

    def table(self, *keys: str | None, prefix: str = "") -> tuple[dict, dict]:
        """(values, files by ``prefix`` + key) of table ``keys`` (none: the top level)."""
        out, origin = {}, {}
        for f, t in self.layers:
            for k in keys:
                t = t.get(k, {})
            for k, v in t.items():
                if keys or k not in TABLES:
                    out[k], origin[prefix + k] = v, f"{f} [{'.'.join(keys)}]" if keys else f
        return out, origin

    def settings(self, run: str | None = None, overrides: dict | None = None
                 ) -> tuple[dict, dict]:
        """(settings, origin): a run's (None: the top level) merged settings, templates filled,
        with ``"train"``; origin names each key's file (a train key's as ``train.KEY``)."""
        if run is not None and run not in self.table("runs")[0]:
            raise ConfigError(f"{self.path}: no run {run!r} (runs: "
                              f"{', '.join(self.table('runs')[0])})")
        top, origin = self.table()
        top.update(overrides or {})
        origin.update(dict.fromkeys(overrides or {}, "the command line"))
        (own, own_origin), (train, train_origin) = (self.table("runs", run),
                                                    self.table("train", prefix="train."))
        origin.update({**own_origin, **train_origin})
        merged = {**own, **{k: v for k, v in top.items() if k not in own}, "run": run or ""}
        _fill(merged, origin)
        train = {k: _fill_one(f"train.{k}", v, merged, origin) for k, v in train.items()}
        return {**merged, "train": train}, origin


def _fill_one(key: str, value, ctx: dict, origin: dict):
    try:
        return value.format_map(ctx) if isinstance(value, str) and "{" in value else value
    except (KeyError, ValueError, IndexError) as e:
        why = f"no setting named {e.args[0]!r}" if isinstance(e, KeyError) else e
        raise ConfigError(f"{origin.get(key, '?')}: {key} = {value!r}: {why}") from None


def _fill(ctx: dict, origin: dict) -> None:
    """Fill the ``{name}`` templates of ``ctx`` in place (a template may name another)."""
    for _ in range(8):
        pg, gen = ctx.get("policy_generator"), ctx.get("generator")
        # {reader} waits (stays a template) until both generators are filled
        ctx["reader"] = "{reader}" if "{" in f"{pg}{gen}" else \
            gen if pg in (None, gen) else f"{gen}-policy-{pg}"
        filled = {k: _fill_one(k, v, ctx, origin) for k, v in ctx.items()}
        if filled == ctx:
            return
        ctx.update(filled)
    loop = [k for k, v in ctx.items() if isinstance(v, str) and "{" in v]
    raise ConfigError(f"{origin.get(loop[0], '?')}: templates in a cycle: {', '.join(loop)}")


def to_flags(settings: dict, origin: dict, parser: argparse.ArgumentParser, mode: str,
             prefix: str = "") -> list[str]:
    """The command-line flags of ``settings`` for ``python -m dynakrag_lite <mode>``, in the
    recorded commands' order; ConfigError naming the file and the key of a bad setting."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    opts = {a.dest: a for a in sub.choices[mode]._actions if a.option_strings}
    keys = [k for k in HEAD if k in settings] + \
        [k for k in settings if k not in HEAD + TAIL] + [k for k in TAIL if k in settings]
    out: list[str] = []
    for k in keys:
        v, where = settings[k], f"{origin.get(prefix + k, '?')}: {prefix}{k}"
        if k in OWN_KEYS + TABLES or (v is False and k in opts):
            continue
        act = opts.get(k)
        if act is None:
            raise ConfigError(f"{where}: no such setting ({mode} has no --{k.replace('_', '-')})")
        flag = max(act.option_strings, key=len)
        if act.nargs == 0 or isinstance(v, (bool, dict, list)):  # true sets a flag
            if act.nargs != 0 or v is not True:
                raise ConfigError(f"{where} = {v!r}: " + ("true or false" if act.nargs == 0
                                  else "a number or a string (false: the CLI's default)"))
            out.append(flag)
            continue
        try:
            value = act.type(str(v)) if callable(act.type) else str(v)
            if act.choices is not None and value not in act.choices:
                raise ValueError(f"one of {', '.join(map(str, act.choices))}")
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            raise ConfigError(f"{where} = {v!r}: {e}") from None
        out += [flag, str(v)]
    return out


def evaluate_argv(settings: dict, origin: dict, parser: argparse.ArgumentParser) -> list[str]:
    """The ``evaluate`` command of a run's settings: policy and compressor for the controller
    runs only, the selector for the extractive compressor only."""
    drop = ("train",) if settings.get("method") in CONTROLLERS else \
        ("train", "policy", "compressor", "selector")
    s = {k: v for k, v in settings.items() if k not in drop}
    if s.get("compressor") != "extractive":
        s.pop("selector", None)
    return ["evaluate", *to_flags(s, origin, parser, "evaluate")]


def expand_config(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``evaluate --config FILE --run NAME [FLAGS]`` as the run's command, FLAGS after it (they
    win); other command lines as they are. A bad config: ``parser.error`` (exit code 2)."""
    if argv[:1] != ["evaluate"] or not {"--config", "--run"} & {a.split("=")[0] for a in argv}:
        return argv
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    pre.add_argument("--run")
    given, rest = pre.parse_known_args(argv[1:])
    try:
        if not given.config or not given.run:
            raise ConfigError("--config FILE and --run NAME go together")
        return [*evaluate_argv(*Config.load(given.config).settings(given.run), parser), *rest]
    except ConfigError as e:
        parser.error(str(e))
