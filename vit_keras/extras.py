"""Optional dependencies: each lives in an extra of the `vit-keras3` distribution, and is imported only where used.

`import vit_keras` needs only the core requirements; plotting needs the `[inspection]` extra (matplotlib,
pillow), the bundled digits dataset and the demo need `[train]` (scikit-learn), ONNX export needs `[onnx]`.
A function whose extra is missing raises MissingExtraError (an ImportError) that names the extra and the command
that installs it. vit-keras3 is installed from its source tree (it is not published on PyPI), so the command is
the source tree's: `pip install -e ".[EXTRA]"`, run in the directory that holds setup.cfg.

Example:
    >>> install_command("inspection")
    'pip install -e ".[inspection]"'
    >>> require("json", "inspection", "Reading JSON").__name__
    'json'
"""

from __future__ import annotations

import importlib

DISTRIBUTION = "vit-keras3"


class MissingExtraError(ImportError):
    """An optional package is not installed; the message names the extra that brings it and the pip command."""


def install_command(extra: str) -> str:
    """The pip command that installs `extra` of this distribution from its source tree (quoted for shells that
    glob brackets), as README.md and the docs write it.

    Example:
        >>> install_command("train")
        'pip install -e ".[train]"'
    """
    return f'pip install -e ".[{extra}]"'


def require(module: str, extra: str, purpose: str):
    """Import and return `module`; if it cannot be imported, raise MissingExtraError naming `extra` and how to
    install it.

    `purpose` says what needs the module, e.g. "Drawing inspection figures"; the original ImportError is chained
    and quoted, so a broken installation is not mistaken for a missing one.

    Example:
        >>> try:
        ...     require("no_such_module_xyz", "inspection", "Drawing inspection figures")
        ... except MissingExtraError as error:
        ...     print(error)
        Drawing inspection figures needs no_such_module_xyz, which could not be imported (No module named \
'no_such_module_xyz'); it comes with the [inspection] extra of vit-keras3: pip install -e ".[inspection]" in the \
vit_keras source tree
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{purpose} needs {module.split('.')[0]}, which could not be imported ({error}); it comes with the "
            f"[{extra}] extra of {DISTRIBUTION}: {install_command(extra)} in the vit_keras source tree"
        ) from error
