"""Experiments named in files: ``results/configs/<name>.toml`` over ``results/configs/base.toml``.

A config names settings as the CLI names its options (``n_eval`` is ``--n-eval``; ``true`` sets
a flag; ``false`` leaves an option to the CLI's default, which is defined once, in the CLI), a
``[train]`` table for the policy's ``train`` command, ``[variants.SUFFIX]`` tables for variant
policies, and one ``[runs.NAME]`` table per run. ``base = "FILE"`` names the config it is laid
over. A run's settings are, the later winning: the base's top level, the config's top level,
the caller's overrides, the base's ``[runs.NAME]``, the config's ``[runs.NAME]``. ``{name}`` in
a string is filled from the run's other settings, ``{run}`` (its name) and ``{reader}`` (its
generator, or ``<generator>-policy-<policy_generator>`` for a policy of another generator).
Paths are relative to the project folder, where the commands run.

``python -m dynakrag_lite evaluate --config FILE --run NAME`` runs one run (:func:`expand_config`);
``data_scripts/main_experiment.py --config FILE`` runs them all.
"""
from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("dynakrag", "uniform", "oracle")  # the runs that take a policy and a compressor
OWN_KEYS = ("base", "out_root", "policy_generator", "policy_suffix", "run", "reader")
TABLES = ("train", "variants", "runs")
# The order of a recorded command: head, the run's own settings, the rest, tail.
HEAD = ("data", "data_dir", "n_eval", "split", "offset")
TAIL = ("policy", "compressor", "selector", "generator", "limit", "out")


class ConfigError(ValueError):
    """A config that cannot be read or used; the message names the file and the key."""


def read_toml(path: str | Path) -> dict:
    """One TOML file as a dict; ConfigError naming the file when it is missing or not TOML."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def _check_layer(path: str, table: dict) -> None:
    for key, value in table.items():
        if isinstance(value, dict) and key not in TABLES:
            raise ConfigError(f"{path}: [{key}] is not a table of a config (only "
                              f"{', '.join(TABLES)})")
        if key in TABLES and not isinstance(value, dict):
            raise ConfigError(f"{path}: {key} must be a table ([{key}])")
        if key in ("runs", "variants"):
            for name, sub in value.items():
                if not isinstance(sub, dict):
                    raise ConfigError(f"{path}: {key}.{name} must be a table "
                                      f"([{key}.{name}])")


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
            table = read_toml(p)
            _check_layer(str(p), table)
            layers.insert(0, (str(p), table))
            base = table.get("base")
            if base is None:
                return cls(Path(path), layers)
            if not isinstance(base, str):
                raise ConfigError(f"{p}: base = {base!r}: the name of a config file")
            p = p.parent / base

    @property
    def runs(self) -> list[str]:
        """The runs this config names (base.toml: every run it defines)."""
        return list(self.layers[-1][1].get("runs", {}))

    @property
    def defined_runs(self) -> list[str]:
        """Every run a ``[runs.NAME]`` table of this config or its bases defines."""
        return list(dict.fromkeys(n for _, t in self.layers for n in t.get("runs", {})))

    def variant(self, suffix: str) -> tuple[dict, dict]:
        """The train settings of the variant policy ``suffix`` and their files."""
        out, origin = {}, {}
        for f, t in self.layers:
            for k, v in t.get("variants", {}).get(suffix, {}).items():
                out[k], origin[k] = v, f"{f} [variants.{suffix}]"
        if not out:
            raise ConfigError(f"{self.path}: no [variants.{suffix}] table (nor in its bases)")
        return out, origin

    def settings(self, run: str | None = None, overrides: dict | None = None
                 ) -> tuple[dict, dict]:
        """(settings, origin): a run's merged settings (``run`` None: the config's top level),
        templates filled, ``[train]`` as ``settings["train"]``; origin names each key's file
        (a train key as ``train.KEY``)."""
        if run is not None and run not in self.defined_runs:
            raise ConfigError(f"{self.path}: no run {run!r} (runs: "
                              f"{', '.join(self.defined_runs)})")
        top, own, train, origin = {}, {}, {}, {}
        for f, t in self.layers:
            for k, v in t.items():
                if k not in TABLES:
                    top[k], origin[k] = v, f
            for k, v in t.get("train", {}).items():
                train[k], origin[f"train.{k}"] = v, f"{f} [train]"
        for k, v in (overrides or {}).items():
            top[k], origin[k] = v, "the command line"
        for f, t in self.layers:
            for k, v in t.get("runs", {}).get(run, {}).items():
                own[k], origin[k] = v, f"{f} [runs.{run}]"
        merged = {**own, **{k: v for k, v in top.items() if k not in own}, "run": run or ""}
        _fill(merged, origin)
        train = {k: _fill_one(f"train.{k}", v, merged, origin) for k, v in train.items()}
        return {**merged, "train": train}, origin


def _fill_one(key: str, value, ctx: dict, origin: dict):
    if not isinstance(value, str) or "{" not in value:
        return value
    try:
        return value.format_map(ctx)
    except KeyError as e:
        raise ConfigError(f"{origin.get(key, '?')}: {key} = {value!r}: no setting named "
                          f"{e.args[0]!r}") from None
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{origin.get(key, '?')}: {key} = {value!r}: {e}") from None


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
    raise ConfigError(f"{origin.get(loop[0], '?')}: {loop[0]} = {ctx[loop[0]]!r}: templates "
                      f"that name each other in a cycle ({', '.join(loop)})")


def options(parser: argparse.ArgumentParser, mode: str) -> dict[str, argparse.Action]:
    """The options of ``parser``'s subcommand ``mode`` by setting name (dest)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[mode]._actions if a.option_strings}


def to_flags(settings: dict, origin: dict, parser: argparse.ArgumentParser, mode: str,
             prefix: str = "") -> list[str]:
    """The command-line flags of ``settings`` for ``python -m dynakrag_lite <mode>``, in the
    recorded commands' order; ConfigError naming the file and the key of a bad setting."""
    opts = options(parser, mode)
    keys = [k for k in HEAD if k in settings] + \
        [k for k in settings if k not in HEAD + TAIL] + [k for k in TAIL if k in settings]
    out: list[str] = []
    for k in keys:
        v, where = settings[k], f"{origin.get(prefix + k, '?')}: {prefix}{k}"
        if k in OWN_KEYS + TABLES or (v is False and k in opts):
            continue
        act = opts.get(k)
        if act is None:
            raise ConfigError(f"{where}: no such setting (python -m dynakrag_lite {mode} has "
                              f"no --{k.replace('_', '-')})")
        flag = max(act.option_strings, key=len)
        if act.nargs == 0:  # a flag: true or false
            if v is not True:
                raise ConfigError(f"{where} = {v!r}: true or false")
            out.append(flag)
            continue
        if isinstance(v, (bool, dict, list)):
            raise ConfigError(f"{where} = {v!r}: a number or a string (false: the default)")
        try:
            value = act.type(str(v)) if callable(act.type) else str(v)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            raise ConfigError(f"{where} = {v!r}: {e}") from None
        if act.choices is not None and value not in act.choices:
            raise ConfigError(f"{where} = {v!r}: one of {', '.join(map(str, act.choices))}")
        out += [flag, str(v)]
    return out


def evaluate_argv(settings: dict, origin: dict, parser: argparse.ArgumentParser) -> list[str]:
    """The ``evaluate`` command of a run's settings: policy and compressor for the controller
    runs only, the selector for the extractive compressor only."""
    s = {k: v for k, v in settings.items() if k != "train"}
    if s.get("method") not in CONTROLLERS:
        for k in ("policy", "compressor", "selector"):
            s.pop(k, None)
    if s.get("compressor") != "extractive":
        s.pop("selector", None)
    return ["evaluate", *to_flags(s, origin, parser, "evaluate")]


def expand_config(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``evaluate --config FILE --run NAME [FLAGS]`` as the config's command for that run with
    FLAGS after it (so they win); any other command line as it is. A bad config exits through
    ``parser.error`` (exit code 2) naming the file and the key."""
    if not argv or argv[0] != "evaluate" or not any(
            a.split("=")[0] in ("--config", "--run") for a in argv):
        return argv
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    pre.add_argument("--run")
    given, rest = pre.parse_known_args(argv[1:])
    try:
        if not given.config or not given.run:
            raise ConfigError("--config FILE and --run NAME go together")
        config = Config.load(given.config)
        return [*evaluate_argv(*config.settings(given.run), parser), *rest]
    except ConfigError as e:
        parser.error(str(e))
