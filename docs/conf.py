"""Sphinx configuration of the sgpc documentation, built by ``make docs`` (every example) or ``make docs-quick``.

Offline by design: no intersphinx, no remote images. The gallery (examples/, sphinx-gallery) is executed;
``SGPC_DOCS_QUICK=1`` runs only the examples named in ``QUICK`` (CI), the others are rendered unexecuted.
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

# The examples are tiny: a second torch thread only adds synchronisation on a shared 2-core machine.
torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")

import sgpc  # noqa: E402

sys.path.insert(0, str(ROOT / "docs"))
import reproduce_table  # noqa: E402

# the table of reproducing.rst follows docs/results/*.md and results/*.jsonl
reproduce_table.write(ROOT / "docs" / "_generated" / "reproducing_table.rst")

# -- API reference: one page per group of modules, written at build time so that every module of the
# package (each documented through its __all__) appears; a module no group names goes to "Other modules".
API_GROUPS = [
    ("estimator", "The estimator", "``sgpc.GPClassifier`` follows scikit-learn's estimator contract.",
     ["estimator", "fitting", "weighting"]),
    ("plot", "Plots", "scikit-learn-style ``Display`` objects (matplotlib is the optional ``plot`` extra).", ["plot"]),
    ("metrics", "Metrics, uncertainty and active learning", "", ["metrics", "uncertainty"]),
    ("data", "Data, streaming and data-parallel training", "", ["datasets", "tabular", "stream", "distributed"]),
    ("model", "Model building blocks", "What a method is made of: the registry of names, kernels, likelihoods, "
     "the sparse GP and its Gaussian algebra.", ["registry", "kernels", "likelihoods", "sparse", "gaussian",
                                                 "quadrature"]),
    ("engines", "Inference engines", "One module per family; each engine implements the protocol in "
     "``sgpc.engine``.", ["engine", "vi", "natgrad", "sites", "ep", "sep", "fitc_ep", "rmgpc"]),
    ("training", "Fitting machinery", "The fit loop, model files, warm starts, initialisation, the hyper-parameter "
     "prior and input checks.",
     ["train", "persist", "warm_start", "initialization", "hyperprior", "validation"]),
    ("mcmc", "MCMC reference", "", ["mcmc"]),
    ("cli", "Command line", "The ``sgpc`` command (``python -m sgpc``).", ["cli"]),
]
# documented elsewhere: the package's own docstring (index), its entry point, and the likelihood
# submodules (``sgpc.likelihoods`` re-exports every public name of them)
API_SKIP = {"__main__", "likelihoods.base", "likelihoods.robust_max", "likelihoods.additive", "likelihoods.hinge"}
API_EXCLUDE = {"datasets": "Dataset, DataNotFoundError"}     # re-exported from sgpc.tabular


def _write_api_pages(out: pathlib.Path) -> None:
    import pkgutil
    modules = sorted(m.name.removeprefix("sgpc.") for m in pkgutil.walk_packages(sgpc.__path__, "sgpc."))
    modules = [m for m in modules if m not in API_SKIP]
    # a group's modules that this checkout lacks are left out (e.g. a module added on another branch)
    present = [(name, title, intro, [m for m in mods if m in modules]) for name, title, intro, mods in API_GROUPS]
    grouped = {m for *_, mods in present for m in mods}
    groups = present + ([("other", "Other modules", "", [m for m in modules if m not in grouped])]
                        if set(modules) - grouped else [])
    out.mkdir(parents=True, exist_ok=True)
    pages = {"index.rst": "\n".join([
        "API reference", "=============", "",
        "Generated from the docstrings of every public name (each module's ``__all__``). The docstrings are",
        "Google style (``Args:``/``Returns:``) and rendered with ``sphinx.ext.napoleon``; shapes follow",
        ":doc:`../NOTATION`. Start with :class:`sgpc.estimator.GPClassifier` (imported as",
        "``sgpc.GPClassifier``) and :doc:`plot`.", "", ".. toctree::", "   :maxdepth: 2", "",
        *[f"   {name}" for name, *_ in groups], ""])}
    for name, title, intro, mods in groups:
        lines = [title, "=" * len(title), ""] + ([intro, ""] if intro else [])
        for m in mods:
            head = f"``sgpc.{m}``"
            lines += [head, "-" * len(head), "", f".. automodule:: sgpc.{m}"]
            if m in API_EXCLUDE:
                lines += [f"   :exclude-members: {API_EXCLUDE[m]}", "",
                          f"``{API_EXCLUDE[m].replace(', ', '`` and ``')}`` are documented under ``sgpc.tabular``."]
            lines.append("")
        pages[f"{name}.rst"] = "\n".join(lines)
    for fname, text in pages.items():
        path = out / fname
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    for stale in set(p.name for p in out.glob("*.rst")) - set(pages):
        (out / stale).unlink()


_write_api_pages(ROOT / "docs" / "api")

project = "sgpc"
author = "the sgpc developers"
copyright = "the sgpc developers"
release = version = sgpc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",      # the docstrings are Google style ("Args:", "Returns:"), not numpydoc
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_generated", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip",
                    "auto_examples/*.md5", "auto_examples/*.codeobj.json", "sg_execution_times.rst"]
root_doc = "index"

# -- MyST: the Markdown pages that already exist in docs/ are included as they are ----------------------
myst_enable_extensions = ["colon_fence"]
# maths is written in Unicode (as in the docstrings), so pages need no MathJax from a CDN to read offline
myst_heading_anchors = 3

# -- autodoc + napoleon -------------------------------------------------------------------------------
autodoc_default_options = {"members": True, "show-inheritance": False, "member-order": "bysource"}
autodoc_typehints = "none"          # the docstrings state shapes and types in words
autodoc_mock_imports = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True            # "Attributes:" as fields, not a second description of dataclass fields

# The docstrings are written as plain text with Unicode maths (|B_r|, x_i, fitted attributes such as
# classes_): characters that reStructuredText would read as markup are escaped outside ``literals``
# before napoleon parses the sections.
_LITERAL = re.compile(r"(``.+?``|`[^`]+`)")
_TRAILING_UNDERSCORE = re.compile(r"(?<=\w)_(?=\W|$)")


def _escape_plain_text(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        parts = _LITERAL.split(line)
        for j in range(0, len(parts), 2):              # even parts lie outside literals
            text = parts[j].replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
            parts[j] = _TRAILING_UNDERSCORE.sub(r"\\_", text)
        lines[i] = "".join(parts)


def _indent(line: str) -> int:
    """Where a line's text starts; for a bullet item, where its body starts."""
    stripped = line.lstrip()
    n = len(line) - len(stripped)
    return n + 2 if stripped[:2] in ("* ", "- ") else n


def _separate_indented_blocks(app, what, name, obj, options, lines):
    """Blank lines around indented formula lines of plain-text docstrings (after napoleon): a line indented
    below a paragraph starts a block quote, a line indented less than the one above it ends one (instead of
    a broken definition list or block quote)."""
    out = []
    for line in lines:
        prev = out[-1] if out else ""
        if line.strip() and prev.strip():
            ind, prev_ind = len(line) - len(line.lstrip()), len(prev) - len(prev.lstrip())
            opener = prev.lstrip().startswith((":", ".."))     # field bodies and directives indent on purpose
            if (ind > _indent(prev) and not opener) or (ind < prev_ind and not line.lstrip().startswith(":")):
                out.append("")
        out.append(line)
    lines[:] = out


def _skip_member(app, what, name, obj, skip, options):
    """Leave out the set_*_request methods scikit-learn generates for metadata routing."""
    return True if re.fullmatch(r"set_\w+_request", name) else None


def setup(app):
    app.connect("autodoc-process-docstring", _escape_plain_text, priority=100)
    app.connect("autodoc-process-docstring", _separate_indented_blocks, priority=900)
    app.connect("autodoc-skip-member", _skip_member)


# -- sphinx-gallery ---------------------------------------------------------------------------------
QUICK = r"plot_(quickstart|decision_boundary)\.py"
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": QUICK if os.environ.get("SGPC_DOCS_QUICK") else r"plot_",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "min_reported_time": 1e9,     # the machine is shared: no run times printed in the pages
    "capture_repr": (),           # the examples print what they show; no estimator reprs after fit()
}

# -- HTML -----------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"sgpc {release}"
html_static_path = ["_static"]
html_css_files = ["sgpc.css"]
# pages without sub-pages: no empty section-navigation column
html_sidebars = {page: [] for page in ("index", "getting-started", "choosing", "reproducing")}
html_theme_options = {
    "navigation_depth": 2,
    "header_links_before_dropdown": 5,
    "navbar_persistent": [],
    "navbar_end": ["search-button", "theme-switcher"],
    "show_prev_next": False,
    # the example pages have no right-hand column, so that their code has the width
    "secondary_sidebar_items": {f"auto_examples/{p.stem}": [] for p in (ROOT / "examples").glob("plot_*.py")},
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False
