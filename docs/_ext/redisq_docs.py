"""Reference pages generated from the code: settings, commands, data source options, API.

Each directive renders a Markdown table (parsed as the page's own MyST) from the one list
the code keeps, so the pages cannot drift from it:

- ``redisq-settings``: ``redisq_django.conf.DEFAULTS`` (keys and defaults, in order);
- ``redisq-source-options``: ``OPTIONS`` of ``redisq_django/pipeline/source_options.py``
  (read with ``ast``: the data source's module needs PySpark's extra to import);
- ``redisq-command``: a management command's options, from its argparse parser;
- ``redisq-public-api``: an autodoc entry for every name of ``redisq_django.__all__`` (or
  of the ``__all__`` of the package its argument names).

The first two take the meanings, written for people, as their content: one entry per
``KEY: meaning`` line, continued on indented lines. A key of the code without a meaning,
or a meaning for a key the code does not have, is a build warning, and ``make docs``
turns warnings into errors.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
SOURCE_OPTIONS = ROOT / "redisq_django" / "pipeline" / "source_options.py"
_ENTRY = re.compile(r"^(\S+?):\s+(.*)$")
#: Django's options on every command: listed once, not per command.
_DJANGO_OPTIONS = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def meanings(lines: Sequence[str]) -> dict[str, str]:
    """``KEY: meaning`` entries (continued on indented lines), in order."""
    found: dict[str, str] = {}
    key = None
    for line in lines:
        if not line.strip():
            continue
        match = _ENTRY.match(line)
        if match and not line[0].isspace():
            key = match[1].strip("`")
            found[key] = match[2].strip()
        elif key is not None:
            found[key] += " " + line.strip()
    return found


def setting_names() -> dict[str, Any]:
    """Every key of ``settings.REDISQ`` with its default."""
    from redisq_django.conf import DEFAULTS

    return dict(DEFAULTS)


def source_option_names() -> list[str]:
    """Every option of the ``redisq`` data source (``source_options.OPTIONS``)."""
    tree = ast.parse(SOURCE_OPTIONS.read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "OPTIONS" and node.value is not None:
            return list(ast.literal_eval(node.value))
    raise LookupError(f"no OPTIONS tuple in {SOURCE_OPTIONS}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    text = repr(value).replace("'", '"')
    return f"`{text}`"


class _Documented(SphinxDirective):
    """A table of the code's names with the meanings given as the directive's content."""

    has_content = True
    what = ""

    def names(self) -> dict[str, Any]:
        raise NotImplementedError

    def header(self) -> list[str]:
        raise NotImplementedError

    def row(self, name: str, default: Any, meaning: str) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        names = self.names()
        given = meanings(list(self.content))
        for name in names:
            if name not in given:
                logger.warning(
                    "%s %r has no entry on this page: add a line '%s: what it means'",
                    self.what,
                    name,
                    name,
                    location=self.get_location(),
                )
        for name in given:
            if name not in names:
                logger.warning(
                    "%r is documented here but is no %s of the code (%s)",
                    name,
                    self.what,
                    ", ".join(names),
                    location=self.get_location(),
                )
        head = self.header()
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, default in names.items():
            cells = self.row(name, default, given.get(name, ""))
            table.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        return _parse(self, table)


class SettingsDirective(_Documented):
    """``settings.REDISQ``: key, default (from the code), meaning."""

    what = "setting"

    def names(self) -> dict[str, Any]:
        return setting_names()

    def header(self) -> list[str]:
        return ["key", "default", "meaning"]

    def row(self, name: str, default: Any, meaning: str) -> list[str]:
        return [f"`{name}`", _code(default), meaning]


class SourceOptionsDirective(_Documented):
    """The ``redisq`` data source's options and their meanings."""

    what = "data source option"

    def names(self) -> dict[str, Any]:
        return dict.fromkeys(source_option_names())

    def header(self) -> list[str]:
        return ["option", "meaning"]

    def row(self, name: str, default: Any, meaning: str) -> list[str]:
        return [f"`{name}`", meaning]


def _parse(directive: SphinxDirective, lines: list[str]) -> list[nodes.Node]:
    container = nodes.container()
    source = directive.get_source_info()[0]
    directive.state.nested_parse(
        StringList(lines, source=source), directive.content_offset, container
    )
    return list(container.children)


# -- management commands -----------------------------------------------------------------


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        metavar = action.metavar or action.dest
        text = str(metavar).upper() if action.metavar is None else str(metavar)
        return f"{text} …" if action.nargs in ("*", "+") else text
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    metavar = action.metavar or action.dest.upper()
    return f"{flags} {metavar}"


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if "%(" in text:
        params = {**vars(action), "prog": parser.prog}
        params = {k: getattr(v, "__name__", v) for k, v in params.items()}
        text = text % params
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += (" " if text else "") + "(one of: " + ", ".join(map(str, action.choices)) + ")"
    return text


def option_rows(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """``(invocation, help)`` of a parser's own arguments (Django's common ones left out)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if set(action.option_strings) & _DJANGO_OPTIONS:
            continue
        yield _invocation(action), _help(action, parser)


def sub_parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and each sub-command's, depth first, with the words that select it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from sub_parsers(sub, (*words, name))


#: What ``python -m`` runs, documented like a management command.
MODULES = ("redisq_django.pipeline", "redisq_django.core.scripts")


def command_parser(name: str) -> argparse.ArgumentParser:
    """The argparse parser of ``manage.py NAME`` (a redisq command), or of ``python -m
    NAME`` when ``name`` is one of :data:`MODULES`."""
    if name == "redisq_django.pipeline":
        from redisq_django.pipeline.cli import build_parser

        return build_parser()
    if name == "redisq_django.core.scripts":
        scripts_cli = importlib.import_module("redisq_django.core.scripts.__main__")
        return scripts_cli.build_parser()
    from django.core.management import load_command_class

    return load_command_class("redisq_django", name).create_parser("manage.py", name)


class CommandDirective(SphinxDirective):
    """Every option of a command and of its sub-commands, from its argparse parser."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        prog = "python -m" if name in MODULES else "manage.py"
        if name == "redisq_pipeline":
            command = importlib.import_module(f"redisq_django.management.commands.{name}")
            if command.MISSING:  # its sub-commands' options come with the pipeline extra
                logger.warning(
                    "the options of manage.py %s cannot be documented: %s",
                    name,
                    command.MISSING,
                    location=self.get_location(),
                )
        lines: list[str] = []
        for words, parser in sub_parsers(command_parser(name)):
            rows = list(option_rows(parser))
            title = " ".join((prog, name, *words))
            lines.append(f"`{title}`")
            lines.append("")
            if parser.description or (not words and parser.description is None):
                description = parser.description or ""
                if description:
                    lines += [_cell(description), ""]
            if not rows:
                lines += ["(no options of its own)", ""]
                continue
            lines += ["| argument | meaning |", "|---|---|"]
            lines += [f"| `{_cell(inv)}` | {_cell(text)} |" for inv, text in rows]
            lines.append("")
        return _parse(self, lines)


# -- the public API ------------------------------------------------------------------------


class PublicApiDirective(SphinxDirective):
    """An autodoc entry for each name ``redisq_django`` exports (``__all__``), or the
    package the argument names (``redisq_django.testing``)."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        module = self.arguments[0] if self.arguments else "redisq_django"
        package = importlib.import_module(module)
        # Autodoc writes reStructuredText: run it inside an eval-rst block, as MyST
        # would parse a nested block of the page as Markdown.
        lines = ["```{eval-rst}"]
        for name in package.__all__:
            value = getattr(package, name)
            kind = "autoclass" if isinstance(value, type) else "autofunction"
            lines += [f".. {kind}:: {module}.{name}", ""]
        lines.append("```")
        return _parse(self, lines)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("redisq-settings", SettingsDirective)
    app.add_directive("redisq-source-options", SourceOptionsDirective)
    app.add_directive("redisq-command", CommandDirective)
    app.add_directive("redisq-public-api", PublicApiDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
