"""/docs and /redoc work without internet: their pages name only this server's URLs, and
those answer with the packaged JavaScript and CSS."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

ASSET = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_assets_from_this_server(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    html = response.text
    assert "cdn" not in html.lower() and "https://" not in html and "http://" not in html
    urls = {a or b for a, b in ASSET.findall(html)}
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts, html
    for url in urls - {"/openapi.json"}:
        assert url.startswith("/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        kind = asset.headers["content-type"]
        if url.endswith(".js"):
            assert "javascript" in kind and len(asset.content) > 100_000, url
        elif url.endswith(".css"):
            assert kind.startswith("text/css"), url
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
