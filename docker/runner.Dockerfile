# The image function jobs run in: the slim client package, whose runner is the entrypoint.
#   docker build -f docker/runner.Dockerfile -t kinetic-runner:0.1.0 .
# A custom image for your jobs: start FROM this one and add your packages.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY client ./client
RUN pip install ./client && rm -rf /src

# The restricted pod security profile the operator applies to job pods (runAsUser 65532).
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin kinetic
USER 65532
WORKDIR /home/kinetic
CMD ["python", "-m", "kinetic.runner"]
