# `magnetar standalone` in a container: no JVM, one process, data on a volume.
#
#   docker build -t magnetar .
#   docker run --rm -p 6650:6650 -p 8080:8080 -v magnetar-data:/data magnetar
#
# Settings: mount a TOML file over /etc/magnetar/magnetar.toml (docs/configuration.md), set
# MAGNETAR_<SETTING> environment variables (`-e MAGNETAR_ADVERTISED_ADDRESS=pulsar://magnetar:6650`;
# they win over the file), or add flags after the image name (`magnetar standalone --help`); a flag
# given later wins over the same one in ENTRYPOINT, and flags win over the environment.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install from the source tree, then drop it: only the installed package stays in the image.
COPY pyproject.toml README.md /tmp/magnetar/
COPY src /tmp/magnetar/src
RUN pip install /tmp/magnetar && rm -rf /tmp/magnetar

# A fixed non-root user, so that a volume's owner is the same in every container of this image.
RUN groupadd --system --gid 10001 magnetar \
    && useradd --system --uid 10001 --gid magnetar --no-create-home --home-dir /data magnetar \
    && mkdir -p /data /etc/magnetar \
    && chown magnetar:magnetar /data
COPY docker/magnetar.toml /etc/magnetar/magnetar.toml

USER magnetar
WORKDIR /data
VOLUME /data
# 6650: the Pulsar binary protocol; 8080: the admin API and /metrics.
EXPOSE 6650 8080

# The broker answers SIGTERM (`docker stop`) by closing its ledgers and exiting.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/admin/v2/brokers/health', timeout=2)"]

ENTRYPOINT ["magnetar", "standalone", "--host", "0.0.0.0", "--port", "6650", "--http-port", "8080", "--data-dir", "/data", "--config", "/etc/magnetar/magnetar.toml"]
CMD ["--log-level", "INFO"]
