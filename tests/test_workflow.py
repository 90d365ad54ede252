"""The publishing workflow runs the README's test command on the branch in _config.yml
(or, once released, on the development branch while _config.yml names the release tag)."""

from __future__ import annotations

import os
import re
import subprocess

import yaml

from tools.book import ROOT, repository

WORKFLOW = ROOT / ".github" / "workflows" / "publish.yml"


def test_workflow_tests_then_publishes_the_configured_branch():
    flow = yaml.safe_load(WORKFLOW.read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on:` key as True
    _, ref = repository()
    branches = on["push"]["branches"]
    assert len(branches) == 1, f"the workflow publishes one branch, not {branches}"
    # _config.yml names that branch until the first release; a release (tools/release.py)
    # pins the launch buttons and setup cells to its tag vX.Y.Z, and the workflow goes on
    # publishing the branch (tests/test_release.py checks the tag against the version).
    assert ref == branches[0] or re.fullmatch(r"v\d+\.\d+\.\d+", ref), (
        f"the workflow must publish _config.yml's branch ({ref}), or a release tag be configured"
    )
    steps = flow["jobs"]["test"]["steps"]
    commands = [s["run"] for s in steps if "run" in s]
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"^make test\b", readme, re.M)
    assert test_command, "the README names `make test` as the test command"
    assert any(re.match(r"make test\b", c) for c in commands), commands
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert uploads and uploads[0]["with"]["path"] == "${{ steps.site.outputs.path }}"
    deploy = flow["jobs"]["publish"]
    assert deploy["needs"] == "test"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])


#: The edition switch (``env.EDITION`` in the workflow) -> the folder it publishes.
EDITIONS = {"full": "_build/html", "student": "_build/student/html"}


def site_step(flow: dict) -> dict:
    (step,) = [s for s in flow["jobs"]["test"]["steps"] if s.get("id") == "site"]
    return step


def published(flow: dict, edition: str, tmp_path) -> tuple[int, str]:
    """Run the workflow's "edition to publish" step as Actions would (bash, GITHUB_OUTPUT)."""
    out = tmp_path / f"output-{edition}"
    out.write_text("")
    env = {**os.environ, "EDITION": edition, "GITHUB_OUTPUT": str(out)}
    run = subprocess.run(["bash", "-e", "-c", site_step(flow)["run"]], env=env)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return run.returncode, outputs.get("path", "")


def test_one_switch_publishes_the_full_or_the_student_edition(tmp_path):
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow["env"]["EDITION"] == "full", "the full edition stays the default"
    for edition, folder in EDITIONS.items():
        assert published(flow, edition, tmp_path) == (0, folder), edition
    assert published(flow, "answers", tmp_path)[0] != 0, "an unknown edition must fail"
    steps = flow["jobs"]["test"]["steps"]
    ids = [s.get("id") for s in steps]
    upload = next(i for i, s in enumerate(steps) if "upload-pages-artifact" in s.get("uses", ""))
    assert ids.index("site") < upload


def test_make_test_builds_both_published_folders():
    """`make test` (the workflow's command) builds both editions where the switch looks."""
    make = (ROOT / "Makefile").read_text()
    test_build = re.search(r"^test-build:.*\n((?:\t.*\n)+)", make, re.M)
    assert test_build and re.search(r"\bbook-en\b.*\bbook-student\b", test_build[1])
    assert re.search(r"^test:.*\btest-build\b", make, re.M)
    student = re.search(r"^book-student:.*\n((?:\t.*\n)+)", make, re.M)
    assert student and f"mv _build/student/_build/html {EDITIONS['student']}" in student[1]
