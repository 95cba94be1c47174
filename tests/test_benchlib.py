"""benchmarks/benchlib.py: the helpers every benchmark record is written with (versions,
command, machine, date), and that the benchmark scripts take them from there."""
import os
import sys
import types
from datetime import datetime, timedelta, timezone
from importlib.metadata import version

import pytest

from helpers import load_script

SCRIPTS = ("bench_controller", "bench_generators", "bench_index", "bench_llama_builds",
           "bench_parallel", "bench_prefix_reuse", "bench_retrieval", "bench_warm_rerun")


@pytest.fixture(scope="module")
def bl():
    return load_script("benchlib", folder="benchmarks")


def test_versions_start_with_python_and_keep_the_order_given(bl, monkeypatch):
    monkeypatch.setitem(sys.modules, "fake_versioned", types.SimpleNamespace(__version__="1.2"))
    monkeypatch.setitem(sys.modules, "fake_unversioned", types.SimpleNamespace())
    out = bl.versions(("fake_versioned", "no_such_module_xyz", "fake_unversioned"))
    assert list(out) == ["python", "fake_versioned", "no_such_module_xyz", "fake_unversioned"]
    assert out["python"] == ".".join(map(str, sys.version_info[:3]))
    # a missing module or one without __version__ is recorded as None, not an error
    assert out["fake_versioned"] == "1.2"
    assert out["no_such_module_xyz"] is None and out["fake_unversioned"] is None


def test_versions_from_metadata_read_distribution_names(bl):
    out = bl.versions(["pytest", "no-such-distribution-xyz"], metadata=True)
    assert out["pytest"] == version("pytest")
    assert out["no-such-distribution-xyz"] is None


def test_recorded_command_puts_thread_setting_before_nice(bl, tmp_path):
    script = tmp_path / "benchmarks" / "bench_x.py"
    cmd = bl.recorded_command(["--quick"], script, env={"DYNAKRAG_N_THREADS": "2"},
                              niceness=5, root=tmp_path)
    assert cmd == "DYNAKRAG_N_THREADS=2 nice -n 5 python benchmarks/bench_x.py --quick"


def test_recorded_command_leaves_out_unset_unlisted_env_and_zero_niceness(bl, tmp_path):
    script = tmp_path / "benchmarks" / "bench_x.py"
    env = {"DYNAKRAG_N_THREADS": "1", "OMP_NUM_THREADS": "4"}
    assert bl.recorded_command([], script, env={}, niceness=0, root=tmp_path) == \
        "python benchmarks/bench_x.py"
    assert bl.recorded_command([], script, env_keys=(), env=env, niceness=0,
                               root=tmp_path) == "python benchmarks/bench_x.py"
    assert bl.recorded_command([], script, env_keys=("OMP_NUM_THREADS", "DYNAKRAG_N_THREADS"),
                               env=env, niceness=0, root=tmp_path) == \
        "OMP_NUM_THREADS=4 DYNAKRAG_N_THREADS=1 python benchmarks/bench_x.py"


def test_recorded_command_can_be_pasted_back_from_the_root(bl, tmp_path):
    script = tmp_path / "benchmarks" / "bench_x.py"
    argv = ["--out", str(tmp_path / "out dir" / "r.json"), "--api-key", "SECRET"]
    cmd = bl.recorded_command(argv, script, env={}, niceness=0, root=tmp_path)
    # paths relative to the root, quoted where needed; a credential is not recorded
    assert cmd == "python benchmarks/bench_x.py --out 'out dir/r.json' --api-key ***"


def test_recorded_command_shows_a_script_outside_the_root_as_given(bl, tmp_path):
    cmd = bl.recorded_command([], "/elsewhere/bench_y.py", env={}, niceness=0,
                              root=tmp_path / "project")
    assert cmd == "python /elsewhere/bench_y.py"


def test_recorded_command_reads_this_process_by_default(bl, monkeypatch):
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "3")
    cmd = bl.recorded_command(["--n", "1"], bl.ROOT / "benchmarks" / "bench_x.py")
    assert cmd.startswith("DYNAKRAG_N_THREADS=3 ")
    assert cmd.endswith("python benchmarks/bench_x.py --n 1")
    assert ("nice -n" in cmd) == bool(os.nice(0))


def test_loadavg_rounds_given_values_or_keeps_them(bl):
    assert bl.loadavg(values=(1.23456, 0.5, 2.0)) == [1.23, 0.5, 2.0]
    assert bl.loadavg(None, values=(1.23456, 0.5, 2.0)) == [1.23456, 0.5, 2.0]
    now = bl.loadavg()
    assert len(now) == 3 and all(x >= 0 for x in now)


def test_cpu_model_is_the_install_script_reader(bl):
    assert bl.cpu_model() == load_script("install_llama").cpu_model()


def test_usable_cpus_never_exceed_the_machine(bl):
    n = bl.usable_cpus()
    assert n is None or 1 <= n <= (os.cpu_count() or n)


def test_utc_date_is_iso_to_the_second_in_utc(bl):
    d = datetime.fromisoformat(bl.utc_date())
    assert d.utcoffset() == timedelta(0) and d.microsecond == 0
    assert abs(datetime.now(timezone.utc) - d) < timedelta(minutes=1)


def test_shown_path_is_relative_inside_the_root_else_as_given(bl, tmp_path):
    assert bl.shown_path(tmp_path / "results" / "x.json", root=tmp_path) == "results/x.json"
    assert bl.shown_path("/elsewhere/x.json", root=tmp_path) == "/elsewhere/x.json"


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_scripts_take_the_record_helpers_from_benchlib(name):
    """Each script imports from anywhere (its preamble finds benchlib) and keeps no copy of
    a shared helper (bench_controller's cpu_model(cpuinfo) parses text: its own)."""
    mod = load_script(name, folder="benchmarks")
    for helper in ("versions", "recorded_command", "cpu_model", "cpu_name", "loadavg"):
        fn = getattr(mod, helper, None)
        if fn is None or (name, helper) == ("bench_controller", "cpu_model"):
            continue
        assert fn.__module__ == "benchlib", f"{name}.{helper} is a local copy"


def test_portable_replaces_machine_paths_in_every_string_of_a_report(tmp_path):
    import tempfile
    from pathlib import Path
    bl = load_script("benchlib", folder="benchmarks")
    root = tmp_path / "work" / "main"
    root.mkdir(parents=True)
    tmp = Path(tempfile.gettempdir()).resolve()
    home = str(Path.home())
    report = {"command": f"python x.py --out {tmp}/run --data {root}/results/a.json",
              "runs": [{"dir": f"{home}/.cache/x", "data": f"{root.parent}/shared/data"}],
              "n": 3}
    out = bl.portable(report, root=root)
    assert out["command"] == "python x.py --out $TMPDIR/run --data results/a.json"
    assert out["runs"][0] == {"dir": "~/.cache/x", "data": "../shared/data"}
    assert out["n"] == 3 and report["runs"][0]["dir"].startswith(home)  # input untouched
