"""The chart code the report inlines (the vendored uPlot and charts.js, with their CSS), and
the Content-Security-Policy sources that allow exactly those scripts.

The report is one file that opens offline from ``file://``: no CDN, nothing beside it, so
the scripts and styles the admin serves from the app's static files are copied into the
page. Neither PySpark nor Django is imported here: the admin may read
:func:`script_sources` to serve the page with a policy that runs these scripts and no other.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from importlib.resources import files

__all__ = ["inline_head", "script_sources", "scripts", "styles"]

_STATIC = ("static", "redisq_django")
#: Package files, in the order the page needs them (uPlot before charts.js).
SCRIPTS = ("vendor/uplot/uPlot.iife.min.js", "charts.js")
STYLES = ("vendor/uplot/uPlot.min.css", "charts.css")
#: What would end a script or style element early, or start an HTML comment inside it.
_CLOSING = re.compile(r"</(?=script|style)|<!--", re.IGNORECASE)


def _read(name: str) -> str:
    resource = files("redisq_django").joinpath(*_STATIC, *name.split("/"))
    return resource.read_text(encoding="utf-8")


def _inline(text: str) -> str:
    """``text`` safe inside a ``<script>`` or ``<style>`` element: ``</script`` becomes
    ``<\\/script`` (the same string in JavaScript; in CSS only strings could hold it)."""
    return _CLOSING.sub(lambda m: "<\\/" if m.group().startswith("</") else "<\\!--", text)


@cache
def scripts() -> tuple[str, ...]:
    """The scripts' text, each as it is placed between ``<script>`` and ``</script>``."""
    return tuple(_inline(_read(name)) for name in SCRIPTS)


@cache
def styles() -> tuple[str, ...]:
    """The style sheets' text, each as it is placed inside ``<style>``."""
    return tuple(_inline(_read(name)) for name in STYLES)


def inline_head() -> str:
    """The ``<style>`` and ``<script>`` elements of the charts, for the page's head."""
    css = "".join(f"<style>{text}</style>\n" for text in styles())
    js = "".join(f"<script>{text}</script>\n" for text in scripts())
    return css + js


def script_sources() -> str:
    """``script-src`` sources allowing exactly the inlined scripts (their SHA-256), for a
    policy such as ``default-src 'none'; script-src <these>; style-src 'unsafe-inline'``.

    The chart specs are ``application/json`` script elements: data, never run, so no
    policy needs to allow them. A report written by another version of the package has
    other scripts: under this policy its charts stay undrawn and say so; its tables stand.
    """
    digests = (hashlib.sha256(text.encode("utf-8")).digest() for text in scripts())
    return " ".join(f"'sha256-{base64.b64encode(d).decode('ascii')}'" for d in digests)
