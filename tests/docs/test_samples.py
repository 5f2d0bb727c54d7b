"""Every marked psql sample in README.md and docs/ is what running it prints now
(tests/docs/samples.py runs each over the wire with psql against the demo, noise from a seeded
source; ``python -m tests.docs.samples`` rewrites them)."""

from __future__ import annotations

import shutil

import pytest

from tests.docs.samples import Demo, blocks, documents, regenerate, steps

pytestmark = pytest.mark.skipif(
    shutil.which("psql") is None, reason="psql not installed (.ci/run installs it)"
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return Demo(tmp_path_factory.mktemp("samples"))


def test_every_sample_in_the_docs_is_what_running_it_prints(demo):
    marked = {d.name: len(blocks(d, d.read_text().split("\n"))) for d in documents()}
    assert marked["README.md"] >= 1  # the README's psql session is a sample
    stale = regenerate(documents(), write=False, demo=demo)
    assert not stale, f"stale samples {stale}: regenerate with `python -m tests.docs.samples`"


def test_a_stale_sample_is_found_and_rewritten(demo, tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "Text.\n\n<!-- sample: t -->\n```\ndemo=> SELECT COUNT(*)\ndemo->   FROM pums;\n"
        " count\n-------\n 12345\n(1 row)\n```\n"
    )
    assert regenerate([doc], write=False, demo=demo) == [f"{doc}:5 (t)"]
    assert regenerate([doc], write=True, demo=demo) == [f"{doc}:5 (t)"]
    text = doc.read_text()
    assert "demo=> SELECT COUNT(*)\ndemo->   FROM pums;\nNOTICE:  dpgate: ε charged 1;" in text
    assert "12345" not in text and text.startswith("Text.\n\n<!-- sample: t -->\n```\n")
    assert regenerate([doc], write=False, demo=demo) == []  # the rewritten block is current


def test_the_block_syntax():
    body = [
        '$ psql "postgresql://gold:…@127.0.0.1:6432/demo"',
        "demo=> SELECT 1",
        "demo-> ;",
        " out",
        "demo=> \\dt",
    ]
    assert steps(body, "analyst") == [("role", body[0]), ("sql", "SELECT 1\n;"), ("sql", "\\dt")]
    with pytest.raises(ValueError, match="continues no statement"):
        steps(["demo-> x"], "analyst")
    with pytest.raises(ValueError, match="at least one statement"):
        steps([" out"], "analyst")
    bad = "<!-- sample: x colour=red -->\n```\ndemo=> SELECT 1;\n```\n".split("\n")
    with pytest.raises(ValueError, match="unknown sample option"):
        blocks(documents()[0], bad)


def test_every_psql_session_in_the_docs_is_a_marked_sample():
    """A psql prompt, NOTICE, ERROR or HINT outside a marked block would be a sample no run
    checks: mark it (`<!-- sample: NAME -->` above its fence) and run `python -m tests.docs.samples`."""
    loose = []
    for d in documents():
        lines = d.read_text().split("\n")
        inside = {i for b in blocks(d, lines) for i in range(b.first, b.end)}
        loose += [
            f"{d.name}:{i + 1}"
            for i, line in enumerate(lines)
            if i not in inside and any(k in line for k in ("demo=> ", "NOTICE:  ", "ERROR:  ", "HINT:  "))
        ]
    assert not loose, f"unmarked psql samples at {loose}"
