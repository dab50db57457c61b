"""What the `kitjit` command's modules share: the user-facing error, the dtype names a
signature takes, and byte sizes as people read them."""

from __future__ import annotations

DTYPES = ("fp16", "bf16", "fp32", "fp64", "i8", "i16", "i32", "i64", "u8", "i1")


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover
