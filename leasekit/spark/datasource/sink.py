"""(being built)"""

from __future__ import annotations

from typing import Any

from ...errors import IllegalOperationError


def batch_writer(*args: Any) -> Any:
    raise IllegalOperationError("not built yet")


def stream_writer(*args: Any) -> Any:
    raise IllegalOperationError("not built yet")
