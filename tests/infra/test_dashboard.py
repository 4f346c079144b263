"""The provisioned Grafana dashboard asks only for series /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import shared.ops.prometheus as prometheus

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\btiermem_[a-z_]+")


def test_every_series_on_the_dashboard_is_exposed() -> None:
    dashboard = json.loads((ROOT / "infra/grafana/dashboards/tiermem.json").read_text())
    asked = {
        name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in NAME.findall(target["expr"])
    }
    exposed = set(NAME.findall(Path(prometheus.__file__).read_text()))
    assert asked and asked <= exposed, sorted(asked - exposed)
