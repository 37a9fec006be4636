"""The sealed run bundle (README: What a run records): record a run as it happens, seal it, read and verify it.

A run directory grows while the marathon runs::

    <run_dir>/events.jsonl        hash-chained records, one line each, flushed as written
    <run_dir>/scenario.yaml, agent/stderr.log, agent/reports.jsonl, wall.json, …  (add_file)

:meth:`BundleWriter.seal` then reveals the ground truth (``ground_truth.json``: the salt, the
schedule and whatever else the orchestrator knew), writes ``manifest.json`` (file digests,
chain head, ground-truth commitment, ed25519 public key and signature) and packs the directory
into ONE deterministic archive ``<run_dir>.tar.gz``.

Canonical archive layout — what :func:`verify` checks byte for byte:

* tar (ustar): regular files only, sorted by name, mode 0644, uid/gid 0, empty user/group
  names, mtime 0, zero padding, two zero blocks and zero fill to a 10240-byte record;
* gzip: one member whose header is ``1f 8b 08 10 00000000 02 ff`` (no file name, mtime 0) and
  whose comment is ``sremarathon-bundle/1 sha256:<hex>``: the SHA-256 of every byte after the
  header (deflate stream, CRC-32 and length). Deflate has bits a decoder ignores (block
  padding), so "decompresses to the same tar" alone would let some flipped bits pass; the
  digest in the header makes every byte of the file count, on any zlib build.

Integrity of the contents rests on the hash chain of ``events.jsonl``, the file digests listed
in the manifest and the ed25519 signature over the manifest. The signing key is per run unless
one is given (``--marathon-signing-key``); pass the expected public key to :func:`verify` to pin
it, otherwise a forger who rewrites everything and re-signs with a new key is only caught by
the key differing from the one published for the run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import tarfile
import threading
import zlib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from .clock import iso, parse_iso
from .events import EVENT_DATA, GENESIS, SCORED_TYPES, Event, canonical, sha256_hex

FORMAT = "sremarathon-bundle/1"
EVENTS = "events.jsonl"
MANIFEST = "manifest.json"
GROUND_TRUTH = "ground_truth.json"
RESERVED = frozenset({EVENTS, MANIFEST, GROUND_TRUTH})

# Manifest keys that seal() computes itself; manifest_extra may not override them.
_SEALED_KEYS = frozenset({"format", "scoring_version", "scenario_digest", "seed", "files", "events",
                          "ground_truth_commitment", "public_key", "signature"})
_REQUIRED_MANIFEST_KEYS = ("format", "run_id", "scenario_digest", "seed", "agent", "files", "events",
                           "ground_truth_commitment", "public_key", "signature")

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")

_BLOCK = 512
_RECORD = 20 * _BLOCK
_ZERO_BLOCK = bytes(_BLOCK)
_GZ_HEADER = b"\x1f\x8b\x08\x10\x00\x00\x00\x00\x02\xff"  # FCOMMENT, mtime 0, XFL 2 (level 9), OS unknown
_GZ_COMMENT = re.compile(rb"sremarathon-bundle/1 sha256:([0-9a-f]{64})")
_MAX_PROBLEMS_PER_FILE = 50
_CHUNK = 1 << 20


class BundleError(Exception):
    """A bundle cannot be opened at all (missing, not a bundle, undecodable archive)."""


# --------------------------------------------------------------------------- ground truth

def commitment(salt: str, schedule: Any) -> str:
    """``sha256(salt + canonical(schedule))``: committed in ``run.start``, revealed at seal.

    The schedule is normalised through JSON first, so the commitment computed from the live
    schedule object equals the one recomputed from ``ground_truth.json``.
    """
    return sha256_hex(salt + canonical(json.loads(canonical(schedule))))


def load_signing_key(path: Union[str, Path]) -> Ed25519PrivateKey:
    """Read an ed25519 private key: PEM (PKCS#8 or OpenSSH), 32 raw bytes, or 64 hex digits."""
    path = Path(path)
    data = path.read_bytes()
    stripped = data.strip()
    try:
        if stripped.startswith(b"-----BEGIN"):
            key: PrivateKeyTypes
            if b"OPENSSH PRIVATE KEY" in stripped:
                key = serialization.load_ssh_private_key(stripped, password=None)
            else:
                key = serialization.load_pem_private_key(stripped, password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError(f"{path}: not an ed25519 key ({type(key).__name__})")
            return key
        if len(data) == 32:
            return Ed25519PrivateKey.from_private_bytes(data)
        if re.fullmatch(rb"[0-9a-fA-F]{64}", stripped):
            return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(stripped.decode()))
    except (TypeError, ValueError) as exc:  # e.g. an encrypted PEM
        raise ValueError(f"{path}: cannot load the ed25519 signing key: {exc}") from None
    raise ValueError(f"{path}: not an ed25519 private key (expected PEM, 32 raw bytes or 64 hex digits)")


def public_key_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def _check_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name) or len(name.encode()) > 100:
        raise ValueError(f"bundle file name {name!r} is not allowed "
                         "(relative path of [A-Za-z0-9_.+-] segments, at most 100 bytes)")


def _manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def _signed_bytes(manifest: Mapping[str, Any]) -> bytes:
    return canonical({k: v for k, v in manifest.items() if k != "signature"}).encode()


# --------------------------------------------------------------------------- writing

class BundleWriter:
    """Appends hash-chained events to ``run_dir/events.jsonl`` and seals the run.

    Every :meth:`emit` writes and flushes one line before returning (``fsync=True`` also forces
    it to disk), so a run killed at any point leaves a verifiable prefix. ``events`` keeps the
    records the scorer reads (``retain``, default :data:`events.SCORED_TYPES`; ``None`` keeps
    everything) for live scoring; bulky telemetry (``sli``, ``alert``, ``cluster``…) lives only
    on disk. Safe to call from several threads (the API server records actions from its own).
    """

    def __init__(self, run_dir: Union[str, Path], *, signing_key: Optional[Ed25519PrivateKey] = None,
                 retain: Optional[Collection[str]] = SCORED_TYPES, fsync: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._key = signing_key if signing_key is not None else Ed25519PrivateKey.generate()
        self._fsync = fsync
        self._retain = None if retain is None else frozenset(retain)
        self._lock = threading.RLock()
        self._fh: Optional[io.BufferedWriter] = open(self.run_dir / EVENTS, "xb")
        self._seq = 0
        self._head = GENESIS
        self._last_t = ""
        self._stamped: Optional[tuple[datetime, str]] = None  # the last time spelt, and its spelling
        self._start: Optional[dict[str, Any]] = None
        self.events: list[Event] = []
        self.archive: Optional[Path] = None

    # -- properties
    @property
    def head(self) -> str:
        """SHA-256 of the last line written (``GENESIS`` before the first)."""
        return self._head

    @property
    def count(self) -> int:
        return self._seq

    @property
    def public_key(self) -> str:
        return public_key_hex(self._key)

    @property
    def sealed(self) -> bool:
        return self.archive is not None

    # -- recording
    def emit(self, t: datetime, type: str, data: Union[BaseModel, Mapping[str, Any]]) -> Event:
        """Validate ``data`` against ``EVENT_DATA[type]``, append one chained line, flush it."""
        with self._lock:
            return self._emit(t, type, data)

    def _emit(self, t: datetime, type: str, data: Union[BaseModel, Mapping[str, Any]]) -> Event:
        if self._fh is None:
            raise RuntimeError(f"{self.run_dir}: the bundle is sealed or closed")
        model = EVENT_DATA.get(type)
        if model is None:
            raise ValueError(f"unknown event type {type!r}")
        if self._seq == 0 and type != "run.start":
            raise ValueError(f"the first event must be run.start, not {type!r}")
        if t.tzinfo is None:
            raise ValueError("event times must be timezone-aware (virtual UTC time)")
        stamped = self._stamped  # (events come in runs of one virtual time: spelt once a run)
        if stamped is not None and stamped[0] == t:  # (equal instants spell the same, whatever the zone)
            stamp = stamped[1]
        else:
            stamp = iso(t)
            self._stamped = (t, stamp)
        if stamp < self._last_t:
            raise ValueError(f"virtual time goes backwards: {type} at {stamp} after {self._last_t}")
        if isinstance(data, BaseModel):
            if not isinstance(data, model):
                raise TypeError(f"{type} takes {model.__name__}, not {data.__class__.__name__}")
            payload = data.model_dump(mode="json")
            model.model_validate(payload)  # models are mutable: never record what verify would reject
        else:
            payload = model.model_validate(dict(data)).model_dump(mode="json")
        event = Event(seq=self._seq, t=stamp, type=type, data=payload, prev=self._head)
        line = canonical(event.model_dump()).encode()
        self._fh.write(line + b"\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())
        self._head = sha256_hex(line)
        self._seq += 1
        self._last_t = stamp
        if type == "run.start":
            self._start = payload
        if self._retain is None or type in self._retain:
            self.events.append(event)
        return event

    def add_file(self, name: str, content: Union[bytes, str]) -> Path:
        """Write (or replace) ``run_dir/name``; it is digested into the manifest at seal."""
        return self._write(name, content, "wb")

    def append_file(self, name: str, content: Union[bytes, str]) -> Path:
        """Append to ``run_dir/name`` (logs that grow during the run survive a crash)."""
        return self._write(name, content, "ab")

    def _write(self, name: str, content: Union[bytes, str], mode: str) -> Path:
        if self.sealed:
            raise RuntimeError(f"{self.run_dir}: the bundle is sealed")
        _check_name(name)
        if name in RESERVED:
            raise ValueError(f"{name} is written by the bundle itself")
        if isinstance(content, str):
            content = content.encode()
        path = self.run_dir / name
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, mode) as fh:
                fh.write(content)
        return path

    def close(self) -> None:
        """Close events.jsonl without sealing (the directory stays a verifiable, unsealed run)."""
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- sealing
    def seal(self, ground_truth: Mapping[str, Any], salt: str,
             manifest_extra: Optional[Mapping[str, Any]] = None) -> Path:
        """Reveal the ground truth, sign the manifest and pack ``<run_dir>.tar.gz``.

        ``ground_truth`` must hold the ``schedule`` whose commitment ``run.start`` carries;
        everything else in it (alert attribution …) is revealed as is. ``manifest_extra`` adds
        keys to the manifest (``run_id`` and ``agent`` may be overridden, the computed keys may
        not). Returns the archive path.
        """
        with self._lock:
            return self._seal(ground_truth, salt, manifest_extra)

    def _seal(self, ground_truth: Mapping[str, Any], salt: str,
              manifest_extra: Optional[Mapping[str, Any]]) -> Path:
        if self.sealed:
            raise RuntimeError(f"{self.run_dir}: already sealed")
        if self._start is None:
            raise ValueError("nothing to seal: no run.start event was recorded")
        if "schedule" not in ground_truth:
            raise ValueError("ground_truth must contain the 'schedule'")
        if "salt" in ground_truth and ground_truth["salt"] != salt:
            raise ValueError("ground_truth['salt'] differs from the salt given")
        truth = json.loads(canonical({**ground_truth, "salt": salt}))
        committed = commitment(salt, truth["schedule"])
        if committed != self._start["ground_truth_commitment"]:
            raise ValueError("the schedule and salt do not match the commitment recorded in run.start")
        extra = dict(manifest_extra or {})
        clash = sorted(_SEALED_KEYS & extra.keys())
        if clash:
            raise ValueError(f"manifest_extra may not set {', '.join(clash)}")

        self.close()
        (self.run_dir / GROUND_TRUTH).write_bytes(canonical(truth).encode() + b"\n")
        files = {name: _file_digest(self.run_dir / name)
                 for name in _walk(self.run_dir) if name != MANIFEST}
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "run_id": self.run_dir.resolve().name,
            "scenario_digest": self._start["scenario_digest"],
            "seed": self._start["seed"],
            "agent": self._start["agent"],
            "files": files,
            "events": {"count": self._seq, "head": self._head},
            "ground_truth_commitment": committed,
            "public_key": self.public_key,
            # The rules the records are written for; `sremarathon score` scores by them.
            "scoring_version": int(self._start.get("scoring_version", 1)),
        }
        manifest.update(extra)
        manifest = json.loads(canonical(manifest))
        manifest["signature"] = self._key.sign(_signed_bytes(manifest)).hex()
        (self.run_dir / MANIFEST).write_bytes(_manifest_bytes(manifest))
        self.archive = pack(self.run_dir)
        return self.archive


def _walk(root: Path) -> list[str]:
    """Relative POSIX names of every regular file under ``root``, sorted; names are checked."""
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in filenames:
            full = Path(dirpath) / fn
            name = full.relative_to(root).as_posix()
            if full.is_symlink() or not full.is_file():
                raise ValueError(f"{full}: only regular files can go into a bundle")
            _check_name(name)
            names.append(name)
    return sorted(names)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- the archive

def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")


def _tar_end_length(offset: int) -> int:
    """Bytes of end-of-archive (two zero blocks + zero fill to a record) after ``offset``."""
    total = offset + 2 * _BLOCK
    return (-(-total // _RECORD) * _RECORD) - offset


def _tar_stream(members: list[tuple[str, Union[Path, bytes]]]) -> Iterator[bytes]:
    offset = 0
    for name, source in members:
        _check_name(name)
        size = source.stat().st_size if isinstance(source, Path) else len(source)
        yield _tar_header(name, size)
        if isinstance(source, Path):
            written = 0
            with open(source, "rb") as fh:
                for chunk in iter(lambda: fh.read(_CHUNK), b""):
                    written += len(chunk)
                    yield chunk
            if written != size:
                raise RuntimeError(f"{source} changed while it was being packed")
        else:
            yield bytes(source)
        pad = -size % _BLOCK
        if pad:
            yield bytes(pad)
        offset += _BLOCK + size + pad
    yield bytes(_tar_end_length(offset))


def _gzip(chunks: Iterator[bytes]) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = io.BytesIO()
    crc, size = 0, 0
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
        size += len(chunk)
        body.write(comp.compress(chunk))
    body.write(comp.flush())
    body.write(struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
    data = body.getvalue()
    comment = f"{FORMAT} sha256:{hashlib.sha256(data).hexdigest()}".encode("ascii")
    return _GZ_HEADER + comment + b"\0" + data


def pack_members(members: Mapping[str, Union[bytes, Path]]) -> bytes:
    """The canonical ``.tar.gz`` bytes of the given members (name -> content or file)."""
    return _gzip(_tar_stream(sorted(members.items())))


def pack(run_dir: Union[str, Path], dest: Optional[Union[str, Path]] = None) -> Path:
    """Pack every file of ``run_dir`` into the canonical archive ``dest`` (``<run_dir>.tar.gz``)."""
    run_dir = Path(run_dir).resolve()
    dest = Path(dest) if dest is not None else run_dir.with_name(run_dir.name + ".tar.gz")
    data = pack_members({name: run_dir / name for name in _walk(run_dir)})
    tmp = dest.with_name(dest.name + ".partial")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, dest)
    return dest


def _read_gzip(data: bytes, problems: list[str]) -> Optional[bytes]:
    """Check the canonical gzip framing; return the decompressed tar (None if undecodable)."""
    if data[:len(_GZ_HEADER)] != _GZ_HEADER:
        where = next((i for i, (a, b) in enumerate(zip(data, _GZ_HEADER)) if a != b), len(data))
        problems.append(f"archive: gzip header is not canonical (byte {where})")
        if data[:3] != _GZ_HEADER[:3]:
            problems.append("archive: not a gzip file")
            return None
    nul = data.find(b"\0", len(_GZ_HEADER))
    if nul < 0:
        problems.append("archive: gzip header is not canonical (unterminated comment)")
        return None
    m = _GZ_COMMENT.fullmatch(data[len(_GZ_HEADER):nul])
    body = data[nul + 1:]
    if m is None:
        problems.append("archive: gzip header is not canonical (comment is not "
                        f"'{FORMAT} sha256:<digest>')")
    elif hashlib.sha256(body).hexdigest() != m.group(1).decode():
        problems.append("archive: compressed data does not match the digest in the gzip header")
    d = zlib.decompressobj(-15)
    try:
        tar = d.decompress(body)
    except zlib.error as exc:
        problems.append(f"archive: corrupt deflate stream ({exc})")
        return None
    if not d.eof:
        problems.append("archive: gzip stream is truncated")
        return None
    tail = d.unused_data
    if len(tail) < 8:
        problems.append("archive: gzip trailer is truncated")
        return None
    crc, size = struct.unpack("<II", tail[:8])
    if crc != zlib.crc32(tar) & 0xFFFFFFFF:
        problems.append("archive: gzip CRC-32 does not match the data")
    if size != len(tar) & 0xFFFFFFFF:
        problems.append("archive: gzip length field does not match the data")
    if len(tail) > 8:
        problems.append(f"archive: {len(tail) - 8} trailing bytes after the gzip member")
    return tar


def _read_tar(tar: bytes, problems: list[str]) -> dict[str, bytes]:
    """Walk the tar, checking it is exactly the canonical layout; return its members."""
    members: dict[str, bytes] = {}
    view = memoryview(tar)
    offset, last = 0, ""
    while True:
        if offset + _BLOCK > len(tar):
            problems.append(f"archive: tar is truncated at offset {offset}")
            return members
        block = tar[offset:offset + _BLOCK]
        if block == _ZERO_BLOCK:
            break
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "strict")
        except (tarfile.HeaderError, UnicodeDecodeError) as exc:
            problems.append(f"archive: corrupt tar header at offset {offset} ({exc})")
            return members
        name, size = info.name, info.size
        start, end = offset + _BLOCK, offset + _BLOCK + size
        padded = end + (-size % _BLOCK)
        if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            problems.append(f"archive: tar member {name!r} is not a regular file (type {info.type!r})")
            offset = padded
            continue
        try:
            _check_name(name)
            canonical_header = _tar_header(name, size)
        except ValueError:
            problems.append(f"archive: member name {name!r} is not allowed")
            canonical_header = None
        if block != canonical_header:
            problems.append(f"archive: tar header of {name!r} is not canonical")
        if name in members:
            problems.append(f"archive: {name!r} appears twice")
        elif name < last:
            problems.append(f"archive: {name!r} is out of order (members must be sorted)")
        last = max(last, name)
        if padded > len(tar):
            problems.append(f"archive: tar member {name!r} is truncated")
            return members
        members[name] = bytes(view[start:end])
        if any(view[end:padded]):
            problems.append(f"archive: padding after {name!r} is not zero")
        offset = padded
    expected = _tar_end_length(offset)
    if len(tar) - offset != expected or any(view[offset:]):
        problems.append("archive: tar end-of-archive blocks are not canonical")
    return members


# --------------------------------------------------------------------------- reading

class _DirFiles(Mapping[str, bytes]):
    """The files of a run directory, read on access."""

    def __init__(self, root: Path) -> None:
        self.root = root
        names = []
        for dirpath, _dirs, filenames in os.walk(root):
            for fn in filenames:
                full = Path(dirpath) / fn
                if full.is_file() and not full.is_symlink():
                    names.append(full.relative_to(root).as_posix())
        self._names = sorted(names)
        self._known = frozenset(names)

    def __getitem__(self, name: str) -> bytes:
        if name not in self._known:
            raise KeyError(name)
        return (self.root / name).read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._known


def _split_lines(raw: bytes) -> tuple[list[bytes], bool]:
    """Complete lines of events.jsonl and whether a partial last line was dropped."""
    if not raw:
        return [], False
    lines = raw.split(b"\n")
    partial = lines.pop()  # b"" when the file ends with a newline
    return lines, partial != b""


@dataclass
class Bundle:
    """An opened run record: a sealed archive, a sealed run directory, or a crashed run's
    directory (``manifest`` and ``ground_truth`` are ``None`` until sealed)."""

    path: Path
    files: Mapping[str, bytes]
    manifest: Optional[dict[str, Any]]
    ground_truth: Optional[dict[str, Any]]
    truncated: bool  # a partial last line of events.jsonl was dropped

    @property
    def sealed(self) -> bool:
        return self.manifest is not None

    @cached_property
    def _lines(self) -> list[bytes]:
        return _split_lines(self.files.get(EVENTS, b""))[0]

    def iter_events(self, types: Optional[Collection[str]] = None) -> Iterator[Event]:
        for n, line in enumerate(self._lines, 1):
            try:
                event = Event.model_validate_json(line)
            except ValidationError as exc:
                raise BundleError(f"{EVENTS} line {n}: not a valid event record") from exc
            if types is None or event.type in types:
                yield event

    @cached_property
    def events(self) -> list[Event]:
        return list(self.iter_events())


def open_bundle(path: Union[str, Path]) -> Bundle:
    """Open a sealed ``.tar.gz`` or a run directory (sealed or not). Does not verify."""
    path = Path(path)
    if path.is_dir():
        files: Mapping[str, bytes] = _DirFiles(path)
    elif path.is_file():
        problems: list[str] = []
        tar = _read_gzip(path.read_bytes(), problems)
        if tar is None:
            raise BundleError(f"{path}: {problems[-1]}")
        files = _read_tar(tar, problems)
    else:
        raise BundleError(f"{path}: no such bundle")
    if EVENTS not in files:
        raise BundleError(f"{path}: no {EVENTS} (not a run record)")
    manifest = _load_json(files, MANIFEST, path)
    truth = _load_json(files, GROUND_TRUTH, path) if manifest is not None else None
    lines, truncated = _split_lines(files[EVENTS])
    bundle = Bundle(path=path, files=files, manifest=manifest, ground_truth=truth, truncated=truncated)
    bundle.__dict__["_lines"] = lines  # prime the cache: read events.jsonl once
    return bundle


def _load_json(files: Mapping[str, bytes], name: str, path: Path) -> Optional[dict[str, Any]]:
    if name not in files:
        return None
    try:
        value = json.loads(files[name])
    except ValueError as exc:
        raise BundleError(f"{path}: {name} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BundleError(f"{path}: {name} is not a JSON object")
    return value


# --------------------------------------------------------------------------- verification

@dataclass
class VerifyResult:
    ok: bool
    sealed: bool
    truncated: bool
    problems: list[str] = field(default_factory=list)
    events: int = 0  # complete, chained records
    head: str = GENESIS

    def __str__(self) -> str:
        if not self.ok:
            return "\n".join(self.problems)
        state = "sealed" if self.sealed else "unsealed (truncated run: verified prefix)"
        return f"OK: {state}, {self.events} events, chain head {self.head}"


class _Problems:
    """Collects problems, capping how many one source may report."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._counts: dict[str, int] = {}

    def add(self, source: str, message: str) -> None:
        n = self._counts.get(source, 0) + 1
        self._counts[source] = n
        if n <= _MAX_PROBLEMS_PER_FILE:
            self.items.append(message)

    def finish(self) -> list[str]:
        for source, n in self._counts.items():
            if n > _MAX_PROBLEMS_PER_FILE:
                self.items.append(f"{source}: … and {n - _MAX_PROBLEMS_PER_FILE} more problems")
        return self.items


@dataclass
class _Chain:
    count: int = 0
    head: str = GENESIS
    truncated: bool = False
    start: Optional[dict[str, Any]] = None
    truth: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (line, type, data)


def _check_chain(raw: bytes, sealed: bool, out: _Problems) -> _Chain:
    chain = _Chain()
    lines, partial = _split_lines(raw)
    if partial:
        if sealed:
            out.add(EVENTS, f"{EVENTS} line {len(lines) + 1}: incomplete last line (no newline)")
        else:
            chain.truncated = True
    expected_seq, prev, last_t = 0, GENESIS, ""
    for n, line in enumerate(lines, 1):
        where = f"{EVENTS} line {n}"
        digest = sha256_hex(line)
        try:
            obj = json.loads(line)
        except ValueError:
            out.add(EVENTS, f"{where}: not valid JSON")
            prev, expected_seq = digest, expected_seq + 1
            continue
        if canonical(obj).encode() != line:
            out.add(EVENTS, f"{where}: record is not in canonical JSON form")
        try:
            event = Event.model_validate(obj)
        except ValidationError as exc:
            out.add(EVENTS, f"{where}: not a valid event envelope ({_first_error(exc)})")
            prev, expected_seq = digest, expected_seq + 1
            continue
        if event.seq != expected_seq:
            out.add(EVENTS, f"{where}: seq is {event.seq}, expected {expected_seq}")
        if event.prev != prev:
            out.add(EVENTS, f"{where}: prev hash mismatch")
        try:
            parse_iso(event.t)
            if event.t < last_t:
                out.add(EVENTS, f"{where}: time {event.t} goes backwards (previous {last_t})")
            last_t = max(last_t, event.t)
        except ValueError:
            out.add(EVENTS, f"{where}: bad time {event.t!r}")
        model = EVENT_DATA.get(event.type)
        if model is None:
            out.add(EVENTS, f"{where}: unknown event type {event.type!r}")
        else:
            try:
                model.model_validate(event.data)
            except ValidationError as exc:
                out.add(EVENTS, f"{where}: invalid {event.type} data ({_first_error(exc)})")
        if n == 1:
            if event.type != "run.start":
                out.add(EVENTS, f"{where}: first event is {event.type!r}, expected 'run.start'")
            else:
                chain.start = event.data
        if event.type in ("truth.fault", "truth.alert"):
            chain.truth.append((n, event.type, event.data))
        prev, expected_seq = digest, event.seq + 1
    chain.count, chain.head = len(lines), prev
    return chain


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ())) or "record"
    return f"{loc}: {err.get('msg', 'invalid')}"


def verify(path: Union[str, Path], *, public_key: Optional[str] = None) -> VerifyResult:
    """Check a bundle (archive or run directory) and name every problem found.

    Sealed: canonical archive bytes, every file digest, the hash chain and its head/count vs
    the manifest, the signature, the ground-truth commitment, and that ``truth.fault`` /
    ``truth.alert`` records agree with the revealed ground truth. Unsealed directory (a crashed
    or running marathon): the hash chain of the recorded prefix; ``truncated`` is always True.
    ``public_key`` (hex) pins the key the manifest must be signed with.
    """
    path = Path(path)
    out = _Problems()
    is_archive = path.is_file()
    if path.is_dir():
        files: Mapping[str, bytes] = _DirFiles(path)
    elif is_archive:
        problems: list[str] = []
        tar = _read_gzip(path.read_bytes(), problems)
        for p in problems:
            out.add("archive", p)
        if tar is None:
            return VerifyResult(ok=False, sealed=True, truncated=False, problems=out.finish())
        problems = []
        files = _read_tar(tar, problems)
        for p in problems:
            out.add("archive", p)
    else:
        return VerifyResult(ok=False, sealed=False, truncated=False, problems=[f"{path}: no such bundle"])

    sealed = is_archive or MANIFEST in files
    if EVENTS not in files:
        out.add(EVENTS, f"{EVENTS} is missing")
        return VerifyResult(ok=False, sealed=sealed, truncated=False, problems=out.finish())
    chain = _check_chain(files[EVENTS], sealed, out)
    if sealed:
        _check_sealed(files, chain, public_key, out)
    problems = out.finish()
    return VerifyResult(ok=not problems, sealed=sealed, truncated=not sealed,
                        problems=problems, events=chain.count, head=chain.head)


def _check_sealed(files: Mapping[str, bytes], chain: _Chain, trusted_key: Optional[str],
                  out: _Problems) -> None:
    if MANIFEST not in files:
        out.add(MANIFEST, f"{MANIFEST} is missing")
        return
    raw = files[MANIFEST]
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        out.add(MANIFEST, f"{MANIFEST}: not valid JSON ({exc})")
        return
    if _manifest_bytes(manifest) != raw:
        out.add(MANIFEST, f"{MANIFEST}: not in canonical form")
    missing = [k for k in _REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        out.add(MANIFEST, f"{MANIFEST}: missing {', '.join(missing)}")
    if manifest.get("format") != FORMAT:
        out.add(MANIFEST, f"{MANIFEST}: format is {manifest.get('format')!r}, expected {FORMAT!r}")

    # signature
    pk, sig = manifest.get("public_key"), manifest.get("signature")
    if not (isinstance(pk, str) and _HEX64.fullmatch(pk)):
        out.add(MANIFEST, f"{MANIFEST}: public_key is not 64 lowercase hex digits")
    elif not (isinstance(sig, str) and _HEX128.fullmatch(sig)):
        out.add(MANIFEST, f"{MANIFEST}: signature is not 128 lowercase hex digits")
    else:
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(pk)).verify(bytes.fromhex(sig), _signed_bytes(manifest))
        except (InvalidSignature, ValueError):
            out.add("signature", "signature does not match manifest")
        if trusted_key is not None and pk != trusted_key.strip().lower():
            out.add("signature", f"{MANIFEST}: signed with key {pk}, not the trusted key {trusted_key}")

    # file digests
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        out.add(MANIFEST, f"{MANIFEST}: 'files' is not a mapping")
        listed = {}
    for name in (EVENTS, GROUND_TRUTH):
        if name not in listed:
            out.add(MANIFEST, f"{MANIFEST}: {name} is not listed in files")
    for name in sorted(listed):
        if name == MANIFEST:
            out.add(MANIFEST, f"{MANIFEST}: lists itself in files")
        elif name not in files:
            out.add("files", f"file {name}: listed in manifest but missing")
        elif hashlib.sha256(files[name]).hexdigest() != listed[name]:
            out.add("files", f"file {name}: digest mismatch")
    for name in files:
        if name != MANIFEST and name not in listed:
            out.add("files", f"file {name}: not listed in manifest")

    # chain head and count
    ev = manifest.get("events")
    if not isinstance(ev, dict):
        out.add(MANIFEST, f"{MANIFEST}: 'events' is not a mapping")
    else:
        if ev.get("count") != chain.count:
            out.add(EVENTS, f"{EVENTS}: {chain.count} events but {MANIFEST} says {ev.get('count')}")
        if ev.get("head") != chain.head:
            out.add(EVENTS, f"{EVENTS}: chain head does not match {MANIFEST}")

    # run identity vs run.start
    start = chain.start or {}
    for key in ("scenario_digest", "seed"):
        if key in start and manifest.get(key) != start[key]:
            out.add(MANIFEST, f"{MANIFEST}: {key} differs from run.start")

    # ground truth and its commitment
    committed = manifest.get("ground_truth_commitment")
    if chain.start is not None and chain.start.get("ground_truth_commitment") != committed:
        out.add(EVENTS, f"{EVENTS} line 1: ground-truth commitment differs from {MANIFEST}")
    if GROUND_TRUTH not in files:
        out.add(GROUND_TRUTH, f"{GROUND_TRUTH} is missing")
        return
    try:
        truth = json.loads(files[GROUND_TRUTH])
        if not isinstance(truth, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        out.add(GROUND_TRUTH, f"{GROUND_TRUTH}: not valid JSON ({exc})")
        return
    salt, schedule = truth.get("salt"), truth.get("schedule")
    if not isinstance(salt, str) or "schedule" not in truth:
        out.add(GROUND_TRUTH, f"{GROUND_TRUTH}: needs a string 'salt' and a 'schedule'")
        return
    if commitment(salt, schedule) != committed:
        out.add(GROUND_TRUTH, f"{GROUND_TRUTH}: commitment mismatch (sha256(salt + schedule) "
                              "is not the commitment recorded at run start)")
    _check_truth_records(chain, schedule, truth.get("alerts"), out)


_FAULT_IDENTITY = ("kind", "app", "component", "change")


def schedule_faults(schedule: Any) -> Optional[list[dict[str, Any]]]:
    """The fault list of a schedule: ``schedule["faults"]`` or the schedule itself if a list."""
    faults = schedule.get("faults") if isinstance(schedule, dict) else schedule
    if isinstance(faults, list) and all(isinstance(f, dict) for f in faults):
        return faults
    return None


def _check_truth_records(chain: _Chain, schedule: Any, alerts: Any, out: _Problems) -> None:
    faults = schedule_faults(schedule)
    if faults is None:
        out.add(GROUND_TRUTH, f"{GROUND_TRUTH}: the schedule has no list of faults")
        faults = []
    by_id = {str(f.get("id")): f for f in faults}
    attribution = _attribution_map(alerts)
    for line, type_, data in chain.truth:
        where = f"{EVENTS} line {line}"
        if type_ == "truth.fault":
            planned = by_id.get(str(data.get("id")))
            if planned is None:
                out.add(EVENTS, f"{where}: truth.fault {data.get('id')!r} is not in the committed schedule")
                continue
            for key in _FAULT_IDENTITY:
                if key in planned and planned[key] != data.get(key):
                    out.add(EVENTS, f"{where}: truth.fault {data.get('id')!r} {key} differs from the schedule")
        elif attribution is not None:
            alert = data.get("alert")
            if alert in attribution and sorted(attribution[alert]) != sorted(data.get("faults") or []):
                out.add(EVENTS, f"{where}: truth.alert {alert!r} attribution differs from {GROUND_TRUTH}")


def _attribution_map(alerts: Any) -> Optional[dict[str, list[str]]]:
    """Alert attribution revealed in ground truth, as ``{alert: [fault…]}`` (None if absent).

    Accepts ``{alert: [fault…]}`` or ``[{"alert": id, "faults": [...]}, …]``.
    """
    if isinstance(alerts, dict) and all(isinstance(v, list) for v in alerts.values()):
        return {str(k): [str(f) for f in v] for k, v in alerts.items()}
    if isinstance(alerts, list) and all(isinstance(a, dict) and "alert" in a for a in alerts):
        return {str(a["alert"]): [str(f) for f in a.get("faults") or []] for a in alerts}
    return None


def ground_truth_attribution(bundle: Bundle) -> Optional[dict[str, list[str]]]:
    return _attribution_map((bundle.ground_truth or {}).get("alerts"))
