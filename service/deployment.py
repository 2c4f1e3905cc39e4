"""The Ray Serve application: HTTP ingress replicas in front of the model replicas.

    client -> HAProxy -> SentimentIngress (xN, CPU) -> SentimentModel (one per GPU)

The ingress does everything per request and sends the texts of many requests as one call of
packed token ids; the model replica batches across every ingress and runs the forwards.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ray.serve.config import BackpressureConfig
from ray.serve.deployment import Application, Deployment

from service.envcheck import unknown_args, unknown_variables
from service.ingress import IN_PROCESS, MODEL_DEPLOYMENT, SentimentIngress
from service.replica import ModelReplica
from service.settings import Settings

INGRESS = "SentimentIngress"
MODEL = MODEL_DEPLOYMENT
# Replicas Ray may start beyond a deployment's count during a rolling restart (a change of
# `args` or code), in percent of it, rounded up: the old replicas serve until their
# replacements are ready. Ray's default, 0, stops old replicas first, which leaves a
# one-replica deployment with none: every request 503 for seconds, and for good when the
# replacements cannot start (docs/serving.md, "Run-time configuration"). The RayService sets
# its own per deployment, sized to the GPU pods.
SURGE_PERCENT = 100


def model_deployment(settings: Settings) -> Deployment:
    """The model replicas: one per GPU, batch knobs as `user_config`."""
    deployment: Deployment = ModelReplica.options(  # type: ignore[attr-defined]
        num_replicas=settings.num_replicas,
        # Calls, not requests: each ingress keeps a few in flight.
        max_ongoing_requests=settings.max_ongoing_requests,
        user_config=settings.batch.user_config(),
        max_surge_percent=SURGE_PERCENT,
        graceful_shutdown_timeout_s=settings.graceful_shutdown_timeout_s,
        # check_health fails on a stalled forward or a failed probe; Ray then replaces it.
        health_check_period_s=settings.health_check_period_s,
        health_check_timeout_s=settings.health_check_timeout_s,
        ray_actor_options={"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus},
        logging_config={"enable_access_log": settings.access_log},
    )
    return deployment


def ingress_deployment(settings: Settings) -> Deployment:
    """The HTTP ingress replicas, with Ray's own queue bound answered as 429."""
    deployment: Deployment = SentimentIngress.options(  # type: ignore[attr-defined]
        num_replicas=settings.ingress_replicas,
        max_ongoing_requests=settings.max_ongoing_requests,
        max_queued_requests=settings.max_queued_requests,
        backpressure_config=BackpressureConfig(
            status_code=429, retry_after_s=settings.retry_after_s
        ),
        user_config=settings.batch.user_config(),
        max_surge_percent=SURGE_PERCENT,
        graceful_shutdown_timeout_s=settings.graceful_shutdown_timeout_s,
        ray_actor_options={"num_cpus": settings.ingress_num_cpus},
        logging_config={"enable_access_log": settings.access_log},
    )
    return deployment


def application(settings: Settings) -> Application:
    """Both tiers as one application (Serve config files, KubeRay, tests, the bench)."""
    args = settings.model_dump(mode="json")
    model = model_deployment(settings).bind(args)
    return ingress_deployment(settings).bind(args, model)


def colocated(settings: Settings) -> Application:
    """Replicas that are ingress and model at once (service/colocated.py), `num_replicas` of
    them: each reserves the model's CPUs and GPUs and runs the model's health check."""
    deployment: Deployment = ingress_deployment(settings).options(
        num_replicas=settings.num_replicas,
        health_check_period_s=settings.health_check_period_s,
        health_check_timeout_s=settings.health_check_timeout_s,
        ray_actor_options={"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus},
    )
    return deployment.bind(settings.model_dump(mode="json"), IN_PROCESS)


def model_app_name(settings: Settings) -> str:
    """The model tier's application name when the tiers run as two applications."""
    return f"{settings.app_name}-model"


def tiers(settings: Settings) -> tuple[Application, Application]:
    """The tiers as two applications, model first; the ingress finds the model replicas by
    the model application's name, so either can be updated on its own."""
    args = settings.model_dump(mode="json")
    model = model_deployment(settings).bind(args)
    return model, ingress_deployment(settings).bind(args, model_app_name(settings))


def app_for(settings: Settings) -> Application:
    """The service as one application, in the layout `settings.layout` names."""
    return colocated(settings) if settings.layout == "colocated" else application(settings)


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Ray Serve application builder (`import_path: service.deployment:build_app`).

    `args` override `SENTIMENT_*` environment variables, field by field; a key that is not
    a setting fails the deploy, naming it. A SENTIMENT_* variable that is not one is logged.
    """
    unknown = unknown_args(args or {})
    if unknown:
        raise ValueError("; ".join(unknown))
    for warning in unknown_variables(os.environ):
        logging.getLogger("ray.serve").warning(warning)
    return app_for(Settings(**(args or {})))
