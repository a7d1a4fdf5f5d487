# The operator: the client package (shared models, layout) plus kinetic-operator and Kopf.
#   docker build -f docker/operator.Dockerfile -t kinetic-operator:0.1.0 .
#   helm install kinetic helm/kinetic -n kinetic-system --create-namespace \
#     --set image.repository=kinetic-operator --set image.tag=0.1.0 \
#     --set storageRoot=gs://BUCKET/kinetic
ARG BASE=python:3.12-slim
FROM ${BASE}

# Extra pip options: the local cluster builds offline from docker/wheels with
# "--no-index --find-links=/wheels".
ARG PIP_OPTIONS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY docker/wheels/ /wheels/
COPY client ./client
COPY operator ./operator
RUN pip install -q ${PIP_OPTIONS} ./client ./operator && rm -rf /src /wheels

RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin kinetic
USER 65532
WORKDIR /home/kinetic
# The chart passes the full command (kopf run ... -m kinetic_operator.main).
CMD ["python", "-m", "kinetic_operator", "--all-namespaces"]
