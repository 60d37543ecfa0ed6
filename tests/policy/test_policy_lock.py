"""Users cannot loosen the admin's policy: a kernelspec's ``metadata.gpuckpt`` may only tighten
each setting (``policy_overrides.TIGHTER``) unless ``GPUCheckpointApp.user_overridable`` names it; what
is refused is logged and listed in ``GET /api/gpuckpt/policy``. The rule setting by setting,
then on a real server (a refused kernelspec's kernel is suspended by the admin's idle_timeout),
then the admin's command-line settings beating the user's config file (as c.Spawner.args do)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from live_server import running_server
from server_fixtures import KERNEL_NAME, api, start_kernel
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuckpt.extension.app import GPUCheckpointApp
from jupyter_gpuckpt.placement.kernelspec import kernelspec_json
from jupyter_gpuckpt.policy.decisions import POLICY_FIELDS, KernelView, Policy, decide
from jupyter_gpuckpt.policy.overrides import TIGHTER, overridden
from jupyter_gpuckpt.policy.reclaim import unix_group, user_name

ADMIN = Policy(idle_timeout=1800.0, warn_before=60.0, checkpoint_interval=600.0)

# setting, the admin's other settings, values at least as tight as the admin's, looser values
CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    ("idle_timeout", {}, [1800, 600, 1], [3600, 0, -1]),
    ("cpu_idle_timeout", {}, [-1, 600, 1800], [3600, 0]),  # -1: idle_timeout's 1800
    ("cpu_idle_timeout", {"cpu_idle_timeout": 600.0}, [300], [-1, 0, 1200]),
    ("gpu_utilization_threshold", {}, [5, 50], [0]),
    ("suspend_connected", {}, [True], [False]),
    ("suspend_connected", {"suspend_connected": False}, [True, False], []),
    ("checkpoint_interval", {}, [600], [60, 0, 3600]),
    ("keep_checkpoints", {}, [5, 1], [6, 0]),
    ("exempt", {}, [False], [True]),
    ("release_mode", {}, ["park", "suspend"], []),
    ("release_mode", {"release_mode": "suspend"}, ["suspend"], ["park"]),
    ("park_timeout", {}, [60], [7200, 0]),
    ("reclaim", {}, ["idle", "both"], ["on_demand"]),
    ("reclaim", {"reclaim": "on_demand"}, ["both"], ["idle"]),
    ("reclaim", {"reclaim": "both"}, ["both"], ["idle", "on_demand"]),
    ("demand_idle", {}, [0, 30], [61]),
    ("rhythm", {}, [False, True], []),
    ("rhythm", {"rhythm": True}, [True], [False]),
    ("rhythm_wait_cost", {}, [100.0, 350.0], [400.0]),
    ("rhythm_min", {}, [30], [120]),
    ("rhythm_gaps", {}, [3], [10]),
    ("warn_before", {}, [0, 30], [600]),
    ("resume_on_return", {}, [True, False], []),
    ("resume_on_return", {"resume_on_return": False}, [False], [True]),
    ("wait_budget", {}, [0.0, 0.1], []),
    ("wait_budget", {"wait_budget": 0.1}, [0.1, 0.2], [0.05, 0.0]),
]


def test_every_policy_setting_has_a_rule_and_cases() -> None:
    assert set(TIGHTER) == set(POLICY_FIELDS) == {case[0] for case in CASES}


@pytest.mark.parametrize(("setting", "admin", "tighter", "looser"), CASES)
def test_tighter_values_apply_and_looser_ones_only_when_allowed(setting, admin, tighter, looser) -> None:
    server = Policy(**{**ADMIN.__dict__, **admin})
    for value in tighter:
        effective, refused = overridden(server, {"gpuckpt": {setting: value}}, loosenable=())
        assert refused == {} and getattr(effective, setting) == value, (setting, value)
    for value in looser:
        effective, refused = overridden(server, {"gpuckpt": {setting: value}}, loosenable=())
        assert getattr(effective, setting) == getattr(server, setting), (setting, value)
        assert "looser than the server's" in refused[setting] and "may only set it" in refused[setting]
        effective, refused = overridden(server, {"gpuckpt": {setting: value}}, loosenable=[setting])
        assert refused == {} and getattr(effective, setting) == value, (setting, value)


def test_each_setting_is_judged_alone() -> None:
    asked = {"gpuckpt": {"idle_timeout": 0, "warn_before": 10, "exempt": True, "group": "vision"}}
    effective, refused = overridden(ADMIN, asked, loosenable=["exempt"])
    assert (effective.idle_timeout, effective.warn_before, effective.exempt) == (1800.0, 10.0, True)
    assert refused == {"idle_timeout": "0 is looser than the server's 1800.0: a kernelspec may only set it "
                                       "lower (not to 0)"}


@pytest.mark.parametrize(("asked", "reason"), [
    ({"idle_timeout": "never"}, '"never" is not a number'),
    ({"idle_timeout": None}, "null is not a number"),
    ({"exempt": 1}, "1 is not true or false"),
    ({"rhythm_gaps": 2.5}, "2.5 is not a whole number"),
    ({"reclaim": "sometimes"}, '"sometimes" is not "idle" or "on_demand" or "both"'),
    ({"rhythm_wait_cost": -1.0}, "rhythm_wait_cost must not be negative, not -1.0"),
    ({"rhythm_gaps": 0}, "rhythm_gaps must be at least 1, not 0"),
])
def test_unusable_values_are_refused_even_where_allowed(asked, reason) -> None:
    effective, refused = overridden(ADMIN, {"gpuckpt": asked}, loosenable=POLICY_FIELDS)
    assert refused == {next(iter(asked)): reason} and effective == ADMIN


def test_a_kernelspec_may_name_only_a_group_of_the_user() -> None:
    """A group's floor keeps its members' kernels: a kernelspec naming another group is refused."""
    assert overridden(ADMIN, {"gpuckpt": {"group": "vision"}}, member_of={"vision", "staff"})[1] == {}
    refused = overridden(ADMIN, {"gpuckpt": {"group": "physics"}}, member_of={"vision", "staff"})[1]
    assert refused == {"group": '"physics" is not a group of this user: the kernel counts in the user\'s own group'}
    assert overridden(ADMIN, {"gpuckpt": {"group": "physics"}})[1] == {}  # nobody's groups given: not judged


def test_metadata_that_is_no_object_is_refused_whole() -> None:
    assert overridden(ADMIN, {"gpuckpt": [1]}) == (ADMIN, {"gpuckpt": "metadata.gpuckpt is not an object but list"})
    assert overridden(ADMIN, {}) == (ADMIN, {})


def test_overrides_without_an_admin_rule_take_everything() -> None:
    """``overridden``'s default (the replay, a server's own config): every setting may change."""
    assert overridden(ADMIN, {"gpuckpt": {"idle_timeout": 0, "exempt": True}})[0].idle_timeout == 0
    assert overridden(ADMIN, {"gpuckpt": {"idle_timeout": 0}}, loosenable=())[0].idle_timeout == 1800.0


def test_a_refused_loosening_leaves_the_admins_decision() -> None:
    kernel = KernelView("k", idle_seconds=2000.0, gpus=1)
    for asked in ({"idle_timeout": 0}, {"idle_timeout": 7200}, {"exempt": True}, {"reclaim": "on_demand"},
                  {"warn_before": 10 ** 6}, {"gpu_utilization_threshold": 0}):
        effective = overridden(ADMIN, {"gpuckpt": asked}, loosenable=())[0]
        assert decide(effective, kernel, 0.0).action == "suspend", asked


def test_user_overridable_names_policy_settings_only() -> None:
    assert GPUCheckpointApp(user_overridable=["warn_before"]).user_overridable == ["warn_before"]
    assert GPUCheckpointApp().user_overridable == []  # the safe default: kernelspecs only tighten
    with pytest.raises(TraitError, match="idle_timout is no policy setting"):
        GPUCheckpointApp(user_overridable=["idle_timout"])


# -- a real server ---------------------------------------------------------------------------

LOOSE = "python3-gpuckpt-loose"
"""Asks for no idle timeout at all, and another group's floor: both refused."""
ALLOWED = "python3-gpuckpt-allowed"
"""Asks to be exempt, which the admin allows (user_overridable), and to count in the user's Unix
group rather than the one the admin mapped them to: theirs too, so allowed."""


@pytest.fixture
def jp_server_config(jp_server_config: Config, jp_data_dir: Path) -> Config:
    for name, asked in ((LOOSE, {"idle_timeout": 0, "group": "physics"}),
                        (ALLOWED, {"exempt": True, "warn_before": 0, "group": unix_group()})):
        spec = kernelspec_json(f"GPU checkpoint test ({name})")
        spec["metadata"]["gpuckpt"] = asked
        (jp_data_dir / "kernels" / name).mkdir(parents=True)
        (jp_data_dir / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    return jp_server_config


@pytest.fixture
def gpuckpt_config() -> dict[str, Any]:
    return {"idle_timeout": 2.0, "policy_interval": 0.5, "user_overridable": ["exempt"],
            "user_groups": {user_name(): "vision"}}


async def _suspended_within(jp_fetch: Any, kernel_id: str, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if (await api(jp_fetch, "kernels", kernel_id))["state"] == "suspended":
            return True
        await asyncio.sleep(0.2)
    return False


async def test_a_loosening_kernelspec_is_refused_and_an_allowed_one_applies(
        jp_fetch: Any, jp_serverapp: Any, caplog: pytest.LogCaptureFixture) -> None:
    app = jp_serverapp.web_app.settings["gpuckpt_app"]
    app.log.addHandler(caplog.handler)  # the app's logger does not propagate to the root one
    model = await api(jp_fetch, "policy")
    assert model["user_overridable"] == ["exempt"]
    assert model["refused_overrides"] == {
        LOOSE: {"idle_timeout": "0 is looser than the server's 2.0: a kernelspec may only set it lower (not to 0)",
                "group": '"physics" is not a group of this user: the kernel counts in the user\'s own group'},
        # warn_before 0 is tighter than the server's 60 s: not refused, and exempt is allowed
    }
    assert model["group"] == "vision"
    await jp_serverapp.extension_manager.start_all_extensions()  # the policy loop
    loose = await start_kernel(jp_fetch, name=LOOSE)
    allowed = await start_kernel(jp_fetch, name=ALLOWED)
    plain = await start_kernel(jp_fetch, name=KERNEL_NAME)
    assert (app.policy_for(loose).idle_timeout, app.policy_for(loose).exempt) == (2.0, False)
    assert (app.policy_for(allowed).exempt, app.policy_for(allowed).warn_before) == (True, 0.0)
    assert (app.group_of(loose), app.group_of(allowed), app.group_of(plain)) == ("vision", unix_group(), "vision")

    assert await _suspended_within(jp_fetch, loose, 30), "the admin's idle_timeout suspends it"
    assert await _suspended_within(jp_fetch, plain, 30)
    kept = await api(jp_fetch, "kernels", allowed)
    assert kept["state"] == "running" and kept["policy"]["reason"] == "kept: exempt"
    app.log.removeHandler(caplog.handler)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "may not" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert f"kernelspec {LOOSE} may not set idle_timeout" in warnings[0], warnings
    assert f"kernelspec {LOOSE} may not set group" in warnings[1], warnings


# -- the admin's command line beats the user's config files -----------------------------------

def test_command_line_policy_beats_the_users_config_file(tmp_path: Path) -> None:
    """JupyterHub's ``c.Spawner.args`` reach the single-user server as its command line, which
    traitlets applies after every config file, the user's ``~/.jupyter`` ones included."""
    (tmp_path / "config" / "jupyter_server_config.d").mkdir(parents=True)
    (tmp_path / "config" / "jupyter_server_config.py").write_text(
        "c.GPUCheckpointApp.idle_timeout = 0\n"
        "c.GPUCheckpointApp.user_overridable = ['idle_timeout', 'exempt']\n"
        "c.GPUCheckpointApp.exempt_kernelspecs = ['python3-gpuckpt']\n")
    # what `jupyter server extension disable jupyter_gpuckpt --user` writes
    (tmp_path / "config" / "jupyter_server_config.d" / "jupyter_gpuckpt.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_gpuckpt": False}}}))
    with running_server(tmp_path, "--ServerApp.jpserver_extensions=jupyter_gpuckpt=True",
                        "--GPUCheckpointApp.idle_timeout=1800", "--GPUCheckpointApp.user_overridable=[]",
                        "--GPUCheckpointApp.exempt_kernelspecs=[]") as server:
        model = server.api("GET", "api/gpuckpt/policy")  # a 404 if the user's file had turned it off
    assert (model["idle_timeout"], model["user_overridable"], model["exempt_kernelspecs"]) == (1800.0, [], [])
