"""The language the library speaks to the reader: English, or Chinese for the Chinese edition.

One switch, :func:`set_language`, chooses it; before any call, the environment variable
``SELFATTN_LANGUAGE`` does (``zh`` or ``zh_CN`` for Chinese; unset, empty or ``en`` for
English, the default). The Chinese notebooks' setup cell calls ``selfattn.set_language("zh")``::

    import selfattn

    selfattn.set_language("zh")  # the checkers now print "✅ 练习 3.1（动手实现：五个步骤）：通过"

What speaks it: the exercise checkers (:mod:`selfattn.exercises`: passed, failed, not
attempted, ``progress``, the errors of the reader's code, the common failure texts), and the
exercise names in their lines, which in Chinese are the book's Chinese exercise titles.

The texts are a gettext catalog (the standard library's ``gettext``), domain ``selfattn``:
``selfattn/locale/zh_CN/LC_MESSAGES/selfattn.po``, compiled to the ``.mo`` next to it that
the wheel ships (``tools/i18n.py library`` writes the exercise titles into the ``.po`` from
the chapters' catalogs and compiles it; ``tests/test_library_language.py`` checks both are
current). A message id is the English text, a ``str.format`` template; an exercise's title is
the message with context ``exercise <number>`` whose id is its checker's English title.

:func:`translate_output` turns a checker's English output lines into the current language:
the Chinese build (``_ext/book_zh.py``) uses it on the stored outputs of the Chinese pages.
"""

from __future__ import annotations

import gettext
import os
import re
import unicodedata
from functools import cache
from pathlib import Path

__all__ = ["get_language", "set_language", "translate_output"]

#: The languages the library speaks: English (the default) and Simplified Chinese.
LANGUAGES = ("en", "zh_CN")
_ALIASES = {"en": "en", "zh": "zh_CN", "zh_cn": "zh_CN", "zh-cn": "zh_CN", "zh_hans": "zh_CN"}
DOMAIN = "selfattn"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

_language: str | None = None  # None: read SELFATTN_LANGUAGE


def _normalise(language) -> str:
    if not isinstance(language, str):
        raise TypeError(
            f"language must be a string such as 'en' or 'zh', got {type(language).__name__} "
            f"{language!r}"
        )
    found = _ALIASES.get(language.strip().lower().replace(".utf-8", ""))
    if found is None:
        raise ValueError(f"unknown language {language!r}; expected one of 'en', 'zh' (or 'zh_CN')")
    return found


def set_language(language: str | None) -> str:
    """Make the library speak ``language``: ``"en"`` (the default) or ``"zh"`` (``"zh_CN"``).

    ``None`` goes back to the environment variable ``SELFATTN_LANGUAGE`` (English when it is
    unset). Returns the previous language, so that a test can restore it.

    Raises:
        TypeError: ``language`` is not a string (or None).
        ValueError: ``language`` is not one the library speaks.
    """
    global _language
    previous = get_language()
    _language = None if language is None else _normalise(language)
    return previous


def get_language() -> str:
    """The language the library speaks now: ``"en"`` or ``"zh_CN"``."""
    if _language is not None:
        return _language
    value = os.environ.get("SELFATTN_LANGUAGE", "").strip()
    try:
        return _normalise(value) if value else "en"
    except ValueError:
        return "en"


@cache
def _translations(language: str) -> gettext.NullTranslations:
    if language == "en":
        return gettext.NullTranslations()
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[language], fallback=True)


def _(msgid: str, /, **values) -> str:
    """``msgid`` in the current language, formatted with ``values``."""
    text = _translations(get_language()).gettext(msgid)
    return text.format(**values) if values else text


def exercise_title(number: str, title: str) -> str:
    """An exercise's name in the current language: in Chinese, the book's Chinese title of
    exercise ``number``; else ``title``, its checker's English title."""
    if get_language() == "en":
        return title
    found = _translations(get_language()).pgettext(f"exercise {number}", title)
    if found != title:
        return found
    return _titles_by_number(get_language()).get(number, title)


@cache
def _titles_by_number(language: str) -> dict[str, str]:
    catalog = getattr(_translations(language), "_catalog", {})
    found = {}
    for key, text in catalog.items():
        if isinstance(key, str) and key.startswith("exercise ") and "\x04" in key:
            found[key.split("\x04", 1)[0].removeprefix("exercise ")] = text
    return found


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced output: a Chinese character takes two (the
    checkers' icons are counted as one, as ``len`` counts them)."""
    return sum(
        2 if unicodedata.east_asian_width(ch) in "WF" and ch not in "✅❌⏳" else 1 for ch in text
    )


# ----------------------------------------------------------------------------- stored outputs

_LINE = re.compile(
    r"^(?P<icon>[✅❌⏳]) Exercise (?P<number>\d+\.\d+) \((?P<title>.*)\): (?P<rest>.*)$"
)
_HEAD = re.compile(r"^Chapter (?P<chapter>\d+): your exercises, as checked in this kernel$")
_TALLY = re.compile(r"^(?P<done>\d+) of (?P<total>\d+) passed$")
_WORDS = ("passed", "failed", "not attempted yet")


def translate_output(text: str) -> str:
    """``text``, a checker's output (one line or several), with each English line the
    checkers print in the current language; other lines are left as they are.

    A failure line's explanation is translated when it is one of the catalog's messages
    (the frame's texts: a wrong answer's details stay as the checker wrote them).
    """
    if get_language() == "en":
        return text
    lines = []
    for line in text.split("\n"):
        if found := _LINE.match(line):
            number, rest = found["number"], found["rest"]
            # By number: progress() may have cut the English title short.
            name = _titles_by_number(get_language()).get(number) or exercise_title(
                number, found["title"]
            )
            if rest in _WORDS:
                line = _fit(found["icon"], number, name, _(rest))
            else:
                line = _format_line(found["icon"], number, name, _(rest))
        elif found := _HEAD.match(line):
            line = _(
                "Chapter {chapter}: your exercises, as checked in this kernel", **found.groupdict()
            )
        elif found := _TALLY.match(line):
            line = _("{done} of {total} passed", **found.groupdict())
        lines.append(line)
    return "\n".join(lines)


def exercise_label(number: str, title: str) -> str:
    """``Exercise 3.1 (the five steps)``, in the current language."""
    return _("Exercise {number} ({title})", number=number, title=exercise_title(number, title))


def _format_line(icon: str, number: str, title: str, message: str) -> str:
    label = _("Exercise {number} ({title})", number=number, title=title)
    return _("{icon} {label}: {message}", icon=icon, label=label, message=message)


def check_line(icon: str, number: str, title: str, message: str) -> str:
    """One checker line, ``✅ Exercise 3.1 (the five steps): passed``, in the current language
    (``message`` already is)."""
    return _format_line(icon, number, exercise_title(number, title), message)


def progress_line(icon: str, number: str, title: str, word: str, width: int = 79) -> str:
    """A line of ``progress()``, its title cut short to keep it within ``width`` columns."""
    return _fit(icon, number, exercise_title(number, title), word, width)


def _fit(icon: str, number: str, name: str, word: str, width: int = 79) -> str:
    line = _format_line(icon, number, name, word)
    if display_width(line) <= width:
        return line
    keep = max(width - display_width(_format_line(icon, number, "...", word)), 1)
    cut = ""
    for ch in name:
        if display_width(cut + ch) > keep:
            break
        cut += ch
    return _format_line(icon, number, (cut or name[:1]) + "...", word)
