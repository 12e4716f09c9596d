# writesafe: the HTTP service (`writesafe serve`), the reconciliation worker
# (`writesafe reconcile … --watch`) and the migration step (`writesafe db upgrade`) share this image.
# Your application module (the `module:ws` the commands load) must be in the image: it is imported
# from the working directory, /app, which holds the build context less writesafe's own source.

# The build stage makes the sdist and, from it, the wheel: what tests/test_packaging.py installs
# and checks. /app is the context without the library, so `import writesafe` finds the wheel.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN pip install build \
    && python -m build --outdir /dist . \
    && mkdir /app \
    && cp -a . /app \
    && rm -rf /app/writesafe /app/idempotency /app/ledger /app/reconciler /app/pyproject.toml

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Root installs the wheel with the service's extra and owns every file: the runtime user reads the code, cannot change it.
COPY --from=build /dist/*.whl /tmp/
RUN pip install "$(echo /tmp/*.whl)[service]" \
    && rm /tmp/*.whl \
    && useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin writesafe
COPY --from=build /app /app
WORKDIR /app
USER writesafe

EXPOSE 8000
ENTRYPOINT ["writesafe"]
CMD ["--help"]
