# The operator: the client package (shared models, layout) plus kinetic-operator and Kopf.
#   docker build -f docker/operator.Dockerfile -t kinetic-operator:0.1.0 .
#   helm install kinetic helm/kinetic -n kinetic-system --create-namespace \
#     --set image.repository=kinetic-operator --set image.tag=0.1.0 \
#     --set defaultJobImage=kinetic-runner:0.1.0 --set storageRoot=gs://BUCKET/kinetic
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY client ./client
COPY operator ./operator
RUN pip install ./client ./operator && rm -rf /src

RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin kinetic
USER 65532
WORKDIR /home/kinetic
# The chart passes the full command (kopf run ... -m kinetic_operator.main).
CMD ["kopf", "run", "--standalone", "--all-namespaces", "-m", "kinetic_operator.main"]
