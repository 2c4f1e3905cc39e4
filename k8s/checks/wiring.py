"""Names that must meet across objects: monitors, Services, the Locust Jobs, images."""

from __future__ import annotations

from k8s.checks.common import (
    Doc,
    Report,
    containers,
    env,
    find,
    labels,
    name_of,
    pod_labels,
    selects,
    walk_pod_specs,
)


def check_wiring(docs: list[Doc], ray: Doc, report: Report) -> None:
    """Monitors, Services and the Locust Jobs find what they name; one image everywhere."""
    _check_monitors(docs, ray, report)
    _check_services(docs, report)
    _check_loadtest_job(docs, ray, report)
    _check_images(docs, report)


def _check_services(docs: list[Doc], report: Report) -> None:
    pods = pod_labels(docs)
    for svc in find(docs, "Service"):
        selector = svc.get("spec", {}).get("selector", {})
        if not any(selects(selector, p) for p in pods):
            report.fail("consistency", f"Service/{name_of(svc)} selects no pod: {selector}")


def _check_monitors(docs: list[Doc], ray: Doc, report: Report) -> None:
    pods = pod_labels([ray])
    monitors = find(docs, "PodMonitor")
    for node_type in ("head", "worker"):
        if not any(
            selects(m["spec"].get("selector", {}).get("matchLabels", {}), p)
            for m in monitors
            for p in pods
            if p["ray.io/node-type"] == node_type
        ):
            report.fail("consistency", f"no PodMonitor selects the Ray {node_type} pods")
    for m in monitors:
        for ep in m["spec"].get("podMetricsEndpoints", []):
            if ep.get("port") != "metrics":
                report.fail("consistency", f"PodMonitor/{name_of(m)} must scrape port 'metrics'")


def _check_loadtest_job(docs: list[Doc], ray: Doc, report: Report) -> None:
    jobs = find(docs, "Job")
    if not jobs:
        report.fail("consistency", "no Locust Job")
        return
    configmaps = {name_of(d) for d in find(docs, "ConfigMap")}
    claims = {name_of(d) for d in find(docs, "PersistentVolumeClaim")}
    services = find(docs, "Service")
    serve_svc = f"{name_of(ray)}-serve-svc"
    masters = 0
    for job in jobs:
        template = job["spec"]["template"]
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume and volume["configMap"]["name"] not in configmaps:
                report.fail(
                    "consistency",
                    f"Job/{name_of(job)}: ConfigMap {volume['configMap']['name']} does not exist",
                )
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in claims:
                report.fail("consistency", f"Job/{name_of(job)}: PVC {claim} does not exist")
        container = containers(template)[0]
        command = " ".join([*container.get("command", []), *container.get("args", [])])
        if "--master-host" in command:
            host = command.split("--master-host", 1)[1].split()[0]
            if not any(
                name_of(s) == host and selects(s["spec"].get("selector", {}), labels(t))
                for s in services
                for j in jobs
                for t in [j["spec"]["template"]]
            ):
                report.fail("consistency", f"Job/{name_of(job)}: no Service {host} selects a Job")
        if "--master" in command.split() or " --master " in f" {command} ":
            masters += 1
            host = env(container).get("LOCUST_HOST", "")
            if serve_svc not in host:
                report.fail(
                    "consistency",
                    f"Job/{name_of(job)}: LOCUST_HOST {host!r} is not the Serve service "
                    f"{serve_svc}",
                )
            for flag in ("--csv", "--html"):
                if flag not in command:
                    report.fail("consistency", f"Job/{name_of(job)}: Locust {flag} report missing")
    if masters != 1:
        report.fail("consistency", f"expected one Locust master Job, found {masters}")
    wanted = {env(c).get("WORKERS") for j in jobs for c in containers(j["spec"]["template"])}
    wanted.discard(None)
    for job in jobs:
        if not job["spec"].get("suspend"):
            # Applying k8s/ must not start a rehearsal against a service still warming up.
            report.fail("consistency", f"Job/{name_of(job)} must be created suspended")
        parallel = job["spec"].get("parallelism")
        if parallel is not None and {str(parallel)} != wanted:
            report.fail(
                "consistency",
                f"Job/{name_of(job)}: parallelism {parallel} != the master's WORKERS {wanted}",
            )


def _check_images(docs: list[Doc], report: Report) -> None:
    images = {
        c.get("image")
        for doc in docs
        for _, template in walk_pod_specs(doc)
        for c in containers(template)
    }
    if len(images) != 1:
        report.fail(
            "consistency", f"every pod should run the one project image: {sorted(map(str, images))}"
        )
