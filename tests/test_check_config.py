"""``tracekit check``'s TOML config read into a frozen, typed :class:`CheckConfig`: each setting of
its type, the gated metrics as rules, one error naming the file and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tracekit.check import CheckConfig, load_config
from tracekit.check.gate import MetricRule, MinChange
from tracekit.errors import TraceInputError


def test_settings_are_typed_and_frozen(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[check]\nalpha = 0.05\npermutations = 99\nmin_change = 3\ntest = "welch"\n'
                    '[metrics.ttft_p95_ms]\nanalyzer = "serving"\nmin_change = "5%"\n[metrics.step_device_time]\n')
    cfg = load_config(path)
    assert (cfg.alpha, cfg.permutations, cfg.test, cfg.source) == (0.05, 99, "welch", str(path))
    assert cfg.min_change == MinChange(3.0, relative=False)  # a bare number: the metric's own unit
    assert cfg.metrics == (MetricRule("ttft_p95_ms", "serving", MinChange(0.05)), MetricRule("step_device_time"))
    # what the file does not set keeps the defaults
    defaults = CheckConfig()
    assert (cfg.p_value, cfg.window, cfg.detector) == (defaults.p_value, defaults.window, defaults.detector)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.alpha = 0.5  # type: ignore[misc]
    changed = dataclasses.replace(cfg, test="mann-whitney")  # how the CLI applies --test
    assert (changed.test, cfg.test) == ("mann-whitney", "welch")


def test_an_integer_is_a_float_setting_but_not_the_reverse(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[check]\nwindow = 40\np_value = 0\n")
    with pytest.raises(TraceInputError, match=r"p_value 0\.0: expected 0 < p_value < 1"):
        load_config(path)
    path.write_text("[check]\npermutations = 99.5\n")
    with pytest.raises(TraceInputError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: [check] permutations: expected a int, got 99.5"
    path.write_text("[check]\nalpha = true\n")
    with pytest.raises(TraceInputError, match=r"\[check\] alpha: expected a float, got True"):
        load_config(path)


def test_no_file_is_the_defaults() -> None:
    assert load_config(None) == CheckConfig()
