"""(being built)"""

from __future__ import annotations

from typing import Any

from ...errors import IllegalOperationError


def stream_reader(*args: Any) -> Any:
    raise IllegalOperationError("not built yet")
