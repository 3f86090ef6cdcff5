"""Progress bars: tqdm's text bar everywhere, on stdout inside a notebook kernel, so what a
notebook saves is text that reads the same when it is opened again (never a widget)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress", "in_kernel"]


def in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (a notebook, papermill)."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return False
    shell = shell_module.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress(iterable: Any = None, **options: Any) -> Any:
    """A tqdm text bar (``tqdm.std.tqdm``) over ``iterable`` with tqdm's ``options``.

    In a terminal it draws on stderr and is left out when stderr is not a terminal; in a
    notebook kernel it prints on stdout and its last state stays in the cell's output as text
    (tqdm's widget bar would be saved as a widget that shows "Error displaying widget" once the
    notebook is reopened).

    Arguments:
        iterable: what to iterate over, or None for a bar updated by hand.
        **options: tqdm's options (``total``, ``desc``, ``unit``, ``leave``, ...).

    Returns:
        The ``tqdm.std.tqdm`` bar.
    """
    from tqdm.std import tqdm

    if in_kernel():
        options.update(file=sys.stdout, disable=False, leave=True, mininterval=1.0)
        options.setdefault("ascii", True)
    else:
        options.setdefault("disable", None)
    return tqdm(iterable, **options)
