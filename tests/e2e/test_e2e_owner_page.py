"""The owner page (`dpgate serve --admin-http`): admin roles only (their SCRAM
verifier, or a bearer token), read-only, server-rendered, no external assets; checked over
plain HTTP, and rendered by headless Chromium (a screenshot whose pixels show the bars)."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
import urllib.error
import urllib.request
import zlib

import psycopg
import pytest

from proxy.admin import AdminHttp, check_password
from proxy.wire.auth import make_verifier
from support.service import PASSWORDS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_check_password_against_a_scram_verifier():
    v = make_verifier("s3cret", iterations=4096)
    assert check_password(v, "s3cret") and not check_password(v, "s3cret ") and not check_password(None, "")


@pytest.fixture(scope="module")
def page(duck_service):
    admin = duck_service._call(AdminHttp(duck_service.gw, "127.0.0.1", 0, token="tok-123").start())
    with psycopg.connect(duck_service.dsn("analyst"), autocommit=True) as c:
        c.execute("SELECT COUNT(*) FROM pums WHERE age < 30").fetchall()  # a release with '<'
    yield f"http://127.0.0.1:{admin.port}/"
    duck_service._call(admin.close())


def get(url: str, auth: str | None = None):
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def test_only_admin_roles_get_in(page):
    assert get(page)[0] == 401 and "Basic" in get(page)[1]["WWW-Authenticate"]
    assert get(page, basic("admin", "wrong"))[0] == 401
    assert get(page, basic("analyst", PASSWORDS["analyst"]))[0] == 401  # right password, not an admin
    assert get(page, basic("nobody", "x"))[0] == 401
    assert get(page, "Bearer nope")[0] == 401 and get(page, "Bearer tok-123")[0] == 200
    status, headers, _ = get(page, basic("admin", PASSWORDS["admin"]))
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert get(page + "x", basic("admin", PASSWORDS["admin"]))[0] == 404


def test_page_shows_budgets_releases_coalition_and_policies(page):
    _, _, html = get(page, basic("admin", PASSWORDS["admin"]))
    for heading in (
        "Roles and budgets",
        "Spend over time",
        "Recent releases",
        "Coalitions",
        "Tables and policies",
    ):
        assert f"<h2>{heading}" in html
    assert html.count('class="spent"') >= 7 and '<svg id="spend"' in html  # a bar per role
    assert "SELECT COUNT(*) FROM pums WHERE age &lt; 30" in html  # escaped statement
    assert "per-record DP: each row" in html and "bounds [0, 100]" in html  # policies, DP facts
    row = re.search(
        r"<tr><td>analyst</td><td>default</td><td class=\"n\">1</td><td class=\"n\">([0-9.]+)</td>", html
    )
    assert row and float(row.group(1)) >= 1  # the query's ε shows
    assert not re.search(r"\b(src|href)\s*=|url\(|@import|<script", html, re.I)  # no external assets


def test_page_from_a_postgres_ledger(duck_service, postgres):
    """The page reads a shared Postgres ledger (several proxies) the same way."""
    import uuid

    from proxy.admin import collect
    from proxy.admin.page import render_page
    from proxy.stores.ledger import Ledger

    led = Ledger(None, dsn=postgres.dsn, schema="adm_" + uuid.uuid4().hex[:8])
    try:
        led.charge_and_record(
            role="analyst",
            key="k",
            data_version=1,
            epsilon=1.0,
            budget=50.0,
            period="day",
            canonical="c",
            statement="SELECT 1 < 2",
            mechanism="m",
            answer={},
        )
        html = render_page(collect(duck_service.cfg, led, "admin"))
    finally:
        led.close()
    assert "SELECT 1 &lt; 2" in html and "1 of 50 / day" in html


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes): width, height, rows of pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    w = h = ctype = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, bpp, rows


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: apt-get install -y chromium")
def test_headless_chromium_screenshot_shows_the_bar_chart(duck_service, page, tmp_path):
    """Chromium renders the page (signed in through the URL's credentials, no network beyond
    it); the screenshot's budget bars (fill #eef1f5, used by nothing else) cover the area the
    chart's formula gives: Σ over roles of (380 px · budget / largest budget) × 18 px, less
    their 1 px outline (an allowance of 15% for it and for anti-aliasing)."""
    shot = tmp_path / "page.png"
    url = page.replace("http://", f"http://admin:{PASSWORDS['admin']}@")
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,900",
            f"--screenshot={shot}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), r.stderr[-2000:]
    w, bpp, rows = _png_pixels(shot.read_bytes())

    def count(rgb):
        return sum(
            1 for row in rows for x in range(w) if all(abs(row[x * bpp + k] - rgb[k]) <= 2 for k in range(3))
        )

    cfg = duck_service.cfg
    budgets = [cfg.tiers[spec.tier].budget for spec in cfg.roles.values()]
    want = sum(380 * b / max(budgets) * 18 for b in budgets)
    got = count((0xEE, 0xF1, 0xF5))
    assert 0.85 * want <= got <= 1.02 * want, (got, want)
    assert count((0x3B, 0x6F, 0xD8)) > 50  # the analyst's spent ε: the first role's colour
