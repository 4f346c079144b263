"""The provisioned Grafana dashboard asks only for series /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlmodel import Session

from shared.db.engine import make_engine
from shared.db.migrate import upgrade_to_head
from shared.ops import prometheus
from shared.ops.vectors import VectorStats
from tests.factories import make_settings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\btiermem_[a-z_]+")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def exposed_families(tmp_path: Path) -> set[str]:
    """The families a /metrics rendering declares (# TYPE lines), on an empty database."""
    settings = make_settings(tmp_path)
    upgrade_to_head(settings)
    engine = make_engine(settings)
    vectors = VectorStats(engine="edge", layout="partitioned", collections=0, points=0,
                          disk_bytes=0, other_layout_collections=0)  # fmt: skip
    try:
        with Session(engine) as session:
            text = prometheus.render(session=session, settings=settings, vectors=vectors)
    finally:
        engine.dispose()
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_every_series_on_the_dashboard_is_exposed(tmp_path: Path) -> None:
    dashboard = json.loads((ROOT / "infra/grafana/dashboards/tiermem.json").read_text())
    asked = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in NAME.findall(target["expr"]):
                for part in HISTOGRAM_PARTS:
                    name = name.removesuffix(part)
                asked.add(name)
    exposed = exposed_families(tmp_path)
    assert "tiermem_vector_points" in exposed and "tiermem_queue_depth" in exposed
    assert asked <= exposed, sorted(asked - exposed)
