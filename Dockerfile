# kcoord: a Kafka-wire-protocol broker whose heart is the consumer-group coordinator.
#
#   docker build -t kcoord .
#   docker run -p 9092:9092 -p 9308:9308 -v kcoord-data:/var/lib/kcoord/data \
#       -e KCOORD_ADVERTISED_LISTENERS=localhost:9092 kcoord
#
# KCOORD_ADVERTISED_LISTENERS is the address the broker gives clients (Metadata, FindCoordinator):
# clients outside the container must be able to reach it, e.g. localhost:9092 with the port
# published as above, or the container's DNS name (kcoord:9092) for clients on the same Docker
# network. Every setting can be given the same way: KCOORD_<NAME>, upper case, dots as
# underscores (e.g. KCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS=0); `kcoord config` shows the result.
FROM python:3.11-slim AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The build stage compiles the hot modules with mypyc (python -m kcoord.compiled.build); the
# compiler, the Python headers and mypy stay here, out of the image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
       $(python -c "import os, sysconfig; print('' if os.path.exists(sysconfig.get_paths()['include'] + '/Python.h') else 'python3-dev')") \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /build
# The dependencies (mypyc type-checks against them) and the compile extra, in a layer of their
# own before the sources: a change to the code rebuilds only the layers below.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['compile']))" > requirements.txt \
    && pip install -r requirements.txt \
    && rm requirements.txt
COPY README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY coordinator ./coordinator
COPY share ./share
COPY broker ./broker
COPY pipeline ./pipeline
COPY admin ./admin
COPY compiled ./compiled
# The kcoord package: its own modules and links to the folders above.
COPY src ./src
RUN PYTHONPATH=src python -m kcoord.compiled.build


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /build
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
    && pip install -r requirements.txt \
    && rm requirements.txt
# The sources with the compiled build beside them (package data of `kcoord.compiled`).
COPY --from=build /build ./
RUN pip install --no-deps . && rm -rf /build

RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/kcoord kcoord \
    && mkdir -p /var/lib/kcoord/data \
    && chown -R kcoord:kcoord /var/lib/kcoord
USER kcoord
WORKDIR /var/lib/kcoord
VOLUME ["/var/lib/kcoord/data"]

# 9092: the Kafka protocol; 9308: /metrics (Prometheus), /healthz, /readyz.
EXPOSE 9092 9308

HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9308/healthz', timeout=2)"]

# The same command line the tests run: `kcoord serve ...`.
ENTRYPOINT ["kcoord"]
CMD ["serve", "--host", "0.0.0.0", "--port", "9092", "--data-dir", "/var/lib/kcoord/data", "--metrics-port", "9308"]
