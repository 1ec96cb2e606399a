"""Sphinx configuration of the redisq-django documentation (``make docs``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from sphinx.ext.autodoc.mock import MockFinder

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

# The pipeline extra (PySpark, pyarrow, pandas: hundreds of MB) is no dependency of the
# docs (make docs installs .[docs] only): when it is missing, its modules are mocked as
# autodoc mocks what it imports, for the whole build, so that the generated pages still
# read the pipeline commands' argument parsers. Nothing of Spark runs at build time.
PIPELINE_EXTRA = ("pyspark", "pyarrow", "pandas")
if importlib.util.find_spec("pyspark") is None:
    sys.meta_path.insert(0, MockFinder(list(PIPELINE_EXTRA)))

# Autodoc imports the package, and the generated pages instantiate the management
# commands: both need Django set up, on settings of the docs' own.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "docs_settings")
import django  # noqa: E402

django.setup()

import redisq_django  # noqa: E402

project = "redisq-django"
author = "redisq-django contributors"
copyright = "redisq-django contributors"
release = redisq_django.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "redisq_docs",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# MyST: anchors for headings up to ### so that `page.md#a-heading` links resolve, and
# the fenced ``{directive}`` syntax for Sphinx directives.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# Option names (--tasks) and quotes in code-like text stay as typed.
smartquotes = False

html_theme = "furo"
html_title = f"redisq-django {release}"
# Wide tables wrap inside the page's column (tests/docs/test_site.py measures them).
html_static_path = ["_static"]
html_css_files = ["tables.css"]

autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" as fields of the class, not entries that clash with autodoc's members.
napoleon_use_ivar = True
