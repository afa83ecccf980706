"""One raw file as the readers see it: opened once, its content decompressed at most once.

The importer makes one :class:`Source` per file and hands it to the registry (which reader's ``sniff`` claims
its first bytes) and then to that reader. ``head`` is the start of the file's *content*: for an xz- or
gzip-compressed file (samples keep their reports xz-compressed: an ncu report shrinks 5-40x) only that much is
inflated to sniff it. A reader that needs the content as a file (SQLite, Nsight Compute's reader) asks
:meth:`Source.file` for it: the compressed file is then decompressed, once, into a temporary folder that
:meth:`Source.close` removes. A reader that streams (Kineto reads gzip itself) reads ``path`` directly.

Errors name the file as given, also where a reader read the temporary copy.
"""

from __future__ import annotations

import gzip
import lzma
import tempfile
import zlib
from pathlib import Path
from types import TracebackType

from tracekit.errors import BadInputError, TracekitError, UnreadableFileError

try:  # zlib-ng inflates 2.5x faster than the stdlib zlib
    from zlib_ng import zlib_ng as _zlib
except ImportError:  # pragma: no cover - same results, slower
    import zlib as _zlib

COMPRESSED_SUFFIXES = (".xz", ".gz")
"""Suffixes of compressed raw files: the name without them is the file's plain name."""
MAX_DECOMPRESSED_BYTES = 32 << 30
"""A compressed raw file that expands past this is refused (a decompression bomb, or not a profile)."""
HEAD_BYTES = 1 << 20
"""How much of the content the sniffers see: Kineto's ``traceEvents`` key may sit after a large header."""

_XZ_MAGIC = b"\xfd7zXZ\x00"
_GZ_MAGIC = b"\x1f\x8b"
_OPENERS = {"xz": lzma.open, "gz": gzip.open}
_DAMAGED = (OSError, EOFError, lzma.LZMAError, zlib.error)


def plain_name(name: str) -> str:
    """The file name without a compression suffix: ``probe.ncu-rep.xz`` -> ``probe.ncu-rep``."""
    for suffix in COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def compression(first: bytes) -> str | None:
    """``xz``, ``gz`` or None, from a file's first bytes (content, not name)."""
    if first.startswith(_XZ_MAGIC):
        return "xz"
    if first.startswith(_GZ_MAGIC):
        return "gz"
    return None


class Source:
    """A raw file to read. ``path``: the file as given; ``size``: its bytes on disk; ``compression``: ``xz``,
    ``gz`` or None; ``name``: the name of its content (without a compression suffix); ``head``: the first
    :data:`HEAD_BYTES` of its content. Use as a context manager (or call :meth:`close`) so a decompressed copy
    is removed."""

    def __init__(self, path: Path) -> None:
        """Open ``path``: one clear error for a missing file, a folder, an empty file or a compressed file that
        is damaged or holds nothing."""
        self.path = Path(path)
        if not self.path.exists():
            raise BadInputError(f"{self.path} does not exist", "check the path")
        if self.path.is_dir():
            raise UnreadableFileError(
                self.path, "is a folder, not a profiler file", "give the files inside it"
            )
        self.size = self.path.stat().st_size
        if self.size == 0:
            raise UnreadableFileError(self.path, "is empty", "re-export or re-capture it")
        with self.path.open("rb") as f:
            first = f.read(HEAD_BYTES)
        self.compression = compression(first)
        self.name = plain_name(self.path.name) if self.compression else self.path.name
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._plain: Path | None = None if self.compression else self.path
        self.head_ok = True
        """False for a gzip file whose head could not be inflated (damaged near the start)."""
        if self.compression == "xz":
            self.head = self._strict_head()
        elif self.compression == "gz":
            self.head = self._gzip_head()
        else:
            self.head = first

    def _damaged(self, exc: BaseException) -> UnreadableFileError:
        return UnreadableFileError(
            self.path,
            f"is a damaged {self.compression} file ({exc})",
            "re-compress or send the uncompressed file",
        )

    def _gzip_head(self) -> bytes:
        """The first MiB of a gzip file's first member, inflated as far as it goes: a stream cut short gives
        what it holds (a reader that streams gzip reports the cut), damage sets ``head_ok`` False."""
        text = b""
        try:
            with self.path.open("rb") as f:
                d = _zlib.decompressobj(wbits=31)
                text = d.decompress(f.read(1 << 16), HEAD_BYTES)
                while len(text) < HEAD_BYTES and not d.eof:
                    more = f.read(1 << 16)
                    if not more:
                        break
                    text += d.decompress(d.unconsumed_tail + more, HEAD_BYTES - len(text))
        except (OSError, _zlib.error):
            self.head_ok = False
        return text

    def validate(self) -> None:
        """Read the head as a full decompression reads it: a damaged or empty compressed file raises here, with
        the message a full decompression gives (for gzip, whose head is first inflated leniently)."""
        if self.compression is not None:
            self.head = self._strict_head()
            self.head_ok = True

    def _strict_head(self) -> bytes:
        assert self.compression is not None
        try:
            with _OPENERS[self.compression](self.path, "rb") as src:
                head = src.read(HEAD_BYTES)
        except _DAMAGED as exc:
            raise self._damaged(exc) from exc
        if not head:
            raise UnreadableFileError(
                self.path, f"is an empty {self.compression} file (it holds no bytes)", "re-export it"
            )
        return head

    def file(self) -> Path:
        """A path holding the content itself: ``path``, or for a compressed file a decompressed copy under the
        plain name, made on the first call (at most :data:`MAX_DECOMPRESSED_BYTES`)."""
        if self._plain is not None:
            return self._plain
        assert self.compression is not None
        self._tmp = tempfile.TemporaryDirectory(prefix="tracekit-raw-")
        target = Path(self._tmp.name) / self.name
        written = 0
        try:
            with _OPENERS[self.compression](self.path, "rb") as src, target.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > MAX_DECOMPRESSED_BYTES:
                        raise UnreadableFileError(
                            self.path,
                            f"expands past {MAX_DECOMPRESSED_BYTES >> 30} GiB",
                            "decompress it yourself if it is real",
                        )
                    dst.write(chunk)
        except _DAMAGED as exc:
            self.close()
            raise self._damaged(exc) from exc
        except BaseException:
            self.close()
            raise
        self._plain = target
        return target

    def moved_to(self, path: Path) -> None:
        """The same content, now at ``path`` (a copy in a run's raw/): messages, the content's name and a plain
        file's path follow it; a decompressed copy already made is kept, renamed to match."""
        self.path = Path(path)
        name = plain_name(self.path.name) if self.compression else self.path.name
        if self.compression is None:
            self._plain = self.path
        elif self._plain is not None and name != self.name:
            self._plain = self._plain.rename(self._plain.with_name(name))
        self.name = name

    def named(self, exc: TracekitError) -> TracekitError:
        """``exc`` with the decompressed copy's path in its message replaced by the file as given."""
        if self._plain is None or self._plain == self.path or str(self._plain) not in exc.message:
            return exc
        exc.message = exc.message.replace(str(self._plain), str(self.path))
        if exc.hint:
            exc.hint = exc.hint.replace(str(self._plain), str(self.path))
        if isinstance(exc, UnreadableFileError):
            exc.path = self.path
        exc.args = (exc.message,)
        return exc

    def close(self) -> None:
        """Remove the decompressed copy, if one was made."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._plain = None if self.compression else self.path

    def __enter__(self) -> Source:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
