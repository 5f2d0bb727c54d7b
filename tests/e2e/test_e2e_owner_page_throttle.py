"""The owner page's sign-in is throttled by the wire's failed-login limiter
(proxy/wire/throttle.py): one limiter per process, per address and per role, so wrong
passwords on the page count for psql logins and wrong psql passwords count for the page.
While over the limit even the right password gets 429 with Retry-After (the wire: 28000),
until the window passes."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

import psycopg
import pytest

from proxy.admin import AdminHttp
from proxy.wire.throttle import FailedLogins
from support.service import PASSWORDS


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shared(duck_service):
    """The owner page on the service's own limiter, driven by a clock the test moves."""
    lim = duck_service.server.failed_logins
    clock, real_clock = Clock(), lim.clock
    lim.clock = clock
    lim.clear()
    admin = duck_service._call(AdminHttp(duck_service.gw, "127.0.0.1", 0, failed_logins=lim).start())
    try:
        yield f"http://127.0.0.1:{admin.port}/", lim, clock
    finally:
        duck_service._call(admin.close())
        lim.clock = real_clock
        lim.clear()


def get(url: str, auth: str | None = None):
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def psql_login(svc, password: str) -> str:
    dsn = svc.dsn("analyst").replace(f"password={PASSWORDS['analyst']}", f"password={password}")
    try:
        psycopg.connect(dsn).close()
        return "ok"
    except psycopg.OperationalError as e:
        return str(e)


def test_wrong_passwords_on_the_page_lock_it_and_the_wire_until_the_window_passes(duck_service, shared):
    url, lim, clock = shared
    for _ in range(lim.max_per_address):
        assert get(url, basic("admin", "wrong"))[0] == 401
    status, headers = get(url, basic("admin", PASSWORDS["admin"]))  # the right password
    assert status == 429 and 0 < int(headers["Retry-After"]) <= lim.window
    assert "too many failed authentication attempts" in psql_login(duck_service, PASSWORDS["analyst"])
    clock.now += lim.window / 2  # still inside the window
    assert get(url, basic("admin", PASSWORDS["admin"]))[0] == 429
    clock.now += lim.window / 2 + 1  # the window has passed
    assert get(url, basic("admin", PASSWORDS["admin"]))[0] == 200
    assert psql_login(duck_service, PASSWORDS["analyst"]) == "ok"


def test_wrong_psql_passwords_lock_the_page(duck_service, shared):
    url, lim, clock = shared
    for _ in range(lim.max_per_address):
        assert "password authentication failed" in psql_login(duck_service, "wrong")
    status, headers = get(url, basic("admin", PASSWORDS["admin"]))
    assert status == 429 and int(headers["Retry-After"]) > 0
    clock.now += lim.window + 1
    assert get(url, basic("admin", PASSWORDS["admin"]))[0] == 200


def test_a_visit_without_credentials_is_no_failure(shared):
    url, lim, _ = shared
    for _ in range(2 * lim.max_per_address):
        assert get(url)[0] == 401  # the browser's first request
    assert get(url, basic("admin", PASSWORDS["admin"]))[0] == 200


def test_limiter_counts_per_address_and_per_role():
    clock = Clock()
    lim = FailedLogins(max_per_address=3, window=60.0, max_per_role=5, clock=clock)
    for i in range(2):
        lim.failed("10.0.0.1", "admin")
    assert lim.retry_after("10.0.0.1", "admin") == 0  # under both limits
    lim.failed("10.0.0.1", "admin")
    assert lim.retry_after("10.0.0.1", "analyst") == 60.0  # the address is over
    assert lim.retry_after("10.0.0.2", "analyst") == 0
    clock.now += 10
    lim.failed("10.0.0.2", "admin")
    lim.failed("10.0.0.3", "admin")  # 5 for admin, spread out
    assert lim.retry_after("10.0.0.9", "admin") == pytest.approx(50.0)  # the role is over, anywhere
    assert lim.retry_after("10.0.0.9", "analyst") == 0
    clock.now += 50  # the first three leave the window
    assert lim.retry_after("10.0.0.9", "admin") == 0 and lim.retry_after("10.0.0.1", "admin") == 0
    assert lim.retry_after_s("10.0.0.1") == 0


def test_limiter_keys_are_bounded(monkeypatch):
    """Names never seen before (a failure each) cannot grow the table without limit."""
    from proxy.wire import throttle

    monkeypatch.setattr(throttle, "MAX_KEYS", 100)
    clock = Clock()
    lim = FailedLogins(clock=clock)
    for i in range(1000):
        clock.now += 0.001
        lim.failed("10.0.0.1", f"nobody{i}")
    assert len(lim._by) <= 100
    assert lim.retry_after("10.0.0.1") > 0  # the address is still counted
