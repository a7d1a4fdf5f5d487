# A CPU JAX image: the local cluster's stand-in for a user's own JAX image, so that a
# multi-host (gang) job can meet through jax.distributed (rank 0's coordination service
# at KINETIC_COORDINATOR_ADDRESS) and run collectives over gloo on CPU.
# Built offline from a wheelhouse of jax and jaxlib that the host's pip fills (see
# devcluster/kinetic_dev/images.py, `ensure_jax`); the build context is that wheelhouse:
#   docker build --network none -f docker/jax.Dockerfile --build-arg BASE=python:3.12-slim \
#     --build-arg JAX_VERSION=0.12.0.1 -t kinetic-jax:0.12.0.1-py3.12 <wheelhouse>
ARG BASE=python:3.12-slim

# The wheels stay in this stage: only the installed packages reach the image.
FROM ${BASE} AS install
ARG JAX_VERSION
COPY *.whl /wheels/
RUN pip install -q --no-cache-dir --no-index --find-links=/wheels --prefix=/install \
      "jax==${JAX_VERSION}" "jaxlib==${JAX_VERSION}"

FROM ${BASE}
COPY --from=install /install /usr/local/
ENV PYTHONUNBUFFERED=1
RUN python -c "import jax; assert jax.devices()[0].platform == 'cpu'"
CMD ["python"]
