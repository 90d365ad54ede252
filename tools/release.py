"""A release of the book: one version, and every Colab link and setup cell pinned to its tag.

    python tools/release.py 0.2.0 [--date 2027-01-15] [--no-wheel]   # make release VERSION=0.2.0
    python tools/release.py --check     # do the version's places agree? (exit 1 if not)

Between releases the chapters' setup cells install ``selfattn`` from the development branch
(``repository.branch`` in _config.yml, ``main``), so a course's notebooks would change under
its students mid-term. A release pins them. For version X.Y.Z it

1. writes the version in its one place, ``__version__`` in ``lib/selfattn/__init__.py``
   (``pyproject.toml`` reads it from there: ``dynamic = ["version"]``);
2. sets ``repository.branch`` in _config.yml to the tag ``vX.Y.Z``: the launch buttons (Colab)
   open the notebooks at the tag, and ``tools/book.py setup-cell`` installs from it;
3. rewrites the ``%pip install -q git+<url>@<ref>`` line of every notebook's setup cell (the
   chapters, and their editions in ``notebooks/`` and ``student/``) to ``@vX.Y.Z``: the source
   only, so the saved outputs stay valid and nothing is re-executed;
4. sets ``version`` and ``date-released`` in ``CITATION.cff``;
5. turns ``CHANGELOG.md``'s "Unreleased" section into "[X.Y.Z] - date", under a fresh empty
   "Unreleased", with the link references to the tag;
6. builds the wheel into ``dist/`` (``pip wheel``, as ``tools/reader_run.py`` builds it) and
   checks that its metadata carries the version.

It then prints the commands that finish the release (commit, tag, push); it commits
nothing itself. Every path is relative to this file's checkout, so running a copy of the
repository's ``tools/release.py`` releases that copy (``tests/test_release.py`` does so in
a temporary folder). ``--check`` and ``tests/test_release.py`` check that the places agree:
all on ``vX.Y.Z`` of the current version, or all on the development branch before the first
release.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import repository, toc_chapters  # noqa: E402

INIT = ROOT / "lib" / "selfattn" / "__init__.py"
CONFIG = ROOT / "_config.yml"
CITATION = ROOT / "CITATION.cff"
CHANGELOG = ROOT / "CHANGELOG.md"
DIST = ROOT / "dist"
#: The notebook editions (tools/notebook_edition.py), English and Chinese: the chapters at the
#: same relative paths.
EDITIONS = ("notebooks", "student", "notebooks/zh", "student/zh")

VERSION = re.compile(r"^\d+\.\d+\.\d+$")
TAG = re.compile(r"^v\d+\.\d+\.\d+$")
INIT_LINE = re.compile(r'^__version__ = "(?P<v>[^"]*)"$', re.M)
BRANCH_LINE = re.compile(r"^(?P<head>  branch:[ \t]*)(?P<ref>\S+)[ \t]*$", re.M)
RELEASED = re.compile(r"^## \[(?P<v>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})[ \t]*$", re.M)
UNRELEASED = "## [Unreleased]"


def tag(version: str) -> str:
    return f"v{version}"


def current_version() -> str:
    m = INIT_LINE.search(INIT.read_text(encoding="utf-8"))
    if not m:
        sys.exit(f'no `__version__ = "..."` line in {INIT.relative_to(ROOT)}')
    return m["v"]


def released_versions() -> list[tuple[str, str]]:
    """``[(version, date), ...]`` of CHANGELOG.md's released sections, newest first."""
    return [(m["v"], m["date"]) for m in RELEASED.finditer(CHANGELOG.read_text(encoding="utf-8"))]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def notebooks() -> list[Path]:
    """Every notebook with a setup cell: the chapters in _toc.yml and their two editions."""
    found = []
    for chapter in toc_chapters():
        rel = chapter.relative_to(ROOT)
        found.append(chapter)
        found += [ROOT / edition / rel for edition in EDITIONS if (ROOT / edition / rel).exists()]
    return found


def _pip_line(url: str, ref: str) -> re.Pattern:
    # As stored in the notebook's JSON: the line ends with an escaped newline or the string.
    return re.compile(re.escape(f"%pip install -q git+{url}@{ref}") + r'(?=\\n|")')


def setup_cell_ref(path: Path) -> str | None:
    """The git ref that ``path``'s setup cell (its first code cell) installs selfattn from."""
    url, _ = repository()
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    first = next((c for c in cells if c["cell_type"] == "code"), None)
    if first is None:
        return None
    m = re.search(
        re.escape(f"%pip install -q git+{url}@") + r"(\S+)$", "".join(first["source"]), re.M
    )
    return m[1] if m else None


def citation() -> dict:
    return yaml.safe_load(CITATION.read_text(encoding="utf-8"))


def problems() -> list[str]:
    """Where the version's places disagree (empty: they agree)."""
    version, (_, ref) = current_version(), repository()
    released = dict(released_versions())
    wrong = []
    if TAG.match(ref):
        if ref != tag(version):
            wrong.append(f"_config.yml's repository.branch is {ref}, the version {version}")
        if version not in released:
            wrong.append(f"CHANGELOG.md has no section [{version}] for the tag {ref}")
    elif released:
        newest = max(released, key=_key)
        wrong.append(
            f"_config.yml's repository.branch is {ref!r}, not a release tag, but version {newest} "
            "was released: the notebooks would install from a moving branch"
        )
    cff = citation()
    if str(cff.get("version")) != version:
        wrong.append(f"CITATION.cff's version is {cff.get('version')}, the library's {version}")
    if version in released and str(cff.get("date-released")) != released[version]:
        wrong.append(
            f"CITATION.cff's date-released is {cff.get('date-released')}, "
            f"CHANGELOG.md's [{version}] {released[version]}"
        )
    for path in notebooks():
        got = setup_cell_ref(path)
        if got != ref:
            wrong.append(f"{path.relative_to(ROOT)}: the setup cell installs @{got}, not @{ref}")
    return wrong


# ------------------------------------------------------------------------------- the release


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _with_version(text: str, version: str) -> str:
    return INIT_LINE.sub(f'__version__ = "{version}"', text, count=1)


def _with_branch(text: str, ref: str) -> str:
    """_config.yml with repository.branch set to ``ref`` (comments and layout kept)."""
    if len(BRANCH_LINE.findall(text)) != 1:
        sys.exit("_config.yml: expected exactly one `  branch:` line under repository")
    new = BRANCH_LINE.sub(rf"\g<head>{ref}", text)
    if yaml.safe_load(new)["repository"]["branch"] != ref:
        sys.exit(f"_config.yml: repository.branch would not become {ref}")
    return new


def _pinned(path: Path, text: str, url: str, old: str, new: str) -> str:
    """A notebook with its setup cell's install line moved from ``@old`` to ``@new``, byte for
    byte otherwise (outputs, metadata and formatting untouched)."""
    new_text, n = _pip_line(url, old).subn(f"%pip install -q git+{url}@{new}", text)
    if n != 1:
        sys.exit(f"{path.relative_to(ROOT)}: found {n} setup-cell lines installing @{old}")
    cells = json.loads(new_text)["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    if f"git+{url}@{new}\n" not in first + "\n":
        sys.exit(f"{path.relative_to(ROOT)}: the install line is not in the setup cell")
    return new_text


def _with_citation(text: str, version: str, date: str) -> str:
    text = re.sub(r"^version: .*$", f"version: {version}", text, count=1, flags=re.M)
    if re.search(r"^date-released: ", text, re.M):
        text = re.sub(r"^date-released: .*$", f'date-released: "{date}"', text, flags=re.M)
    else:
        text = re.sub(r"^(version: .*)$", rf'\1\ndate-released: "{date}"', text, flags=re.M)
    cff = yaml.safe_load(text)
    if str(cff["version"]) != version or str(cff["date-released"]) != date:
        sys.exit("CITATION.cff: version or date-released not set")
    return text


def _with_release_section(text: str, url: str, version: str, date: str) -> str:
    """CHANGELOG.md: the Unreleased section becomes the release's, under a new empty one."""
    if text.count(UNRELEASED + "\n") != 1:
        sys.exit(f"CHANGELOG.md: expected one line {UNRELEASED!r}")
    text = text.replace(UNRELEASED + "\n", f"{UNRELEASED}\n\n## [{version}] - {date}\n", 1)
    # Link references (Keep a Changelog): Unreleased compares with the newest tag.
    text = re.sub(r"^\[Unreleased\]: .*\n?", "", text, flags=re.M).rstrip("\n") + "\n"
    refs = f"[Unreleased]: {url}/compare/{tag(version)}...HEAD\n"
    refs += f"[{version}]: {url}/releases/tag/{tag(version)}\n"
    first_ref = re.search(r"^\[\d+\.\d+\.\d+\]: ", text, re.M)
    if first_ref:
        return text[: first_ref.start()] + refs + text[first_ref.start() :]
    return text + "\n" + refs


def _section(version: str) -> str:
    """The body of CHANGELOG.md's section for ``version`` (or Unreleased)."""
    text = CHANGELOG.read_text(encoding="utf-8")
    head = UNRELEASED if version == "Unreleased" else f"## [{version}]"
    start = text.index(head)
    rest = text[start + len(head) :]
    end = re.search(r"^## |^\[[^\]]+\]: ", rest, re.M)
    return rest[: end.start() if end else len(rest)].split("\n", 1)[-1].strip()


def build_wheel(version: str) -> Path:
    DIST.mkdir(exist_ok=True)
    for old in DIST.glob(f"selfattn-{version}-*.whl"):
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(DIST), str(ROOT)],
        check=True,
    )
    (wheel,) = DIST.glob(f"selfattn-{version}-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"selfattn-{version}.dist-info/METADATA").decode()
    if f"\nVersion: {version}\n" not in meta:
        sys.exit(f"{wheel.name}: its metadata does not say Version: {version}")
    return wheel


def _tag_exists(name: str) -> bool:
    try:
        out = subprocess.run(
            ["git", "tag", "--list", name], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return False  # not a git checkout (a copy): nothing to compare with
    return bool(out.strip())


def release(version: str, date: str, wheel: bool = True) -> None:
    if not VERSION.match(version):
        sys.exit(f"VERSION must be X.Y.Z (three numbers), got {version!r}")
    released = [v for v, _ in released_versions()]
    if version in released:
        sys.exit(f"{version} is already released (CHANGELOG.md)")
    newer = [v for v in released if _key(v) >= _key(version)]
    if newer:
        sys.exit(f"{version} is not newer than the released {max(newer, key=_key)}")
    if _tag_exists(tag(version)):
        sys.exit(f"the tag {tag(version)} exists already")
    if not _section("Unreleased"):
        sys.exit("CHANGELOG.md: the Unreleased section is empty; say what the release changes")
    missing = [p.relative_to(ROOT) for p in notebooks() if setup_cell_ref(p) is None]
    if missing:
        sys.exit(f"no setup cell installing selfattn in {missing}")

    url, old_ref = repository()
    # Every change is made in memory first: a refusal leaves the checkout as it was.
    changes = {
        INIT: _with_version(_read(INIT), version),
        CONFIG: _with_branch(_read(CONFIG), tag(version)),
        CITATION: _with_citation(_read(CITATION), version, date),
        CHANGELOG: _with_release_section(_read(CHANGELOG), url, version, date),
    }
    pinned = notebooks()
    for path in pinned:
        changes[path] = _pinned(path, _read(path), url, old_ref, tag(version))
    for path, text in changes.items():
        path.write_text(text, encoding="utf-8")
    wrong = problems()
    if wrong:
        sys.exit("the release left the version's places disagreeing:\n  " + "\n  ".join(wrong))
    print(f"selfattn {version}: setup cells and launch buttons on {tag(version)}")
    print(
        f"  {len(pinned)} notebooks pinned, _config.yml, CITATION.cff, CHANGELOG.md, {INIT.name}"
    )
    if wheel:
        print(f"  wheel: {build_wheel(version).relative_to(ROOT)}")
    print(
        "\nNext: run `make test`, then\n"
        "  git add -u lib/selfattn/__init__.py _config.yml CITATION.cff CHANGELOG.md "
        "chapters notebooks student\n"
        f'  git commit -m "Release {tag(version)}"\n'
        f"  git tag -a {tag(version)} -m {tag(version)!r}\n"
        f"  git push origin HEAD {tag(version)}"
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version", nargs="?", help="X.Y.Z")
    parser.add_argument("--check", action="store_true", help="only check that the places agree")
    parser.add_argument("--date", default=dt.datetime.now(dt.timezone.utc).date().isoformat())
    parser.add_argument("--no-wheel", action="store_true", help="skip building the wheel")
    args = parser.parse_args(argv)
    if args.check:
        wrong = problems()
        if wrong:
            sys.exit("the version's places disagree:\n  " + "\n  ".join(wrong))
        print(f"version {current_version()}, setup cells and launch buttons on {repository()[1]}")
        return
    if not args.version:
        parser.error("give the VERSION (make release VERSION=x.y.z) or --check")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
        parser.error(f"--date must be YYYY-MM-DD, got {args.date!r}")
    release(args.version, args.date, wheel=not args.no_wheel)


if __name__ == "__main__":
    main(sys.argv[1:])
