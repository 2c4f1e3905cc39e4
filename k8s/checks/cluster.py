"""The RayService's numbers: head, GPU group, placement, and the Serve config against both."""

from __future__ import annotations

from k8s.checks.common import (
    HIGH_THROUGHPUT_ENV,
    INGRESS_DEPLOYMENT,
    MODEL_DEPLOYMENT,
    Doc,
    Report,
    containers,
    cpus,
    env,
    gpu_group,
    port,
    walk_pod_specs,
)


def check_cluster(ray: Doc, config: Doc | None, report: Report) -> None:
    """The head runs no replicas; one GPU group, pinned to A100s; Serve's numbers fit it."""
    cluster = ray["spec"].get("rayClusterConfig", {})
    head = cluster.get("headGroupSpec", {})
    workers = cluster.get("workerGroupSpecs", [])
    if str(head.get("rayStartParams", {}).get("num-cpus")) != "0":
        report.fail("consistency", "the head must start with num-cpus 0 so no replica runs there")
    group = gpu_group(ray)
    if group is None:
        report.fail("consistency", "expected exactly one GPU worker group")
        return
    tmpl = group["template"]
    worker = containers(tmpl)[0]
    gpus = float(worker["resources"]["limits"]["nvidia.com/gpu"])
    if str(worker["resources"].get("requests", {}).get("nvidia.com/gpu")) != str(
        worker["resources"]["limits"]["nvidia.com/gpu"]
    ):
        report.fail("consistency", "GPU worker: nvidia.com/gpu request must equal the limit")
    _check_gpu_placement(tmpl, report)
    if not any(v.get("emptyDir", {}).get("medium") == "Memory" for v in tmpl["spec"]["volumes"]):
        report.fail("consistency", "GPU worker: no memory-backed /dev/shm volume")
    for where, template in walk_pod_specs(ray):
        c = containers(template)[0]
        if port(c, "metrics") != 8080:
            report.fail("consistency", f"{where}: container port 'metrics' must be 8080")
        variables = env(c)
        for name, value in HIGH_THROUGHPUT_ENV.items():
            if variables.get(name) != value:
                # The controller (head) and every replica (workers) read it at start-up.
                report.fail("consistency", f"{where}: env {name} must be {value!r} on every node")
    for group_spec in [head, *workers]:
        metrics = group_spec.get("rayStartParams", {}).get("metrics-export-port")
        if metrics is not None and str(metrics) != "8080":
            report.fail("consistency", "rayStartParams metrics-export-port must be 8080")
    if config is not None:
        _check_serve_vs_cluster(config, group, gpus, worker, report)


def _check_gpu_placement(tmpl: Doc, report: Report) -> None:
    spec = tmpl.get("spec", {})
    keys = set(spec.get("nodeSelector", {}))
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    values: list[str] = [spec.get("nodeSelector", {}).get("nvidia.com/gpu.product", "")]
    for term in terms:
        for expr in term.get("matchExpressions", []):
            keys.add(expr.get("key"))
            values.extend(expr.get("values", []))
    if "nvidia.com/gpu.product" not in keys or not any("A100" in v for v in values):
        report.fail("consistency", "GPU worker: not pinned to A100 nodes (nvidia.com/gpu.product)")
    if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
        report.fail("consistency", "GPU worker: no toleration for the nvidia.com/gpu taint")


def _check_serve_vs_cluster(
    config: Doc, group: Doc, gpus: float, worker: Doc, report: Report
) -> None:
    http = config.get("http_options", {}).get("port", 8000)
    if port(worker, "serve") != http:
        report.fail("consistency", f"GPU worker: container port 'serve' must be {http}")
    for app in config.get("applications", []):
        args = app.get("args", {}) or {}
        deps = {d.get("name"): d for d in app.get("deployments", [])}
        missing = [n for n in (INGRESS_DEPLOYMENT, MODEL_DEPLOYMENT) if n not in deps]
        if missing:
            report.fail(
                "consistency", f"application {app.get('name')}: no deployment {missing} in config"
            )
        for name, dep in deps.items():
            if not 0 < int(dep.get("max_surge_percent", 0)) <= 100:
                # Unset, the code's value (sized for a local machine) applies; 0 stops old
                # replicas before replacements are up: a one-replica deployment has none.
                report.fail(
                    "consistency",
                    f"deployment {name}: set max_surge_percent (1-100) so a restart starts "
                    "replacements before it stops old replicas",
                )
            if name == MODEL_DEPLOYMENT:
                _check_model(dep, args, group, gpus, report)
            else:
                actor_gpus = dep.get("ray_actor_options", {}).get("num_gpus", 0)
                if float(actor_gpus or 0) != 0:
                    report.fail(
                        "consistency",
                        f"deployment {name}: num_gpus {actor_gpus}: only {MODEL_DEPLOYMENT} "
                        "uses the GPU (one per pod); another replica asking for one would "
                        "hold a whole A100 pod",
                    )
        for name, arg in ((MODEL_DEPLOYMENT, "num_cpus"), (INGRESS_DEPLOYMENT, "ingress_num_cpus")):
            cpus = deps.get(name, {}).get("ray_actor_options", {}).get("num_cpus")
            if arg in args and cpus is not None and float(args[arg]) != float(cpus):
                report.fail(
                    "consistency", f"deployment {name}: args {arg} differs from ray_actor_options"
                )
        if INGRESS_DEPLOYMENT in deps and MODEL_DEPLOYMENT in deps:
            _check_ingress(
                deps[INGRESS_DEPLOYMENT], deps[MODEL_DEPLOYMENT], args, group, worker, report
            )


def _check_model(dep: Doc, args: Doc, group: Doc, gpus: float, report: Report) -> None:
    where = f"deployment {MODEL_DEPLOYMENT}"
    actor_gpus = dep.get("ray_actor_options", {}).get("num_gpus", args.get("num_gpus"))
    if actor_gpus is None or float(actor_gpus) != 1.0 or gpus != 1.0:
        report.fail(
            "consistency",
            f"{where}: num_gpus per replica ({actor_gpus}) and nvidia.com/gpu per "
            f"worker pod ({gpus:g}) must both be 1: one FP16 replica per A100",
        )
    if "num_gpus" in args and float(args["num_gpus"]) != float(actor_gpus or 0):
        report.fail("consistency", f"{where}: args num_gpus differs from ray_actor_options")
    auto = dep.get("autoscaling_config")
    if auto is None:
        report.fail("consistency", f"{where}: no autoscaling_config")
        return
    for mine, theirs in (("min_replicas", "minReplicas"), ("max_replicas", "maxReplicas")):
        if auto.get(mine) != group.get(theirs):
            report.fail(
                "consistency",
                f"{where}: autoscaling_config.{mine} ({auto.get(mine)}) must equal the "
                f"worker group's {theirs} ({group.get(theirs)}): one replica per pod",
            )


def _check_ingress(
    ingress: Doc, model: Doc, args: Doc, group: Doc, worker: Doc, report: Report
) -> None:
    """Ingress bounds are k x the GPU group's, k ingress + 1 model fit a pod's CPUs, and the
    model takes every call the ingress replicas can have in flight."""
    where = f"deployment {INGRESS_DEPLOYMENT}"
    auto = ingress.get("autoscaling_config")
    if auto is None:
        report.fail("consistency", f"{where}: no autoscaling_config")
        return
    calls = args.get("ingress_calls_in_flight")
    if calls is None:
        # The model's max_ongoing_requests and autoscaling target are sized by it.
        report.fail("consistency", "args must set ingress_calls_in_flight")
        calls = 1
    most = int(auto.get("max_replicas", 0)) * int(calls)
    taken = model.get("max_ongoing_requests", args.get("max_ongoing_requests"))
    if taken is not None and int(taken) <= most:
        # Past it, calls (and /readyz's model round trip) queue in the ingress replicas.
        report.fail(
            "consistency",
            f"deployment {MODEL_DEPLOYMENT}: max_ongoing_requests ({taken}) must exceed "
            f"{INGRESS_DEPLOYMENT} max_replicas x ingress_calls_in_flight ({most})",
        )
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", 0)
    per_pod = auto.get("max_replicas", 0) // high if high else 0
    if per_pod < 1 or (auto.get("min_replicas"), auto.get("max_replicas")) != (
        per_pod * low,
        per_pod * high,
    ):
        report.fail(
            "consistency",
            f"{where}: autoscaling_config min/max_replicas ({auto.get('min_replicas')}.."
            f"{auto.get('max_replicas')}) must be the same multiple k of the worker group's "
            f"minReplicas/maxReplicas ({low}..{high}): k ingress replicas per GPU pod",
        )
        return
    model_cpus = float(model.get("ray_actor_options", {}).get("num_cpus", 1))
    ingress_cpus = float(ingress.get("ray_actor_options", {}).get("num_cpus", 1))
    pod_cpus = cpus(worker.get("resources", {}).get("limits", {}).get("cpu", "0"))
    wanted = model_cpus + per_pod * ingress_cpus
    if wanted > pod_cpus - 1:
        report.fail(
            "consistency",
            f"GPU worker: {MODEL_DEPLOYMENT} num_cpus ({model_cpus:g}) + {per_pod} x "
            f"{INGRESS_DEPLOYMENT} num_cpus ({ingress_cpus:g}) = {wanted:g} must leave at least "
            f"one of the pod's {pod_cpus:g} CPUs to HAProxy and Ray's own processes",
        )
