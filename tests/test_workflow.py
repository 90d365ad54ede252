"""The publishing workflow runs the README's test command on the branch in _config.yml
(or, once released, on the development branch while _config.yml names the release tag)."""

from __future__ import annotations

import re

import yaml
from book import ROOT, repository

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
    assert uploads and uploads[0]["with"]["path"] == "_build/html"
    deploy = flow["jobs"]["publish"]
    assert deploy["needs"] == "test"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
