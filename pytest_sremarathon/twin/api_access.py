"""Access reviews (``authorization.k8s.io/v1``): what ``kubectl auth can-i`` and client-go tools
ask before they act — a ``SelfSubjectAccessReview`` ("may I do this?", JSON or protobuf: client-go
POSTs protobuf when offered) and a ``SelfSubjectRulesReview`` ("what may I do here?", ``kubectl
auth can-i --list``) — and the ``SelfSubjectReview`` of ``authentication.k8s.io/v1`` ("who am I?",
``kubectl auth whoami``): the user a bearer token of the twin authenticates as.

The twin has no RBAC of its own: a caller may do everything except what the policy point
denies. So an access review is answered by putting the request it describes to that same
policy point (``admission.decide``, which decides and records nothing) as the API server would
on the real request: ``allowed`` is its decision, a denial says the rule. Reviews are never
stored and never recorded (they change nothing).

:class:`AccessReviews` is a part of :class:`~.apiserver.ApiServer`, like ``api_writes.ObjectWrites``.
"""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.store import RESOURCE_TYPES, REVIEW_KINDS, ResourceType
from ..policy import EXEC_VERBS, MutationRequest
from ..serving.http import Admission
from .api_common import JSON, Ctx, bad_request, dumps

#: The verbs a wildcard (``*``) stands for, and the resources a wildcard resource does.
_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
_RESOURCES = tuple(rt.plural for rt in RESOURCE_TYPES if rt.kind not in REVIEW_KINDS)
#: The rules every caller holds before the policy point judges (a cluster-admin's).
_ALL_RULES = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
              "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}


def policy_verb(verb: str, resource: str, subresource: Optional[str]) -> str:
    """The verb the API server puts to the policy point for this RBAC verb: an eviction is
    ``evict``, an exec or attach its own verb, a deletecollection a ``delete``."""
    if resource == "pods" and subresource == "eviction" and verb == "create":
        return "evict"
    if resource == "pods" and subresource in EXEC_VERBS and verb in ("create", "get"):
        return subresource
    return "delete" if verb == "deletecollection" else verb


def user_info(actor: str) -> dict[str, Any]:
    """The user a caller's token authenticates as (``actor``: ``agent``, ``operator`` …), as a
    token authenticator names a static token's user: no uid, the authenticated group."""
    return {"username": f"sremarathon:{actor}", "groups": ["system:authenticated"]}


class AccessReviews:
    """The review handlers of :class:`~.apiserver.ApiServer`."""

    admission: Admission

    def _review(self, ctx: Ctx, rt: ResourceType) -> tuple[int, str, bytes]:
        body = ctx.body()
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format - accepted media types include: "
                              "application/json, application/yaml, application/vnd.kubernetes.protobuf")
        if rt.kind == "SelfSubjectReview":
            return 201, JSON, dumps({"kind": rt.kind, "apiVersion": rt.group_version,
                                     "metadata": {"creationTimestamp": None},
                                     "status": {"userInfo": user_info(ctx.actor)}})
        sent = body.get("spec")
        spec: dict[str, Any] = sent if isinstance(sent, dict) else {}
        if rt.kind == "SelfSubjectAccessReview":
            status = self._access(ctx.actor, spec)
        else:
            status = self._rules(spec)
        answer = {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": {"creationTimestamp": None},
                  "spec": spec, "status": status}
        return 201, JSON, dumps(answer)

    def _access(self, actor: str, spec: dict[str, Any]) -> dict[str, Any]:
        attrs = spec.get("resourceAttributes")
        if not isinstance(attrs, dict):
            if not isinstance(spec.get("nonResourceAttributes"), dict):
                raise bad_request("SelfSubjectAccessReview.authorization.k8s.io is invalid: spec: Invalid value: "
                                  "exactly one of nonResourceAttributes or resourceAttributes must be specified")
            return {"allowed": True, "reason": "non-resource URLs are open to every caller of the sremarathon twin"}
        namespace = attrs.get("namespace") or None
        verbs = _VERBS if attrs.get("verb") == "*" else (str(attrs.get("verb") or ""),)
        resources = _RESOURCES if attrs.get("resource") == "*" else (str(attrs.get("resource") or ""),)
        subresource = attrs.get("subresource") or None
        for resource in resources:
            for verb in verbs:
                req = MutationRequest(actor=actor, channel="kube", verb=policy_verb(verb, resource, subresource),
                                      resource=resource, namespace=namespace, name=attrs.get("name") or None,
                                      subresource=subresource, app=namespace)
                decision = self.admission.decide(req)
                if not decision.allowed:
                    return {"allowed": False, "denied": True, "reason": decision.message or "denied"}
        return {"allowed": True, "reason": "allowed: the sremarathon policy has no rule against it"}

    @staticmethod
    def _rules(spec: dict[str, Any]) -> dict[str, Any]:
        # RBAC rules cannot say "except": the policy's denials make the list incomplete, and
        # `kubectl auth can-i VERB RESOURCE` answers each question exactly.
        return {**_ALL_RULES, "incomplete": True,
                "evaluationError": "the sremarathon policy point may deny some of these requests; ask "
                                   "`kubectl auth can-i VERB RESOURCE` for an exact answer"}
