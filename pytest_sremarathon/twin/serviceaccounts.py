"""ServiceAccounts: the ``default`` account every namespace has, and the tokens ``kubectl create
token`` asks for.

* :class:`ServiceAccountController` is the controller manager's serviceaccount controller
  (``pkg/controller/serviceaccount/serviceaccounts_controller.go``): a ``default`` ServiceAccount
  in every namespace, made at bootstrap for the namespaces there are, when a namespace is
  created, and again when someone deletes it. Its accounts take their uid from their own
  derivation, not from the store's sequence: the simulation's objects keep the uids they had
  before the twin served ServiceAccounts (a probe's phase follows its pod's uid).
* :func:`token_request` answers a ``TokenRequest`` (``authentication.k8s.io/v1``) POSTed to
  ``…/serviceaccounts/<name>/token``, as ``pkg/registry/core/serviceaccount/storage/token.go``
  does: 404 for an account that does not exist, the name and namespace checked against the URL,
  ``expirationSeconds`` defaulted to an hour and held to [10 minutes, 2^32 s], the audiences
  defaulted to the API server's, an optional binding to a Pod, Secret or Node of the namespace.
  The token is the JWT a pod's mounted token is (:func:`.containers.service_account_token`),
  with its times in the twin's virtual clock. Nothing is stored.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Optional

from ..k8s.store import ApiError, Store, iso, not_found
from .containers import CLUSTER_DOMAIN, service_account_token

DEFAULT = "default"
#: ``SetDefaults_TokenRequestSpec``; ``ValidateTokenRequest``'s bounds.
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 10 * 60
MAX_EXPIRATION_SECONDS = 1 << 32
TOKEN_REQUEST = ("authentication.k8s.io/v1", "TokenRequest")
#: The kinds a token may be bound to (``--bound-object-kind``), all of core/v1.
BINDABLE = {"Pod": "pod", "Secret": "secret", "Node": "node"}


class ServiceAccountController:
    """Keeps a ``default`` ServiceAccount in every namespace. Call with the store lock held."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def bootstrap(self) -> None:
        for ns in self.store.list("Namespace"):
            self.ensure(ns["metadata"]["name"])

    def react(self, obj: dict[str, Any]) -> None:
        """A write changed or deleted ``obj``: a namespace (new, or gone) or a ServiceAccount (the
        ``default`` one deleted is made again, as the controller's watch on accounts does)."""
        kind, md = obj.get("kind"), obj.get("metadata") or {}
        if kind == "Namespace":
            self.ensure(md.get("name", ""))
        elif kind == "ServiceAccount" and md.get("name") == DEFAULT:
            self.ensure(md.get("namespace") or "")

    def ensure(self, namespace: str) -> Optional[dict[str, Any]]:
        """Create ``default`` in ``namespace`` if the namespace is there, active, and lacks it."""
        ns = self.store.get("Namespace", None, namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating" \
                or ns["metadata"].get("deletionTimestamp"):
            return None
        if self.store.get("ServiceAccount", namespace, DEFAULT) is not None:
            return None
        uid = str(uuid.uuid5(self.store.uid_namespace,
                             f"serviceaccount:{namespace}/{DEFAULT}@{self.store.resource_version}"))
        return self.store.create({"apiVersion": "v1", "kind": "ServiceAccount",
                                  "metadata": {"name": DEFAULT, "namespace": namespace}}, uid=uid)


def _invalid(name: str, field: str, value: Any, detail: str) -> ApiError:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    message = f"Invalid value: {shown}: {detail}"
    return ApiError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is invalid: {field}: {message}',
                    kind="TokenRequest", name=name, group="authentication.k8s.io",
                    causes=[{"reason": "FieldValueInvalid", "message": message, "field": field}])


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_token_ids: Iterator[int] = itertools.count(1)


def token_request(store: Store, namespace: str, name: str, body: Any) -> dict[str, Any]:
    """The answered ``TokenRequest`` for the account ``namespace/name`` (store lock held)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise _bad_request("the body of the request was in an unknown format - accepted media types include: "
                           "application/json, application/yaml, application/vnd.kubernetes.protobuf")
    if body.get("kind") not in (None, "", TOKEN_REQUEST[1]) or \
            body.get("apiVersion") not in (None, "", TOKEN_REQUEST[0]):
        raise _bad_request(f"the API version in the data ({body.get('apiVersion', '')}) does not match the "
                           f"expected API version ({TOKEN_REQUEST[0]})")
    md = dict(body.get("metadata") or {})
    if md.get("name") and md["name"] != name:
        raise _invalid(name, "metadata.name", md["name"], "must match the service account name if specified")
    if md.get("namespace") and md["namespace"] != namespace:
        raise _invalid(name, "metadata.namespace", md["namespace"],
                       "must match the service account namespace if specified")
    sa = store.get("ServiceAccount", namespace, name)
    if sa is None:
        raise not_found("ServiceAccount", name)
    spec = dict(body.get("spec") or {})
    if not spec.get("audiences"):
        spec["audiences"] = [f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"]
    seconds = spec.get("expirationSeconds")
    if seconds is None:
        seconds = DEFAULT_EXPIRATION_SECONDS
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise _bad_request(f"spec.expirationSeconds: expected an integer, got {seconds!r}")
    spec["expirationSeconds"] = seconds
    if seconds < MIN_EXPIRATION_SECONDS:
        raise _invalid("", "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes")
    if seconds > MAX_EXPIRATION_SECONDS:
        raise _invalid("", "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds")
    bound = _bound_objects(store, namespace, name, spec.get("boundObjectRef"))
    now = store.clock()
    issued = int(now.timestamp())
    jti = str(uuid.uuid5(store.uid_namespace, f"token:{namespace}/{name}@{issued}#{next(_token_ids)}"))
    token = service_account_token(namespace, name, sa_uid=sa["metadata"].get("uid"), bound=bound,
                                  audiences=spec["audiences"], issued_at=issued, expires_at=issued + seconds,
                                  token_id=jti)
    out_md = {**md, "name": md.get("name") or name, "namespace": md.get("namespace") or namespace,
              "creationTimestamp": iso(now)}
    return {"kind": TOKEN_REQUEST[1], "apiVersion": TOKEN_REQUEST[0], "metadata": out_md, "spec": spec,
            "status": {"token": token, "expirationTimestamp": iso(now + timedelta(seconds=seconds))}}


def _bound_objects(store: Store, namespace: str, name: str, ref: Any) -> dict[str, dict[str, Any]]:
    """The objects a token bound by ``ref`` names in its claims (a pod's node with it)."""
    if not ref:
        return {}
    if not isinstance(ref, dict):
        raise _bad_request("spec.boundObjectRef: expected an object")
    kind, api_version = ref.get("kind", ""), str(ref.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    if kind not in BINDABLE or group:  # (the group and kind decide, as schema.FromAPIVersionAndKind reads them)
        raise _bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
    obj = store.get(kind, None if kind == "Node" else namespace, ref.get("name", ""))
    if obj is None:
        raise not_found(kind, ref.get("name", ""))
    if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName", DEFAULT) != name:
        raise _bad_request(f'cannot bind token for serviceaccount "{name}" to pod running with different '
                           f'serviceaccount name.')
    if ref.get("uid") and ref["uid"] != obj["metadata"].get("uid"):
        raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{ref.get("name")}": the UID in '
                                        f'the bound object reference ({ref["uid"]}) does not match the UID in '
                                        f'record. The object might have been deleted and then recreated',
                       kind=kind, name=ref.get("name", ""))
    bound = {BINDABLE[kind]: obj}
    node_name = (obj.get("spec") or {}).get("nodeName") if kind == "Pod" else None
    if node_name:
        bound["node"] = store.get("Node", None, node_name) or {"metadata": {"name": node_name}}
    return bound
