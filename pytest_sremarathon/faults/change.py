"""Faults that arrive as changes through the deploy pipeline (code, configuration,
manifests). Injection commits a curated change and deploys it; the on-call cleanup reverts it;
mitigation is judged on what the running pods actually execute."""

from __future__ import annotations

from ..pipeline.service import PipelineError, apply_edit
from ..twin.kubelet import Container
from .base import Fault, FaultKind, World


def _containers(world: World, ns: str, service: str) -> list[Container]:
    return [c for c in world.cluster.kubelet.containers.values()
            if c.namespace == ns and c.service == service and c.state == "running"
            and world.cluster.network.node_up.get(c.node, False)]


def _serving(world: World, ns: str, service: str) -> bool:
    return world.cluster.metrics.latest(ns, service, "ready_pods") >= 1


class ChangeFault(FaultKind):
    family = "change"

    def inject(self, world: World, fault: Fault) -> None:
        curated = world.curated(fault.app, fault.params["change"])
        assert curated.fault is not None
        change = world.pipelines.commit_edits(fault.app, [(e.file, e.find, e.replace) for e in curated.edits],
                                              curated.message, curated.author)
        fault.change = change.id
        fault.component = f"service:{fault.app}/{curated.fault.service}"
        fault.description = f"{self.name} in {fault.app}/{curated.fault.service}: {curated.message}"
        fault.impact = self.symptoms_from(world, fault.app, curated.fault.service)
        world.pipelines.deploy(fault.app, "HEAD", "orchestrator")

    def _service(self, world: World, fault: Fault) -> str:
        curated = world.curated(fault.app, fault.params["change"])
        assert curated.fault is not None
        return curated.fault.service

    def _signature_file(self, world: World, fault: Fault) -> tuple[str, str]:
        curated = world.curated(fault.app, fault.params["change"])
        assert curated.fault is not None
        signature = curated.fault.signature or curated.edits[0].replace.strip().splitlines()[0]
        return curated.edits[0].file, signature

    def cleanup(self, world: World, fault: Fault) -> None:
        """What the on-call human does at the end of the window: revert the change if it is
        still in the tree (a plain revert, or the inverse edit if later changes conflict)."""
        path, signature = self._signature_file(world, fault)
        if signature not in world.pipelines.head_file(fault.app, path):
            return
        try:
            world.pipelines.revert(fault.app, fault.change or "", "orchestrator")
        except PipelineError:
            curated = world.curated(fault.app, fault.params["change"])
            edits = []
            for e in curated.edits:
                text = world.pipelines.head_file(fault.app, e.file)
                if apply_edit(text, e.replace, e.find) is not None:
                    edits.append((e.file, e.replace, e.find))
            if edits:
                world.pipelines.commit_edits(fault.app, edits, f'Revert "{curated.message}"',
                                             "oncall-human <oncall@sremarathon.local>")
                world.pipelines.deploy(fault.app, "HEAD", "orchestrator")


class CodeFault(ChangeFault):
    """The faulty code is mitigated once no running pod of the service executes it."""

    def mitigated(self, world: World, fault: Fault) -> bool:
        path, signature = self._signature_file(world, fault)
        service = self._service(world, fault)
        for c in _containers(world, fault.app, service):
            artifact = world.cluster.artifacts.by_image(c.image)
            if artifact is not None and signature in artifact.files.get(path, ""):
                return False
        return _serving(world, fault.app, service)


class CodeException(CodeFault):
    name = "code-exception"
    description = "a code change raises an exception on a request path"


class CodeLatency(CodeFault):
    name = "code-latency"
    description = "a code change adds latency or N+1 downstream calls"


class ConfigFault(ChangeFault):
    """A bad configuration value is mitigated once no running pod of the service uses it."""

    def mitigated(self, world: World, fault: Fault) -> bool:
        curated = world.curated(fault.app, fault.params["change"])
        assert curated.fault is not None and curated.fault.key is not None
        service = self._service(world, fault)
        for c in _containers(world, fault.app, service):
            if c.ctx is not None and c.ctx.config_data.get(curated.fault.key) == curated.fault.value:
                return False
        return _serving(world, fault.app, service)


class ConfigWrongEndpoint(ConfigFault):
    name = "config-wrong-endpoint"
    description = "configuration points a service at a dependency that does not exist"


class ConfigBadTimeout(ConfigFault):
    name = "config-bad-timeout"
    description = "a timeout set far below the dependency's latency"
