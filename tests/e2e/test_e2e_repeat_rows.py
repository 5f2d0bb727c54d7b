"""A large release's repeat is written from its rows kept encoded (proxy/pipeline/repeat_rows.py):
the same rows as the first reply, nothing charged, in text and binary formats, after a
restart (built again from the stored release), and each statement over one release gets
its own rows (its ORDER BY and LIMIT)."""

from __future__ import annotations

import psycopg

from support.service import ask

GRID = "SELECT item, store, COUNT(*) AS n FROM purchases GROUP BY item, store"  # 2,000 public cells


def _charged(notes: list[str]) -> str:
    """What the last NOTICE says was charged (its head: after a mostly-noise warning line)."""
    return notes[-1].splitlines()[-1].split(";")[0]


def test_a_large_repeat_is_the_first_reply_and_free(duck_service):
    svc = duck_service
    first, notes = ask(svc, GRID)
    assert len(first) == 2000 and "ε charged 0" not in _charged(notes)
    assert len(svc.gw.repeat_rows) >= 1  # kept when the fresh rows were built
    again, notes = ask(svc, GRID)
    assert again == first and _charged(notes).startswith("dpgate: ε charged 0")
    with psycopg.connect(svc.dsn("analyst"), autocommit=True) as c:
        binary = c.cursor(binary=True).execute(GRID).fetchall()  # other formats: the values
    assert binary == first


def test_after_a_restart_the_repeat_is_built_again_and_kept(duck_service):
    svc = duck_service
    first, _ = ask(svc, GRID)
    svc.restart()
    assert len(svc.gw.repeat_rows) == 0
    cold, notes = ask(svc, GRID)
    assert cold == first and _charged(notes).startswith("dpgate: ε charged 0")
    assert len(svc.gw.repeat_rows) == 1
    assert ask(svc, GRID)[0] == first


def test_each_statement_over_one_release_gets_its_own_rows(duck_service):
    svc = duck_service
    first, _ = ask(svc, GRID)
    top, notes = ask(svc, GRID + " ORDER BY n DESC, item, store LIMIT 300")
    assert _charged(notes).startswith("dpgate: ε charged 0")  # the same release
    want = sorted(first, key=lambda r: (-r[2], r[0], r[1]))[:300]
    assert top == want
    assert ask(svc, GRID + " ORDER BY n DESC, item, store LIMIT 300")[0] == want
