"""The documentation: the site in docs/ builds with ``mkdocs build --strict`` (a broken link or
anchor between its pages fails it), and every link of the README, which the site does not
include, leads to a file of the repository and, where it names one, to a heading there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub and MkDocs' toc make simple ones."""
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = re.match(r"#{1,6} (.*)", line)
        if m and not in_code:
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).strip().replace(" ", "-"))
    return anchors


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "groups" / "index.html").is_file()


def test_every_readme_link_leads_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    broken = []
    for target in LINK.findall(readme):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else ROOT / "README.md"
        if not file.is_file() or (anchor and anchor not in heading_anchors(file.read_text())):
            broken.append(target)
    assert not broken, f"README links leading nowhere: {broken}"


def test_the_anchor_reader_finds_headings_not_code() -> None:
    text = "# Running\n## Compiled hot modules\n```sh\n# a comment\n```\n### Retention, DeleteRecords and topic configs\n"
    assert heading_anchors(text) == {
        "running",
        "compiled-hot-modules",
        "retention-deleterecords-and-topic-configs",
    }
