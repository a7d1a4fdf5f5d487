# The image function jobs run in: the slim client package, whose runner is the entrypoint.
# Its Python must be the client's minor version (cloudpickle's bytes depend on it), so
# the tag carries it:
#   docker build -f docker/runner.Dockerfile --build-arg BASE=python:3.12-slim \
#     -t kinetic-runner:0.1.0-py3.12 .
# A custom image for your jobs: start FROM this one and add your packages.
ARG BASE=python:3.12-slim
FROM ${BASE}

# Extra pip options: the local cluster builds offline from docker/wheels with
# "--no-index --find-links=/wheels".
ARG PIP_OPTIONS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY docker/wheels/ /wheels/
COPY client ./client
# The debug extra (debugpy) is what `@kinetic.run(debug=True)` starts in the Pod.
RUN pip install -q ${PIP_OPTIONS} './client[debug]' && rm -rf /src /wheels

# The restricted pod security profile the operator applies to job pods (runAsUser 65532).
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin kinetic
USER 65532
WORKDIR /home/kinetic
CMD ["python", "-m", "kinetic.runtime.runner"]
