"""Experiments named in files (issue 42): every committed run's recorded command is what its
config in results/configs/ makes, main_experiment.py and ``evaluate --config`` run those
commands, a bad config is an error naming its file and key, and a recorded ``--data-dir``
reached through a symlink stays ``../shared/data``."""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from dynakrag_lite.experiments import cli
from dynakrag_lite.experiments.cli import build_parser
from dynakrag_lite.experiments.configs import (Config, ConfigError, evaluate_argv,
                                               expand_config)
from dynakrag_lite.policy import Policy
from dynakrag_lite.storage import relative_command, relative_path
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "results" / "configs"
PARSER = build_parser()
RUN_FOLDERS = sorted(p.parent.relative_to(ROOT).as_posix()
                     for p in (ROOT / "results").rglob("run.json"))
# Folders main_experiment.py made: their commands are the config's character for character
# (the diagnostics' were typed by hand, in another order).
MADE_BY_SCRIPT = ("results/experiments/", "results/primary/")


@pytest.fixture(scope="module")
def made() -> dict[str, tuple[str, str, list[str]]]:
    """Each config's runs by their folder: (config file, run, evaluate arguments)."""
    out = {}
    for f in sorted(CONFIGS.glob("*.toml")):
        if f.name == "base.toml":
            continue
        config = Config.load(f)
        for run in config.runs:
            settings, origin = config.settings(run)
            assert settings["out"] not in out, f"{f.name} and {out[settings['out']][0]}"
            out[settings["out"]] = (f.name, run, evaluate_argv(settings, origin, PARSER))
    return out


def flags(mode: str, argv: list[str]) -> dict[str, object]:
    """The options given in ``argv`` (a command's arguments after its mode), by setting."""
    sub = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
    by_flag = {s: a for a in sub.choices[mode]._actions for s in a.option_strings}
    out, i = {}, 0
    while i < len(argv):
        action = by_flag[argv[i]]
        out[action.dest] = True if action.nargs == 0 else argv[i + 1]
        i += 1 if action.nargs == 0 else 2
    return out


def recorded(folder: str) -> list[str]:
    command = json.loads((ROOT / folder / "run.json").read_text())["command"]
    argv = shlex.split(command)
    return argv[argv.index("evaluate"):]


@pytest.fixture()
def mx():
    return load_script("main_experiment")


@pytest.mark.parametrize("folder", RUN_FOLDERS)
def test_each_committed_runs_command_is_what_its_config_makes(made, folder):
    assert folder in made, f"{folder}: no config in results/configs/ names this run"
    name, run, argv = made[folder]
    rec = recorded(folder)
    assert flags("evaluate", argv[1:]) == flags("evaluate", rec[1:]), f"{name} [runs.{run}]"
    assert vars(PARSER.parse_args(argv)) == vars(PARSER.parse_args(rec))
    if folder.startswith(MADE_BY_SCRIPT):
        assert relative_command(argv) == relative_command(rec)


def test_every_config_names_runs_and_the_committed_experiments_have_one(made):
    assert len(RUN_FOLDERS) > 100 and len(made) >= len(RUN_FOLDERS)
    for data in ("hotpotqa", "2wikimultihopqa", "musique"):
        for gen in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
            assert (CONFIGS / f"{data}-{gen}.toml").is_file()
        assert (CONFIGS / f"primary-eval-{data}.toml").is_file()
    assert (CONFIGS / "primary-check-hotpotqa.toml").is_file()


# The committed policy whose recorded command used an option the CLI no longer has.
RETIRED = {"2wikimultihopqa-qwen2.5-coder-0.5b-gain_stop": "--signal-from"}


@pytest.mark.parametrize("policy", sorted(p.stem for p in
                                          (ROOT / "results/policies").glob("*.joblib")))
def test_committed_policys_train_command_is_what_its_config_makes(mx, policy):
    rec = shlex.split(Policy.load(ROOT / "results/policies" / f"{policy}.joblib")
                      .meta["command"])
    rec = rec[rec.index("train"):]
    if policy in RETIRED:
        assert RETIRED[policy] in rec
        pytest.skip(f"recorded with {RETIRED[policy]}, which the CLI no longer has")
    data, gen, suffix = re.fullmatch(r"(\w+)-(qwen2\.5-coder-[\d.]+b)(-\w+)?", policy).groups()
    config = Config.load(CONFIGS / f"{data}-{gen}.toml")
    settings, origin = config.settings(None, {"policy_suffix": suffix or ""})
    made = mx.train_command(config, settings, origin, variant=suffix)
    assert flags("train", made[1:]) == flags("train", rec[1:])


def _run_main(mx, monkeypatch, *argv) -> list[list[str]]:
    seen: list[list[str]] = []
    monkeypatch.setattr(mx, "run", lambda args, log: seen.append(args) or 0)
    monkeypatch.setattr(sys, "argv", ["main_experiment.py", *argv])
    assert mx.main() == 0
    return seen


def test_main_experiment_with_a_config_runs_the_commands_its_runs_record(mx, monkeypatch):
    config = "results/configs/hotpotqa-qwen2.5-coder-1.5b.toml"
    runs = ["fixed_k12", "uniform-stop2", "dynakrag-cont"]
    seen = _run_main(mx, monkeypatch, "--config", config, "--runs", ",".join(runs))
    folder = "results/experiments/hotpotqa/qwen2.5-coder-1.5b/"
    assert seen == [recorded(folder + r) for r in runs]


@pytest.mark.parametrize("dataset, lane, config", [
    ("hotpotqa", ["--out-root", "results/primary/eval", "--n-eval", "150", "--eval-limit",
                  "150"], "primary-eval-hotpotqa"),
    ("musique", ["--out-root", "results/primary/eval", "--n-eval", "100", "--eval-limit",
                 "100"], "primary-eval-musique"),
    ("hotpotqa", ["--out-root", "results/primary/check", "--split", "train", "--offset", "330",
                  "--eval-limit", "100", "--n-eval", "150", "--selector",
                  "results/selectors/hotpotqa-sentence-selector-first330.joblib"],
     "primary-check-hotpotqa")])
def test_primary_lanes_flags_and_the_primary_configs_make_one_command(mx, monkeypatch,
                                                                      dataset, lane, config):
    """data_scripts/primary_lanes.sh passes flags, not a config: the two must agree."""
    monkeypatch.delenv("DYNAKRAG_DATA_DIR", raising=False)
    path = f"results/configs/{config}.toml"
    runs = ",".join(Config.load(ROOT / path).runs)
    monkeypatch.chdir(ROOT)
    by_flags = _run_main(mx, monkeypatch, "--generator", "qwen2.5-coder-1.5b", *lane,
                         "--dataset", dataset, "--data-dir", "../shared/data", "--runs", runs)
    assert by_flags == _run_main(mx, monkeypatch, "--config", path)


def test_evaluate_config_runs_the_configs_command_and_records_it(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "cmd_evaluate", lambda args: seen.append(args) or 0)
    monkeypatch.chdir(ROOT)
    config = "results/configs/hotpotqa-qwen2.5-coder-1.5b.toml"
    assert cli.main(["evaluate", "--config", config, "--run", "fixed_k12"]) == 0
    folder = "results/experiments/hotpotqa/qwen2.5-coder-1.5b/fixed_k12"
    assert relative_command(seen[0].argv) == \
        json.loads((ROOT / folder / "run.json").read_text())["command"]
    # flags given besides the config's win
    assert cli.main(["evaluate", "--config", config, "--run", "fixed_k12", "--limit", "3"]) == 0
    assert seen[1].limit == 3 and seen[1].fixed_k == 12


def _write(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


@pytest.mark.parametrize("text, message", [
    ('data = "hotpotqa"\n[runs.x]\nmethod = "fixed_k"\nfixed_kk = 3\n',
     "exp.toml [runs.x]: fixed_kk: no such setting"),
    ('[runs.x]\nmethod = "fixed_k"\nfixed_k = "three"\n', "exp.toml [runs.x]: fixed_k = 'three'"),
    ('[runs.x]\nmethod = "magic"\n', "exp.toml [runs.x]: method = 'magic': one of"),
    ('[runs.x]\nmethod = "fixed_k"\nno_compression = "yes"\n', "no_compression = 'yes': true or"),
    ('out = "{out_root}/{nowhere}"\n[runs.x]\nmethod = "fixed_k"\n',
     "exp.toml: out = '{out_root}/{nowhere}': no setting named 'nowhere'"),
    ('runs = 3\n', "exp.toml: runs: a table ([runs.NAME])"),
    ('[runs.x]\nmethod = "fixed_k"\n[extras]\na = 1\n', "exp.toml: extras: no such setting"),
    ('data = \n', "exp.toml: not valid TOML"),
])
def test_a_bad_config_is_an_error_naming_its_file_and_key(tmp_path, text, message):
    _write(tmp_path, "base.toml", (CONFIGS / "base.toml").read_text())
    path = _write(tmp_path, "exp.toml", 'base = "base.toml"\n' + text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        config = Config.load(path)
        evaluate_argv(*config.settings("x"), PARSER)


def test_unknown_run_missing_file_and_a_base_cycle_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no run 'nope' .*dynakrag"):
        Config.load(CONFIGS / "base.toml").settings("nope")
    with pytest.raises(ConfigError, match="missing.toml"):
        Config.load(tmp_path / "missing.toml")
    _write(tmp_path, "a.toml", 'base = "b.toml"\n')
    _write(tmp_path, "b.toml", 'base = "a.toml"\n')
    with pytest.raises(ConfigError, match="laid over itself"):
        Config.load(tmp_path / "a.toml")


def test_evaluate_with_a_bad_config_exits_2_naming_file_and_key(tmp_path, capsys):
    path = _write(tmp_path, "exp.toml", f'base = "{CONFIGS / "base.toml"}"\n'
                  '[runs.x]\nmethod = "fixed_k"\nfixed_kk = 3\n')
    with pytest.raises(SystemExit) as e:
        cli.main(["evaluate", "--config", str(path), "--run", "x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "exp.toml [runs.x]: fixed_kk: no such setting" in err
    with pytest.raises(SystemExit):
        expand_config(["evaluate", "--config", str(path)], PARSER)
    assert "--config FILE and --run NAME go together" in capsys.readouterr().err


def test_a_run_table_wins_over_flags_and_flags_over_the_config(tmp_path):
    config = Config.load(CONFIGS / "hotpotqa-qwen2.5-coder-0.5b.toml")
    s, origin = config.settings("fixed_k3", {"limit": 7, "n_eval": 150})
    assert s["limit"] == 100 and s["n_eval"] is False  # [runs.fixed_k3]'s own
    assert "[runs.fixed_k3]" in origin["limit"]
    s, origin = config.settings("dynakrag", {"limit": 7})
    assert s["limit"] == 7 and origin["limit"] == "the command line"
    assert s["out"] == "results/experiments/hotpotqa/qwen2.5-coder-0.5b/dynakrag"
    transfer = config.settings("dynakrag", {"policy_generator": "qwen2.5-coder-1.5b"})[0]
    assert transfer["out"].endswith("hotpotqa/qwen2.5-coder-0.5b-policy-qwen2.5-coder-1.5b/"
                                    "dynakrag")
    assert transfer["policy"] == "results/policies/hotpotqa-qwen2.5-coder-1.5b.joblib"


# -- recorded paths never resolve a symlinked ../shared -------------------------------------
@pytest.fixture()
def linked(tmp_path) -> Path:
    """tmp/project beside tmp/shared, a symlink to data kept far away (as a machine's
    ../shared may be)."""
    far = tmp_path / "elsewhere" / "deep" / "down" / "shared"
    (far / "data").mkdir(parents=True)
    (tmp_path / "project").mkdir()
    (tmp_path / "shared").symlink_to(far, target_is_directory=True)
    return tmp_path / "project"


def test_relative_path_keeps_a_symlinked_shared_as_it_is_reached(linked, monkeypatch):
    monkeypatch.chdir(linked)
    assert relative_path("../shared/data", linked) == "../shared/data"
    assert relative_path(str(linked.parent / "shared" / "data"), linked) == "../shared/data"
    assert relative_command(["--data-dir", str(linked.parent / "shared" / "data")],
                            prefix="") == "--data-dir ../shared/data"
    # a path inside the project stays the part under it, however it is reached
    (linked.parent / "alias").symlink_to(linked, target_is_directory=True)
    assert relative_path(str(linked.parent / "alias" / "results" / "x"), linked) == \
        "results/x"


def test_main_experiment_records_the_symlinked_data_dir_as_reached(mx, monkeypatch, linked):
    monkeypatch.setattr(mx, "ROOT", linked)
    monkeypatch.chdir(linked)
    monkeypatch.delenv("DYNAKRAG_DATA_DIR", raising=False)
    for given in ("../shared/data", str(linked.parent / "shared" / "data")):
        seen = _run_main(mx, monkeypatch, "--dataset", "hotpotqa", "--runs", "fixed_k12",
                         "--data-dir", given)
        assert seen[0][seen[0].index("--data-dir") + 1] == "../shared/data"
        assert "--data-dir ../shared/data " in relative_command(seen[0], cwd=linked)
    monkeypatch.setenv("DYNAKRAG_DATA_DIR", str(linked.parent / "shared" / "data"))
    seen = _run_main(mx, monkeypatch, "--dataset", "hotpotqa", "--runs", "fixed_k12")
    assert seen[0][seen[0].index("--data-dir") + 1] == "../shared/data"
