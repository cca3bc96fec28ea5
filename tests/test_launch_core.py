"""Tables for the pure parts of `ckptctl launch`: config parsing, argv, capacity, exit codes."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from ckptctl.adapters.config_file import parse_config_yaml
from ckptctl.core.config.checks import parse_nnodes
from ckptctl.core.config.overrides import ConfigOverrides, apply_overrides
from ckptctl.core.config.parse import config_from_dict
from ckptctl.core.config.schema import (
    CkptctlConfig,
    DrainConfig,
    LaunchConfig,
    RecoverConfig,
    SlurmConfig,
)
from ckptctl.core.launch.plan import (
    DEFAULT_JOB_ENV,
    LOCAL_LOG_DIR,
    build_torchrun_argv,
    exit_code_for,
    plan_capacity,
    plan_launch,
    resolve_log_dir,
)
from ckptctl.errors import ConfigError, UsageError

TR = ["python", "-m", "torch.distributed.run"]


def _launch(**kw: Any) -> LaunchConfig:
    kw.setdefault("torchrun", tuple(TR))
    kw.setdefault("script", "train.py")
    return LaunchConfig(**kw)


# -- config: what parses, and to what ---------------------------------------------------------


def test_defaults() -> None:
    c = config_from_dict(None)
    assert c.run_root is None
    assert c.launch.nnodes == "1" and c.launch.nproc_per_node == 1
    assert c.launch.rdzv_backend == "c10d" and c.launch.resume_flag == "--resume-from"
    assert c.launch.torchrun == (sys.executable, "-m", "torch.distributed.run")
    assert c.recover.min_nodes_policy == "wait" and c.recover.drain.kind == "none"


FULL_YAML = """
run_root: s3://bucket/run-1234
launch:
  nnodes: 1:4            # unquoted: YAML 1.1 would read 64 (base 60)
  nproc_per_node: 8
  rdzv_backend: c10d
  rdzv_endpoint: head-node:29400
  rdzv_id: run-1234
  rdzv_conf: {join_timeout: 600, last_call_timeout: 5}
  max_restarts: 3
  monitor_interval_s: 5
  torchrun_args: [--log-dir, /tmp/elastic]
  script: train.py
  script_args: [--steps, 1000, --lr, 0.001]
  resume_flag: --resume-from
  torchrun: [srun, --nodes=4, --ntasks-per-node=1, torchrun]
  env: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 4}
  log_dir: /var/log/ckptctl
  hosts: [n1, n2, n3, n4]
  exclude_hosts: [n9]
  stop_grace_s: 90
recover:
  max_attempts: 2
  watch_steps: 20
  min_nodes_policy: shrink
  capacity_timeout_s: 600
  capacity_poll_s: 10
  drain: {kind: slurm, reason: "xid 79"}
  watch: {k: 3.0, window: 20}
"""


def test_full_yaml() -> None:
    c = parse_config_yaml(FULL_YAML, source="x.yaml")
    assert c.source == "x.yaml"
    assert c.run_root == "s3://bucket/run-1234"
    la = c.launch
    assert la.nnodes == "1:4" and (la.min_nodes, la.max_nodes, la.is_elastic) == (1, 4, True)
    assert la.nproc_per_node == 8
    assert la.rdzv_conf == {"join_timeout": "600", "last_call_timeout": "5"}
    assert la.script_args == ("--steps", "1000", "--lr", "0.001")
    assert la.env == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}
    assert la.torchrun == ("srun", "--nodes=4", "--ntasks-per-node=1", "torchrun")
    assert la.hosts == ("n1", "n2", "n3", "n4") and la.exclude_hosts == ("n9",)
    assert la.monitor_interval_s == 5 and la.stop_grace_s == 90
    r = c.recover
    assert (r.max_attempts, r.watch_steps, r.min_nodes_policy) == (2, 20, "shrink")
    assert r.drain == DrainConfig(kind="slurm", reason="xid 79")
    assert r.watch == {"k": 3.0, "window": 20}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("launch: {nnode: 2}", "unknown key 'launch.nnode' (did you mean 'launch.nnodes'?)"),
        ("lanch: {}", "unknown key 'lanch' (did you mean 'launch'?)"),
        ("recover: {drain: {knd: slurm}}", "unknown key 'recover.drain.knd'"),
        ("recover: {bogus: 1}", "unknown key 'recover.bogus'"),
        ("launch: {nnodes: '0:4'}", "launch.nnodes: '0:4': the minimum node count must be at least 1"),
        ("launch: {nnodes: '4:2'}", "launch.nnodes: '4:2': MAX is smaller than MIN"),
        ("launch: {nnodes: abc}", "launch.nnodes: 'abc' is not N or MIN:MAX"),
        ("launch: {nnodes: 2}", "launch.rdzv_endpoint: required when launch.nnodes ('2')"),
        ("launch: {nproc_per_node: 0}", "launch.nproc_per_node: 0 must be at least 1"),
        ("launch: {nproc_per_node: many}", "launch.nproc_per_node: 'many' is not a number"),
        ("launch: {rdzv_endpoint: 'h:99999'}", "launch.rdzv_endpoint: 'h:99999': port must be"),
        ("launch: {rdzv_endpoint: ':1'}", "launch.rdzv_endpoint: ':1' has no host"),
        ("launch: {rdzv_backend: 'c 10d'}", "launch.rdzv_backend: 'c 10d' must be a non-empty string"),
        ("launch: {max_restarts: -1}", "launch.max_restarts: -1 must be at least 0"),
        ("launch: {max_restarts: '3'}", "launch.max_restarts: '3' is not an integer"),
        ("launch: {monitor_interval_s: 0}", "launch.monitor_interval_s: 0 must be > 0"),
        ("launch: {stop_grace_s: soon}", "launch.stop_grace_s: 'soon' is not a number"),
        ("launch: {script_args: --steps 10}", "launch.script_args: must be a list"),
        ("launch: {script_args: [--x, yes]}", "launch.script_args[1]: True is not a string"),
        ("launch: {script_args: [{a: 1}]}", "launch.script_args[0]: {'a': 1} is not a string"),
        ("launch: {torchrun: srun torchrun}", "launch.torchrun: 'srun torchrun': give the command as a list"),
        ("launch: {torchrun: []}", "launch.torchrun: must not be empty"),
        ("launch: {resume_flag: resume}", "launch.resume_flag: 'resume' must be an option"),
        ("launch: {env: {1BAD: x}}", "launch.env: '1BAD' is not a valid variable name"),
        ("launch: {env: {GOOD: null}}", "launch.env.GOOD: None is not a string"),
        ("launch: {env: [A]}", "launch.env: must be a mapping"),
        ("launch: {log_dir: 's3://b/logs'}", "launch.log_dir: 's3://b/logs': logs are written line by line"),
        ("launch: {hosts: [n1, n1]}", "launch.hosts: lists n1 more than once"),
        ("launch: {exclude_hosts: ['a,b']}", "launch.exclude_hosts[0]: 'a,b' is not a host name"),
        ("launch: {rdzv_conf: {a: 'x=y'}}", "launch.rdzv_conf.a: names and values must not contain"),
        ("launch: 3", "launch: must be a mapping, not int"),
        ("recover: {max_attempts: 0}", "recover.max_attempts: 0 must be at least 1"),
        ("recover: {watch_steps: 1.5}", "recover.watch_steps: 1.5 is not an integer"),
        ("recover: {min_nodes_policy: hope}", "recover.min_nodes_policy: 'hope' is not one of wait, shrink"),
        ("recover: {drain: {kind: lsf}}", "recover.drain.kind: 'lsf' is not one of slurm, kubernetes, none"),
        ("recover: {watch: [1]}", "recover.watch: must be a mapping"),
        ("run_root: ''", "run_root: '' must be a non-empty path"),
        ("- a\n- b", "top level: must be a mapping of sections, not list"),
        ("launch: {nnodes: [1", "cfg.yaml: not valid YAML (line 1, column"),
    ],
)
def test_config_errors_name_the_field(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_config_yaml(text, source="cfg.yaml")
    assert ei.value.exit_code == 2
    assert ei.value.message.startswith("cfg.yaml: ")
    assert needle in ei.value.message


@pytest.mark.parametrize(
    "value, expected",
    [("1", (1, 1)), ("4", (4, 4)), ("1:4", (1, 4)), (" 2 : 8 ", (2, 8)), ("3:3", (3, 3))],
)
def test_parse_nnodes(value: str, expected: tuple[int, int]) -> None:
    assert parse_nnodes(value) == expected


@pytest.mark.parametrize("value", ["0", "", "1:", ":4", "1:2:3", "-1", "a:b", "4:1"])
def test_parse_nnodes_rejects(value: str) -> None:
    with pytest.raises(ConfigError, match=r"launch.nnodes"):
        parse_nnodes(value)


def test_unquoted_sexagesimal_nnodes_stays_a_range() -> None:
    # yaml.safe_load("nnodes: 1:4") is {"nnodes": 64}; the config loader must not do that.
    assert parse_config_yaml("launch: {nnodes: 1:4, rdzv_endpoint: 'h:1'}").launch.nnodes == "1:4"
    assert parse_config_yaml("launch:\n  nnodes: 2:8\n  rdzv_endpoint: h:1\n").launch.nnodes == "2:8"
    assert parse_config_yaml("launch: {nproc_per_node: 0x10}").launch.nproc_per_node == 16


def test_validation_on_construction_and_replace() -> None:
    with pytest.raises(ConfigError, match=r"launch.max_restarts"):
        LaunchConfig(max_restarts=-2)
    ok = LaunchConfig()
    with pytest.raises(ConfigError, match=r"launch.nnodes"):
        dataclasses.replace(ok, nnodes="x")
    with pytest.raises(ConfigError, match=r"recover.min_nodes_policy"):
        RecoverConfig(min_nodes_policy="later")  # type: ignore[arg-type]


# -- flags over file values ---------------------------------------------------------------------


def test_overrides_replace_file_values() -> None:
    base = parse_config_yaml(
        "run_root: /a\nlaunch: {nnodes: '1', script: a.py, script_args: [--x], exclude_hosts: [n1]}"
    )
    c = apply_overrides(
        base,
        ConfigOverrides(
            run_root="/b",
            nnodes="1:2",
            nproc_per_node="4",
            rdzv_endpoint="h:29400",
            rdzv_id="job7",
            max_restarts=2,
            script="b.py",
            script_args=("--y", "1"),
            exclude_hosts=("n2", "n1"),
        ),
    )
    assert c.run_root == "/b"
    assert (c.launch.nnodes, c.launch.nproc_per_node, c.launch.rdzv_id) == ("1:2", 4, "job7")
    assert (c.launch.script, c.launch.script_args) == ("b.py", ("--y", "1"))
    assert c.launch.exclude_hosts == ("n1", "n2")
    # untouched values stay
    assert apply_overrides(base, ConfigOverrides()) == base
    # a script without args on the command line clears the file's script_args
    assert apply_overrides(base, ConfigOverrides(script="c.py", script_args=())).launch.script_args == ()


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (ConfigOverrides(nnodes="0"), "--nnodes: '0'"),
        (ConfigOverrides(nproc_per_node="lots"), "--nproc-per-node: 'lots'"),
        (ConfigOverrides(rdzv_endpoint="h:0"), "--rdzv-endpoint: 'h:0'"),
        (ConfigOverrides(max_restarts=-1), "--max-restarts: -1"),
        (ConfigOverrides(exclude_hosts=("a b",)), "--exclude-host[0]"),
        (ConfigOverrides(log_dir="gs://x"), "--log-dir: 'gs://x'"),
        (ConfigOverrides(nnodes="1:8"), "launch.rdzv_endpoint: required"),
    ],
)
def test_override_errors_name_the_flag(overrides: ConfigOverrides, needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        apply_overrides(CkptctlConfig(), overrides)
    assert needle in ei.value.message


# -- argv ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "launch_kw, call_kw, expected_tail",
    [
        (
            {},
            {"resume_from": None},
            ["--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d", "--max-restarts=0", "train.py"],
        ),
        (
            {
                "nnodes": "1:4",
                "nproc_per_node": 8,
                "rdzv_endpoint": "head:29400",
                "rdzv_id": "run-1",
                "max_restarts": 3,
                "monitor_interval_s": 5.0,
                "script_args": ("--steps", "100"),
            },
            {"resume_from": "/ckpt/run/step_30"},
            [
                "--nnodes=1:4",
                "--nproc-per-node=8",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=head:29400",
                "--rdzv-id=run-1",
                "--max-restarts=3",
                "--monitor-interval=5",
                "train.py",
                "--steps",
                "100",
                "--resume-from",
                "/ckpt/run/step_30",
            ],
        ),
        (  # capacity decision overrides --nnodes; rdzv_conf and extra torchrun args go before the script
            {
                "nnodes": "2:4",
                "rdzv_endpoint": "h:1",
                "rdzv_conf": {"join_timeout": "600", "last_call_timeout": "5"},
                "torchrun_args": ("--log-dir", "/x"),
                "resume_flag": "--load",
                "nproc_per_node": "gpu",
            },
            {"resume_from": "s3://b/run/step_10", "nnodes": "1:4"},
            [
                "--nnodes=1:4",
                "--nproc-per-node=gpu",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=h:1",
                "--rdzv-conf=join_timeout=600,last_call_timeout=5",
                "--max-restarts=0",
                "--log-dir",
                "/x",
                "train.py",
                "--load",
                "s3://b/run/step_10",
            ],
        ),
        (  # a plain torchrun cannot exclude hosts: the argv does not change
            {"exclude_hosts": ("n1",)},
            {"resume_from": None, "exclude_hosts": ("n2",)},
            ["--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d", "--max-restarts=0", "train.py"],
        ),
    ],
)
def test_build_torchrun_argv(launch_kw: dict[str, Any], call_kw: dict[str, Any], expected_tail: list[str]) -> None:
    assert build_torchrun_argv(_launch(**launch_kw), **call_kw) == [*TR, *expected_tail]


@pytest.mark.parametrize(
    "launcher, config_excl, drained, expected_prefix",
    [
        (("srun", "--nodes=4", "torchrun"), (), (), ["srun", "--nodes=4", "torchrun"]),
        (("srun", "--nodes=4", "torchrun"), ("n9",), (), ["srun", "--exclude=n9", "--nodes=4", "torchrun"]),
        (
            ("/usr/bin/srun", "torchrun"),
            ("n9",),
            ("n3", "n9", "n4"),
            ["/usr/bin/srun", "--exclude=n9,n3,n4", "torchrun"],
        ),
        (("torchrun",), ("n9",), ("n3",), ["torchrun"]),
    ],
)
def test_srun_launcher_excludes_hosts(
    launcher: tuple[str, ...], config_excl: tuple[str, ...], drained: tuple[str, ...], expected_prefix: list[str]
) -> None:
    argv = build_torchrun_argv(
        _launch(torchrun=launcher, exclude_hosts=config_excl), resume_from=None, exclude_hosts=drained
    )
    assert argv[: len(expected_prefix)] == expected_prefix
    assert argv[len(expected_prefix)] == "--nnodes=1"


def test_srun_with_its_own_exclude_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"launch.exclude_hosts"):
        build_torchrun_argv(_launch(torchrun=("srun", "-x", "n1", "torchrun")), resume_from=None, exclude_hosts=("n2",))


def test_argv_errors() -> None:
    with pytest.raises(ConfigError, match=r"launch.script: no training script"):
        build_torchrun_argv(LaunchConfig(), resume_from=None)
    for args in (("--resume-from", "x"), ("--resume-from=x",)):
        with pytest.raises(UsageError, match="already contain --resume-from"):
            build_torchrun_argv(_launch(script_args=args), resume_from="/c/step_1")
    # passing it by hand without --resume-from is fine
    assert build_torchrun_argv(_launch(script_args=("--resume-from", "x")), resume_from=None)[-2:] == [
        "--resume-from",
        "x",
    ]


# -- plan ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run_root, log_dir, expected_dir, has_note",
    [
        (None, None, LOCAL_LOG_DIR, True),
        ("/ckpt/run", None, "/ckpt/run/.ckptctl/logs", False),
        ("/ckpt/run/", None, "/ckpt/run/.ckptctl/logs", False),
        ("file:///ckpt/run", None, "/ckpt/run/.ckptctl/logs", False),
        ("rel/run", None, "rel/run/.ckptctl/logs", False),
        ("s3://bucket/run", None, LOCAL_LOG_DIR, True),
        ("s3://bucket/run", "/var/log/x", "/var/log/x", False),
        ("/ckpt/run", "file:///logs", "/logs", False),
    ],
)
def test_resolve_log_dir(run_root: str | None, log_dir: str | None, expected_dir: str, has_note: bool) -> None:
    got, note = resolve_log_dir(run_root, log_dir)
    assert got == expected_dir
    assert (note is not None) == has_note
    if run_root and run_root.startswith("s3://") and log_dir is None:
        assert note is not None and "object store" in note


@pytest.mark.parametrize(
    "torchrun, drain_kind, endpoint, exclude_via, note_or_warning",
    [
        (("srun", "torchrun"), "none", None, "srun", "srun --exclude keeps the job off n1, n2"),
        (("torchrun",), "slurm", None, "scheduler", "drained Slurm nodes (n1, n2) are not allocated"),
        (("torchrun",), "kubernetes", None, "scheduler", "cordoned nodes (n1, n2) get no new pods"),
        (("torchrun",), "none", None, "none", "WARN:nothing keeps the job off n1, n2"),
        (("srun", "torchrun"), "slurm", "n2:29400", "srun", "WARN:rendezvous endpoint n2:29400 is on an excluded host"),
    ],
)
def test_plan_records_exclusions(
    torchrun: tuple[str, ...], drain_kind: str, endpoint: str | None, exclude_via: str, note_or_warning: str
) -> None:
    config = CkptctlConfig(
        run_root="/ckpt/run",
        launch=_launch(torchrun=torchrun, exclude_hosts=("n1",), rdzv_endpoint=endpoint),
        recover=RecoverConfig(drain=DrainConfig(kind=drain_kind)),  # type: ignore[arg-type]
    )
    plan = plan_launch(config, resume_from="/ckpt/run/step_3", exclude_hosts=("n2",))
    assert plan.exclude_hosts == ("n1", "n2") and plan.exclude_via == exclude_via
    if note_or_warning.startswith("WARN:"):
        assert any(note_or_warning[5:] in w for w in plan.warnings), plan.warnings
    else:
        assert any(note_or_warning in n for n in plan.notes), plan.notes
    assert plan.resume_from == "/ckpt/run/step_3" and plan.argv[-2:] == ("--resume-from", "/ckpt/run/step_3")


def test_plan_env_and_json() -> None:
    config = CkptctlConfig(launch=_launch(env={"NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "0"}, stop_grace_s=7))
    plan = plan_launch(config, resume_from=None, nnodes="3")
    assert plan.env == {**DEFAULT_JOB_ENV, "NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "0"}
    assert plan.nnodes == "3" and "--nnodes=3" in plan.argv
    doc = plan.to_json()
    assert doc["argv"] == list(plan.argv) and doc["stop_grace_s"] == 7
    assert doc["command"] == "python -m torch.distributed.run --nnodes=3 --nproc-per-node=1 --rdzv-backend=c10d --max-restarts=0 train.py"
    assert any("starts from scratch" in n for n in plan.notes)


def test_display_quotes_for_people() -> None:
    plan = plan_launch(CkptctlConfig(launch=_launch(script_args=("--name", "my run"))), resume_from="/c/it's")
    assert plan.display().endswith("train.py --name 'my run' --resume-from '/c/it'\"'\"'s'")
    assert plan.argv[-1] == "/c/it's"


# -- capacity ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "min_n, max_n, healthy, drained, policy, action, nnodes, num_nodes",
    [
        (1, 4, None, (), "wait", "run", "1:4", None),  # no host list: the rendezvous decides
        (2, 2, ["a", "b"], (), "wait", "run", "2", 2),
        (2, 4, ["a", "b", "c", "d", "e"], (), "wait", "run", "2:4", 4),
        (2, 4, ["a", "b", "c"], ["c"], "wait", "run", "2:4", 2),  # elastic at the minimum
        (3, 4, ["a", "b", "c"], ["c"], "wait", "wait", None, 2),
        (3, 4, ["a", "b", "c"], ["c"], "shrink", "shrink", "2:4", 2),
        (2, 2, ["a", "b"], ["b"], "shrink", "shrink", "1:2", 1),
        (1, 4, ["a"], ["a"], "shrink", "wait", None, 0),  # nothing to shrink onto
        (1, 1, [], (), "wait", "wait", None, 0),
        (2, 4, ["a", "a", "b"], ["x"], "wait", "run", "2:4", 2),  # duplicates counted once
    ],
)
def test_plan_capacity(
    min_n: int,
    max_n: int,
    healthy: list[str] | None,
    drained: tuple[str, ...],
    policy: str,
    action: str,
    nnodes: str | None,
    num_nodes: int | None,
) -> None:
    d = plan_capacity(min_n, max_n, healthy, drained, policy)  # type: ignore[arg-type]
    assert (d.action, d.nnodes, d.num_nodes) == (action, nnodes, num_nodes)
    assert d.should_launch == (action != "wait")
    assert d.reason
    assert d.excluded_hosts == tuple(dict.fromkeys(drained))
    if healthy is not None:
        assert d.available_hosts is not None and not set(d.available_hosts) & set(drained)
    assert d.to_json()["action"] == action


def test_plan_capacity_rejects_bad_range() -> None:
    with pytest.raises(ValueError):
        plan_capacity(3, 2, None)


# -- exit codes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "returncode, interrupted_by, expected",
    [(0, None, 0), (1, None, 1), (3, None, 3), (-9, None, 137), (-15, None, 143), (1, 15, 143), (0, 2, 130)],
)
def test_exit_code_for(returncode: int, interrupted_by: int | None, expected: int) -> None:
    assert exit_code_for(returncode, interrupted_by) == expected


# -- the example and the reference stay in step with the dataclasses ------------------------------


def test_example_config_parses() -> None:
    from pathlib import Path

    from ckptctl.ops.launch import load_config

    example = Path(__file__).resolve().parent.parent / "examples" / "ckptctl.yaml"
    c = load_config(str(example))
    assert c.launch.nnodes == "1:4" and c.recover.drain.kind == "slurm"
    assert plan_launch(c, resume_from="/x/step_1").argv[-2:] == ("--resume-from", "/x/step_1")


def test_docs_describe_every_config_key() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "launch.md").read_text()
    for cls, prefix in ((LaunchConfig, ""), (RecoverConfig, ""), (DrainConfig, "drain."), (CkptctlConfig, ""), (SlurmConfig, "slurm.")):
        for f in dataclasses.fields(cls):
            if f.name not in ("source", "drain", "slurm"):  # drain: its keys are rows of their own
                assert f"| `{prefix}{f.name}` |" in text, f"docs/launch.md lacks {prefix}{f.name}"


def test_lists_given_in_code_become_tuples() -> None:
    la = dataclasses.replace(LaunchConfig(), exclude_hosts=["n1"], script_args=["--x"])  # type: ignore[arg-type]
    assert la.exclude_hosts == ("n1",) and la.script_args == ("--x",)


def test_recover_hosts_command_is_an_argv() -> None:
    c = config_from_dict({"recover": {"hosts_command": ["sinfo", "-h", "-N", "-o", "%N"]}})
    assert c.recover.hosts_command == ("sinfo", "-h", "-N", "-o", "%N")
    assert config_from_dict({"recover": {"hosts_command": "list-healthy-hosts"}}).recover.hosts_command == (
        "list-healthy-hosts",
    )
    assert config_from_dict(None).recover.hosts_command == ()
    with pytest.raises(ConfigError, match=r"recover.hosts_command.*as a list"):
        config_from_dict({"recover": {"hosts_command": "sinfo -h -N"}})
    with pytest.raises(ConfigError, match=r"recover.hosts_command"):
        config_from_dict({"recover": {"hosts_command": {"a": 1}}})


@pytest.mark.parametrize(
    ("endpoint", "ports", "warned"),
    [
        ("head:40001", (32768, 60999), True),
        ("head:29400", (32768, 60999), False),
        ("[fd00::1]:32768", (32768, 60999), True),
        ("[fd00::1]:61000", (32768, 60999), False),
        ("head:40001", None, False),
        ("head", (32768, 60999), False),
        (None, (1024, 65535), False),
    ],
)
def test_a_rendezvous_port_in_the_ephemeral_range_is_warned(
    endpoint: str | None, ports: tuple[int, int] | None, warned: bool
) -> None:
    """srun's own automatic bind took such a port before torchrun bound it; torchrun joined
    srun's socket as its store and waited for good (the suite hung on it)."""
    config = CkptctlConfig(launch=_launch(rdzv_endpoint=endpoint))
    plan = plan_launch(config, resume_from=None, ephemeral_ports=ports)
    hits = [w for w in plan.warnings if "ephemeral port range" in w]
    assert bool(hits) == warned, plan.warnings
    if warned:
        assert f"below {ports[0]}" in hits[0] and "29400" in hits[0]  # type: ignore[index]
        assert plan.to_json()["warnings"] == list(plan.warnings)


def test_the_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Any) -> None:
    from ckptctl.adapters.netports import ephemeral_port_range

    f = tmp_path / "range"
    f.write_text("32768\t60999\n")
    assert ephemeral_port_range(str(f)) == (32768, 60999)
    for bad in ("", "x y", "70000 80000", "500 100"):
        f.write_text(bad)
        assert ephemeral_port_range(str(f)) is None, bad
    assert ephemeral_port_range(str(tmp_path / "absent")) is None
