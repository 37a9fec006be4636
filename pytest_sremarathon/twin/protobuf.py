"""Decode Kubernetes protobuf request bodies (``application/vnd.kubernetes.protobuf``) to JSON dicts.

kubectl's typed clients send protobuf, not JSON, for some writes — notably every
``kubectl create configmap|secret|deployment|namespace|service …`` generator — and client-go
does not fall back to JSON on 415. The wire format is the 4-byte magic ``k8s\\0`` followed by a
``runtime.Unknown`` envelope (``typeMeta``, ``raw``); ``raw`` is the object, decoded here with
the field tables of :mod:`._proto_schema` (generated from the upstream ``generated.proto``
files). Responses are always JSON; clients accept that.

Go's protobuf encoder writes non-pointer fields even when empty, so zero values are dropped
from the result (``""``, ``0``, ``false``) except for fields where zero is meaningful and Go
uses a pointer (``replicas``, ``terminationGracePeriodSeconds`` …), mimicking the JSON
``omitempty`` the same object would have had.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import datetime, timezone
from typing import Any

from ..k8s.store import ApiError
from ._proto_schema import MESSAGES as _CORE_MESSAGES
from ._proto_schema_net import MESSAGES as _NET_MESSAGES
from ._proto_schema_scaling import MESSAGES as _SCALING_MESSAGES

MESSAGES = {**_CORE_MESSAGES, **_SCALING_MESSAGES, **_NET_MESSAGES}  # hand-transcribed tables beside the generated ones

MAGIC = b"k8s\x00"
_META = "k8s.io.apimachinery.pkg.apis.meta.v1."

#: API groups whose protobuf package is named differently (``k8s.io.api.rbac.v1``)
_GROUPS = {"core": "", "rbac": "rbac.authorization.k8s.io", "authorization": "authorization.k8s.io",
           "authentication": "authentication.k8s.io", "scheduling": "scheduling.k8s.io",
           "networking": "networking.k8s.io"}
#: (apiVersion, kind) -> message name, for the kinds clients may send
KINDS: dict[tuple[str, str], str] = {}
for _name in MESSAGES:
    _pkg, _, _kind = _name.rpartition(".")
    if _pkg.startswith("k8s.io.api."):
        _group, _version = _pkg[len("k8s.io.api."):].split(".")
        _group = _GROUPS.get(_group, _group)
        KINDS[(f"{_group}/{_version}" if _group else _version, _kind)] = _name
KINDS[("meta.k8s.io/v1", "DeleteOptions")] = _META + "DeleteOptions"
KINDS[("v1", "DeleteOptions")] = _META + "DeleteOptions"

#: fields where Go uses a pointer, so an explicit zero/false must survive
_KEEP_ZERO = frozenset({
    "replicas", "terminationGracePeriodSeconds", "revisionHistoryLimit", "progressDeadlineSeconds",
    "automountServiceAccountToken", "enableServiceLinks", "immutable", "runAsUser", "runAsGroup", "fsGroup",
    "privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsNonRoot", "gracePeriodSeconds",
    "activeDeadlineSeconds", "priority", "shareProcessNamespace", "setHostnameAsFQDN", "optional", "defaultMode",
    "exitCode", "restartCount", "port", "containerPort", "orphanDependents", "ready", "started",
    # Jobs and CronJobs (pointers in Go: a zero backoffLimit or a false suspend is what was meant)
    "parallelism", "completions", "backoffLimit", "suspend", "ttlSecondsAfterFinished", "startingDeadlineSeconds",
    "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "manualSelector",
    "expirationSeconds",  # a TokenRequest's (an explicit 0 is refused, not defaulted)
})
_GO_ZERO_TIME = -62135596800


def _bad(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", f"the body of the request could not be decoded as protobuf: {msg}")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise _bad("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Raw (number, wire type, value) triples: ints for varint/fixed, bytes for length-delimited."""
    out, i = [], 0
    v: int | bytes
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise _bad(f"unsupported wire type {wt}")
        out.append((num, wt, v))
    return out


def _signed(v: int, bits: int = 64) -> int:
    v &= (1 << 64) - 1
    if v >= 1 << 63:
        v -= 1 << 64
    if bits == 32:
        v = ((v + (1 << 31)) % (1 << 32)) - (1 << 31)
    return v


def _scalar(type_: str, wt: int, v: Any) -> Any:
    if type_ == "string":
        return v.decode("utf-8")
    if type_ == "bytes":
        return base64.b64encode(v).decode()
    if type_ == "bool":
        return bool(v)
    if type_ in ("int32", "int64"):
        return _signed(v, 32 if type_ == "int32" else 64)
    if type_ in ("uint32", "uint64"):
        return v
    if type_ == "double":
        return struct.unpack("<d", v)[0]
    if type_ == "float":
        return struct.unpack("<f", v)[0]
    return v


def _time(msg: bytes, micro: bool) -> Any:
    seconds = nanos = 0
    for num, _, v in _fields(msg):
        if num == 1:
            seconds = _signed(v)
        elif num == 2:
            nanos = _signed(v, 32)
    if seconds == _GO_ZERO_TIME or (seconds == 0 and nanos == 0):
        return None
    t = datetime.fromtimestamp(seconds, tz=timezone.utc)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{nanos // 1000:06d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _special(name: str, msg: bytes) -> tuple[bool, Any]:
    if name == _META + "Time":
        return True, _time(msg, False)
    if name == _META + "MicroTime":
        return True, _time(msg, True)
    if name == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return True, next((v.decode() for num, _, v in _fields(msg) if num == 1), "0")
    if name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        kind, ival, sval = 0, 0, ""
        for num, _, v in _fields(msg):
            if num == 1:
                kind = v
            elif num == 2:
                ival = _signed(v, 32)
            elif num == 3:
                sval = v.decode()
        return True, (sval if kind == 1 else ival)
    if name in ("k8s.io.apimachinery.pkg.runtime.RawExtension", _META + "FieldsV1"):
        raw = next((v for num, _, v in _fields(msg) if num == 1), b"")
        try:
            return True, json.loads(raw) if raw else {}
        except ValueError:
            return True, {}
    if name == _META + "Duration":
        ns = next((_signed(v) for num, _, v in _fields(msg) if num == 1), 0)
        return True, f"{ns / 1e9:g}s"
    return False, None


def decode_message(buf: bytes, name: str) -> Any:
    handled, value = _special(name, buf)
    if handled:
        return value
    schema = MESSAGES.get(name)
    if schema is None:
        raise _bad(f"unknown message {name}")
    out: dict[str, Any] = {}
    for num, wt, v in _fields(buf):
        spec = schema.get(num)
        if spec is None:
            continue
        field, label = spec[0], spec[1]
        if label == "map":
            key_t, val_t = spec[2], spec[3]
            k, val = "", None
            for n2, w2, v2 in _fields(v):
                if n2 == 1:
                    k = _scalar(key_t, w2, v2)
                elif n2 == 2:
                    val = _scalar(val_t, w2, v2) if val_t in _SCALAR_TYPES else decode_message(v2, val_t)
            if val is None:
                val = "" if val_t in ("string", "bytes") else val
            out.setdefault(field, {})[k] = val
            continue
        type_ = spec[2]
        if type_ in _SCALAR_TYPES:
            if wt == 2 and type_ not in ("string", "bytes"):  # packed repeated numerics
                values, j = [], 0
                while j < len(v):
                    x, j = _varint(v, j)
                    values.append(_scalar(type_, 0, x))
                out.setdefault(field, []).extend(values)
                continue
            value = _scalar(type_, wt, v)
        else:
            value = decode_message(v, type_)
        if label == "repeated":
            out.setdefault(field, []).append(value)
        elif label == "inline":
            if isinstance(value, dict):
                out.update(value)
        else:
            if value is None or (not isinstance(value, (dict, list)) and value in ("", 0, False)
                                 and field not in _KEEP_ZERO):
                continue
            out[field] = value
    return out


_SCALAR_TYPES = frozenset({"string", "bool", "int32", "int64", "uint32", "uint64", "bytes", "double", "float",
                           "fixed32", "fixed64", "sint32", "sint64"})


def decode(data: bytes) -> dict[str, Any]:
    """A ``k8s\\0``-framed protobuf object as its JSON dict (with ``apiVersion`` and ``kind``)."""
    if not data.startswith(MAGIC):
        raise _bad("missing the k8s protobuf magic prefix")
    api_version = kind = ""
    raw = b""
    for num, _, v in _fields(data[len(MAGIC):]):
        if num == 1:
            for n2, _, v2 in _fields(v):
                if n2 == 1:
                    api_version = v2.decode()
                elif n2 == 2:
                    kind = v2.decode()
        elif num == 2:
            raw = v
    name = KINDS.get((api_version, kind))
    if name is None:
        raise ApiError(415, "UnsupportedMediaType", f"protobuf bodies of kind {api_version}/{kind} are not "
                                                    f"supported; send application/json")
    obj = decode_message(raw, name)
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
