"""Regenerate ``pytest_sremarathon/twin/_proto_schema.py`` from Kubernetes' ``generated.proto`` files.

    python tools/gen_proto_schema.py /path/to/kubernetes/api /path/to/kubernetes/apimachinery

(git checkouts of github.com/kubernetes/api and github.com/kubernetes/apimachinery). Only the
messages reachable from the kinds the twin serves (plus DeleteOptions, Eviction, Scale, TokenRequest) are
kept.
"""

from __future__ import annotations

import pprint
import re
import subprocess
import sys
from pathlib import Path

FILES = {
    "api": ["core/v1/generated.proto", "apps/v1/generated.proto", "policy/v1/generated.proto",
            "autoscaling/v1/generated.proto", "rbac/v1/generated.proto", "authorization/v1/generated.proto",
            "batch/v1/generated.proto", "authentication/v1/generated.proto"],
    "apimachinery": ["pkg/apis/meta/v1/generated.proto", "pkg/runtime/generated.proto",
                     "pkg/util/intstr/generated.proto", "pkg/api/resource/generated.proto"],
}
ROOTS = ["k8s.io.api.core.v1." + k for k in ("Pod", "Node", "Namespace", "Service", "Endpoints", "ConfigMap",
                                              "Secret", "Event", "ReplicationController", "ServiceAccount")]
ROOTS += ["k8s.io.api.apps.v1.Deployment", "k8s.io.api.apps.v1.ReplicaSet", "k8s.io.api.policy.v1.Eviction",
          "k8s.io.api.autoscaling.v1.Scale", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"]
ROOTS += ["k8s.io.api.rbac.v1." + k for k in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]
ROOTS += ["k8s.io.api.authorization.v1." + k for k in ("SelfSubjectAccessReview", "SelfSubjectRulesReview")]
ROOTS += ["k8s.io.api.apps.v1.DaemonSet", "k8s.io.api.apps.v1.ControllerRevision", "k8s.io.api.batch.v1.Job",
          "k8s.io.api.batch.v1.CronJob", "k8s.io.api.authentication.v1.TokenRequest"]
SCALARS = {"string", "bool", "int32", "int64", "uint32", "uint64", "bytes", "double", "float", "fixed32",
           "fixed64", "sint32", "sint64"}
FIELD = re.compile(r"^\s*(optional|repeated)?\s*(map<\s*(\w+)\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)\s*[;\[]")


def _git_show(repo: Path, path: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout if (repo / "HEAD").exists() and \
        not (repo / path).exists() else (repo / path).read_text()


def parse(text: str) -> dict[str, dict[int, tuple]]:
    package = re.search(r"^package ([\w.]+);", text, re.M).group(1)
    out: dict[str, dict[int, tuple]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^message (\w+) \{", line)
        if m:
            current = out.setdefault(f"{package}.{m.group(1)}", {})
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None or line.strip().startswith("//"):
            continue
        f = FIELD.match(line)
        if not f:
            continue
        label, type_, mkey, mval, name, num = f.groups()

        def resolve(t: str) -> str:
            if t in SCALARS:
                return t
            return t[1:] if t.startswith(".") else f"{package}.{t}"

        if mkey:
            current[int(num)] = (name, "map", mkey, resolve(mval))
        else:
            current[int(num)] = (name, "repeated" if label == "repeated" else "", resolve(type_))
    return out


EMBEDDED = re.compile(r'^\t([A-Z]\w*)\s+`json:"(?:,inline)?"\s+protobuf:"bytes,(\d+),')


def inline_fields(go_source: str, package: str) -> set[tuple[str, int]]:
    """(message, field number) pairs that Go embeds, so JSON flattens them into the parent."""
    out, current = set(), None
    for line in go_source.splitlines():
        m = re.match(r"^type (\w+) struct \{", line)
        if m:
            current = m.group(1)
            continue
        e = EMBEDDED.match(line)
        if e and current:
            out.add((f"{package}.{current}", int(e.group(2))))
    return out


TAGGED = re.compile(r'^\t\w+\s+.*`json:"(\w+)[,"].*protobuf:"\w+,(\d+),\w+,name=(\w+)')


def json_names(go_source: str, package: str) -> dict[tuple[str, int], str]:
    """(message, field number) -> the field's JSON name, where Go's ``json`` tag spells it other
    than the protobuf name (``BoundObjectReference.UID``: ``uID`` in protobuf, ``uid`` in JSON)."""
    out: dict[tuple[str, int], str] = {}
    current = None
    for line in go_source.splitlines():
        m = re.match(r"^type (\w+) struct \{", line)
        if m:
            current = m.group(1)
            continue
        t = TAGGED.match(line)
        if t and current and t.group(1) != t.group(3):
            out[(f"{package}.{current}", int(t.group(2)))] = t.group(1)
    return out


def main() -> None:
    api, machinery = Path(sys.argv[1]), Path(sys.argv[2])
    messages: dict[str, dict[int, tuple]] = {}
    inline: set[tuple[str, int]] = set()
    renamed: dict[tuple[str, int], str] = {}
    for root, files in ((api, FILES["api"]), (machinery, FILES["apimachinery"])):
        for f in files:
            text = _git_show(root, f)
            package = re.search(r"^package ([\w.]+);", text, re.M).group(1)
            messages.update(parse(text))
            try:
                go_source = _git_show(root, f.replace("generated.proto", "types.go"))
                inline |= inline_fields(go_source, package)
                renamed.update(json_names(go_source, package))
            except (subprocess.CalledProcessError, FileNotFoundError):
                pass
    for (msg, num), json_name in renamed.items():
        if msg in messages and num in messages[msg]:
            messages[msg][num] = (json_name, *messages[msg][num][1:])
    for msg, num in inline:
        if msg in messages and num in messages[msg]:
            name, _, type_ = messages[msg][num]
            messages[msg][num] = (name, "inline", type_)
    keep: dict[str, dict[int, tuple]] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep or name not in messages:
            continue
        keep[name] = messages[name]
        for spec in messages[name].values():
            ref = spec[-1]
            if ref not in SCALARS:
                todo.append(ref)
    header = ('"""Generated by tools/gen_proto_schema.py from kubernetes/api and kubernetes/apimachinery '
              '``generated.proto``.\n\nmessage -> {field number: (jsonName, "" | "repeated" | "inline", type) or '
              '(jsonName, "map", keyType, valueType)}. Do not edit.\n"""\n\n')
    body = "MESSAGES: dict[str, dict[int, tuple]] = " + pprint.pformat(dict(sorted(keep.items())), width=118) + "\n"
    Path(__file__).resolve().parent.parent.joinpath("pytest_sremarathon/twin/_proto_schema.py").write_text(
        header + body)
    print(f"{len(keep)} messages")


if __name__ == "__main__":
    main()
