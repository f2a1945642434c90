"""``sluice doctor``'s checks of Sluice's install (layer 5, doctor): the CRDs against
``crds/``, what each ServiceAccount of ``manifests/`` may do, and the admission webhook.

**RBAC.** Every access the manifests grant a ServiceAccount (:mod:`.manifests`) is asked
with a SelfSubjectAccessReview *as that ServiceAccount*: directly when the doctor runs as
it (in its pod), else impersonating it (``Impersonate-User``, what ``kubectl auth can-i
--as`` does; the API server adds the ServiceAccount's groups). Where impersonation is not
allowed, a SubjectAccessReview for the account is asked instead; where neither is, the
check says it could not be made.

**The webhook.** Its configuration is there with a CA bundle; its Service has a ready
endpoint; and a server-side dry run of an invalid PodGroup (``minTaskMember`` above
``minMember``) is refused *by the webhook*: the API server calls admission webhooks on
dry runs of objects whose webhooks declare ``sideEffects: None``, so the refusal proves
the whole path (API server, Service, TLS, the controller's handler) works.
"""

from __future__ import annotations

from typing import Any, Final

import anyio

from scheduler.api.errors import ApiError, InvalidObjectError, NotFoundError
from scheduler.api.labels import API_VERSION
from scheduler.doctor.crds import crd_differences, established
from scheduler.doctor.findings import Finding, Level
from scheduler.doctor.manifests import Access, Install, crd_documents
from scheduler.doctor.server_checks import Probe

__all__ = ["check_crds", "check_rbac", "check_webhook"]

_CRDS: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_SHOWN: Final = 4
"""How many differences, or refused accesses, a line names."""
_AT_ONCE: Final = 8
"""Access reviews in flight at once."""


async def check_crds(probe: Probe) -> list[Finding]:
    """Each CRD of ``crds/``: installed, established, and as the file has it."""
    out = []
    for source, doc in crd_documents():
        name = doc["metadata"]["name"]
        check = f"crd {name}"
        try:
            crd = await probe.client.request("GET", f"{_CRDS}/{name}")
        except NotFoundError:
            out.append(
                Finding(check, Level.FAIL, "not installed", f"kubectl apply -f crds/{source}")
            )
            continue
        except ApiError as exc:
            out.append(Finding(check, Level.WARN, f"cannot be read: {exc}"))
            continue
        if not established(crd):
            out.append(
                Finding(
                    check,
                    Level.FAIL,
                    "installed but not established (not served)",
                    f"kubectl describe crd {name}",
                )
            )
            continue
        differences = crd_differences(doc["spec"], crd.get("spec") or {})
        if differences:
            shown = "; ".join(differences[:_SHOWN])
            more = f" and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
            out.append(
                Finding(
                    check,
                    Level.FAIL,
                    f"differs from this Sluice's crds/{source} at {shown}{more}",
                    f"kubectl apply --server-side -f crds/{source}",
                )
            )
            continue
        out.append(Finding(check, Level.OK, f"installed, established, as crds/{source}"))
    return out


# ---------------------------------------------------------------------------- RBAC


def _attributes(access: Access) -> dict[str, str]:
    attributes = {"verb": access.verb, "group": access.group, "resource": access.resource}
    if access.subresource:
        attributes["subresource"] = access.subresource
    if access.namespace:
        attributes["namespace"] = access.namespace
    return attributes


class _Reviews:
    """How this run asks "may the account do it": as itself, by impersonation, or by a
    SubjectAccessReview (:meth:`choose` picks the first that works)."""

    def __init__(self, probe: Probe, namespace: str, account: str) -> None:
        self.probe = probe
        self.user = f"system:serviceaccount:{namespace}:{account}"
        self.groups = [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ]
        self.how = ""
        self._headers: dict[str, str] = {}

    async def choose(self, me: str) -> None:
        if me == self.user:
            self.how = "asked as the ServiceAccount itself"
        else:
            self._headers = {"Impersonate-User": self.user}
            self.how = "SelfSubjectAccessReview impersonating the ServiceAccount"

    async def allowed(self, access: Access) -> bool:
        if self.how.startswith("SubjectAccessReview"):
            return await self._subject_review(access)
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": _attributes(access)},
        }
        try:
            reply = await self.probe.client.request(
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                body=body,
                headers=self._headers,
            )
        except ApiError as exc:
            if not self._headers or getattr(exc, "code", 0) != 403:
                raise
            self.how = "SubjectAccessReview (impersonation refused)"
            return await self._subject_review(access)
        return bool((reply.get("status") or {}).get("allowed"))

    async def _subject_review(self, access: Access) -> bool:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": self.user,
                "groups": self.groups,
                "resourceAttributes": _attributes(access),
            },
        }
        reply = await self.probe.client.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body
        )
        return bool((reply.get("status") or {}).get("allowed"))


async def _who_am_i(probe: Probe) -> str:
    try:
        reply = await probe.client.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except ApiError:
        return ""
    return str(((reply.get("status") or {}).get("userInfo") or {}).get("username") or "")


async def _refused(reviews: _Reviews, accesses: tuple[Access, ...]) -> list[Access]:
    """The accesses the account may not use, asked :data:`_AT_ONCE` at a time (the first
    alone, so that a refused impersonation switches every later question at once)."""
    answers: dict[Access, bool] = {}
    if accesses:
        answers[accesses[0]] = await reviews.allowed(accesses[0])
    limiter = anyio.CapacityLimiter(_AT_ONCE)

    async def ask(access: Access) -> None:
        async with limiter:
            answers[access] = await reviews.allowed(access)

    async with anyio.create_task_group() as tg:
        for access in accesses[1:]:
            tg.start_soon(ask, access)
    return [a for a in accesses if not answers[a]]


async def check_rbac(probe: Probe, install: Install) -> list[Finding]:
    """For each ServiceAccount of the manifests: it exists, and may do everything the
    manifests grant it."""
    me = await _who_am_i(probe)
    out = []
    for account, accesses in sorted(install.accounts.items()):
        check = f"rbac {install.namespace}/{account}"
        if not accesses:
            continue
        try:
            await probe.client.request(
                "GET", f"/api/v1/namespaces/{install.namespace}/serviceaccounts/{account}"
            )
        except NotFoundError:
            out.append(
                Finding(
                    check,
                    Level.FAIL,
                    "the ServiceAccount does not exist",
                    "kubectl apply -k manifests",
                )
            )
            continue
        except ApiError as exc:
            out.append(Finding(check, Level.WARN, f"cannot read the ServiceAccount: {exc}"))
            continue
        reviews = _Reviews(probe, install.namespace, account)
        await reviews.choose(me)
        try:
            refused = await _refused(reviews, accesses)
        except ApiError as exc:
            out.append(
                Finding(
                    check,
                    Level.WARN,
                    f"cannot ask what it may do: {exc}",
                    "run as a user who may impersonate ServiceAccounts or create "
                    "SubjectAccessReviews (cluster-admin)",
                )
            )
            continue
        sources = sorted({a.source for a in accesses})
        if refused:
            named = ", ".join(str(a) for a in refused[:_SHOWN])
            more = f" and {len(refused) - _SHOWN} more" if len(refused) > _SHOWN else ""
            files = ", ".join(sorted({f"manifests/{a.source}" for a in refused}))
            out.append(
                Finding(
                    check,
                    Level.FAIL,
                    f"may not {named}{more} ({len(refused)} of {len(accesses)} the manifests "
                    f"grant; {reviews.how})",
                    f"kubectl apply -k manifests (the rules are in {files})",
                )
            )
        else:
            out.append(
                Finding(
                    check,
                    Level.OK,
                    f"may do all {len(accesses)} things {', '.join(sources)} grant it "
                    f"({reviews.how})",
                )
            )
    return out


# ---------------------------------------------------------------------------- the webhook


def _invalid_pod_group() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"generateName": "sluice-doctor-"},
        "spec": {"minMember": 1, "minTaskMember": {"doctor": 2}},
    }


async def check_webhook(probe: Probe, install: Install) -> Finding:
    """The admission webhook: configured, with a CA bundle, a ready endpoint, and
    refusing an invalid PodGroup in a dry run (the module's docstring)."""
    if install.webhook is None:
        return Finding("webhook", Level.OK, "the manifests configure none")
    name = install.webhook["metadata"]["name"]
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"
    try:
        config = await probe.client.request("GET", path)
    except NotFoundError:
        return Finding(
            "webhook",
            Level.FAIL,
            f"ValidatingWebhookConfiguration {name} is not installed",
            "kubectl apply -k manifests",
        )
    except ApiError as exc:
        return Finding("webhook", Level.WARN, f"cannot read {name}: {exc}")
    hooks = config.get("webhooks") or []
    missing_ca = [
        h.get("name", "?") for h in hooks if not (h.get("clientConfig") or {}).get("caBundle")
    ]
    if missing_ca:
        return Finding(
            "webhook",
            Level.FAIL,
            f"{name}: no caBundle for {', '.join(missing_ca)}: the API server cannot trust "
            "the controller's certificate",
            "kubectl apply -f manifests/certificate.yaml (cert-manager injects it), or patch "
            "it in by hand",
        )
    seen = []
    for service in {
        (s["namespace"], s["name"])
        for h in hooks
        if (s := (h.get("clientConfig") or {}).get("service"))
    }:
        ready = await _ready_endpoints(probe, *service)
        if ready == 0:
            return Finding(
                "webhook",
                Level.FAIL,
                f"{name}: Service {service[0]}/{service[1]} has no ready endpoint",
                f"is sluice-controller running? kubectl -n {service[0]} get pods -l "
                "app.kubernetes.io/name=sluice-controller",
            )
        if ready > 0:
            seen.append(f"Service {service[0]}/{service[1]} has {ready} ready endpoint(s)")
    urls = [u for h in hooks if (u := (h.get("clientConfig") or {}).get("url"))]
    if urls:
        seen.append(f"called at {', '.join(sorted(set(urls)))}")
    said, level, fix = await _dry_run(probe)
    return Finding("webhook", level, f"{name}: {'; '.join([*seen, said])}", fix)


async def _ready_endpoints(probe: Probe, namespace: str, service: str) -> int:
    """Ready endpoints of the Service's EndpointSlices; -1 when they cannot be read."""
    try:
        slices = await probe.client.request(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            query=[("labelSelector", f"kubernetes.io/service-name={service}")],
        )
    except ApiError:
        return -1
    return sum(
        1
        for s in slices.get("items") or ()
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready") is not False
    )


async def _dry_run(probe: Probe) -> tuple[str, Level, str]:
    """Create an invalid PodGroup with dryRun=All and read who refused it."""
    group, version = API_VERSION.split("/")
    for namespace in (probe.namespace, "default"):
        path = f"/apis/{group}/{version}/namespaces/{namespace}/podgroups"
        try:
            await probe.client.request(
                "POST", path, query=[("dryRun", "All")], body=_invalid_pod_group()
            )
        except InvalidObjectError as exc:
            if "denied the request" in str(exc):
                return "refused an invalid PodGroup in a dry run, as it should", Level.OK, ""
            return (
                f"an invalid PodGroup was refused, but not by the webhook: {exc}",
                Level.FAIL,
                "check the webhook's rules in manifests/webhook.yaml",
            )
        except NotFoundError as exc:
            if "namespaces" in str(exc) and namespace != "default":
                continue
            return f"cannot dry-run a PodGroup: {exc}", Level.WARN, "kubectl apply -f crds/"
        except ApiError as exc:
            if "failed calling webhook" in str(exc) or "webhook" in str(exc):
                return (
                    f"the API server cannot call it: {exc}",
                    Level.FAIL,
                    "check the controller's logs, its Service and its certificate",
                )
            return (
                f"cannot dry-run a PodGroup: {exc}",
                Level.WARN,
                "run as a user who may create PodGroups",
            )
        return (
            "an invalid PodGroup passed a dry run: the webhook was not called",
            Level.FAIL,
            "kubectl apply -k manifests (webhook.yaml), and check its rules and selectors",
        )
    return "no namespace to dry-run a PodGroup in", Level.WARN, ""
