"""``sluice run``'s start: the configuration is checked against the plugins and actions in
a worker thread while the caches fill (scheduler/cli/run.py, ``Resolution``); a refused
one ends the command with exit code 2 and the field named, even if the API server never
answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scheduler.api import labels as L
from scheduler.cli.main import main
from scheduler.cli.run import leadership_lost
from scheduler.kube import LeadershipLost

UNREACHABLE = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        pytest.param({"actions": ["enqueue", "allocate", "nope"]}, "nope", id="unknown action"),
        pytest.param(
            {
                "tiers": [
                    {"plugins": [{"name": "nodeorder", "arguments": {"leastAllocatedWeight": "x"}}]}
                ]
            },
            "leastAllocatedWeight",
            id="argument of the wrong type",
        ),
    ],
)
def test_a_refused_configuration_ends_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, object], field: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNREACHABLE))
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", **config})
    )
    code = main(["run", "--kubeconfig", str(kubeconfig), "--config", str(path), "--port", "0"])
    assert code == 2
    assert field in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "shard", "lease"),
    [
        pytest.param(None, "", "sluice-scheduler", id="one scheduler"),
        pytest.param(None, "gpu", "sluice-scheduler-gpu", id="a shard: a Lease of its own"),
        pytest.param("mine", "gpu", "mine", id="named on the command line"),
    ],
)
def test_the_lease_of_each_shard(given: str | None, shard: str, lease: str) -> None:
    from scheduler.cli.run import lease_name

    assert lease_name(given, shard) == lease


_LOST = LeadershipLost("lease ns/l: renewal failed")


@pytest.mark.parametrize(
    ("raised", "found"),
    [
        (_LOST, _LOST),
        (BaseExceptionGroup("tg", [_LOST]), _LOST),
        (BaseExceptionGroup("outer", [BaseExceptionGroup("tg", [_LOST])]), _LOST),
        (BaseExceptionGroup("tg", [_LOST, RuntimeError("boom")]), None),
        (RuntimeError("boom"), None),
        (KeyboardInterrupt(), None),
    ],
    ids=["bare", "in-a-task-group", "nested-groups", "with-another-error", "other", "interrupt"],
)
def test_a_lost_lease_ends_the_run_without_a_traceback(
    raised: BaseException, found: LeadershipLost | None
) -> None:
    """The soak's hour at 22cff68: a leader whose renewal met a 403 (the restarted API
    server's RBAC not loaded yet) raised LeadershipLost inside the task group; the run's
    handler caught only a bare one, so the process died with a traceback of the 403."""
    assert leadership_lost(raised) is found
