# One image for the operator and for function jobs (it carries the runner):
#   docker build -t kinetic-runner:0.1.0 .
#   kind load docker-image kinetic-runner:0.1.0
#   helm install kinetic helm/kinetic -n kinetic-system --create-namespace \
#     --set image.repository=kinetic-runner --set image.tag=0.1.0 --set storageRoot=gs://BUCKET/kinetic
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY client ./client
COPY operator ./operator
RUN pip install ".[operator]" && rm -rf /src

# The restricted pod security profile the operator applies to job pods.
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin kinetic
USER 65532
WORKDIR /home/kinetic
CMD ["python", "-m", "kinetic.runner"]
